#include "core/step_breakdown.h"

namespace kvpack {
namespace {

thread_local StepBreakdown* t_active = nullptr;  // the innermost scope's breakdown
thread_local StepBreakdown* t_timing = nullptr;  // the breakdown of the part being timed
thread_local int t_part = 0;                     // that part (when t_timing is set)

}  // namespace

double StepBreakdown::PartsSeconds() const {
  double sum = 0.0;
  for (double s : seconds) sum += s;
  return sum;
}

StepBreakdownScope::StepBreakdownScope(StepBreakdown* b) : previous_(t_active) { t_active = b; }

StepBreakdownScope::~StepBreakdownScope() { t_active = previous_; }

StepPartTimer::StepPartTimer(StepPart p) {
  if (t_active == nullptr || t_timing != nullptr) return;
  target_ = t_active;
  part_ = static_cast<int>(p);
  t_timing = target_;
  t_part = part_;
  start_ = std::chrono::steady_clock::now();
}

StepPartTimer::~StepPartTimer() {
  if (target_ == nullptr) return;
  target_->seconds[part_] +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  t_timing = nullptr;
}

bool StepPartActive() { return t_timing != nullptr; }

void AddPoolWait(double seconds) {
  if (t_timing != nullptr) t_timing->wait_seconds[t_part] += seconds;
}

}  // namespace kvpack
