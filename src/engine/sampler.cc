#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace kvpack {

Status ValidateSamplerOptions(const SamplerOptions& o) {
  if (!std::isfinite(o.temperature)) return InvalidArgument("temperature must be finite");
  if (!(o.top_p > 0.0f)) return InvalidArgument("top-p must be > 0");
  if (!(o.repeat_penalty > 0.0f)) return InvalidArgument("repeat penalty must be > 0");
  if (o.repeat_last_n < 0) return InvalidArgument("repeat-last-n must be >= 0");
  return Status::Ok();
}

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {}

int32_t ArgMax(const float* logits, int64_t n) {
  return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
}

void Sampler::Accept(int32_t token) {
  recent_.push_back(token);
  const size_t keep = static_cast<size_t>(std::max(options_.repeat_last_n, 0));
  if (recent_.size() > keep) recent_.erase(recent_.begin(), recent_.end() - keep);
}

int32_t Sampler::Sample(float* logits, int64_t n_vocab) {
  if (options_.repeat_penalty != 1.0f) {
    // CTRL (Keskar et al. 2019) as in llama.cpp: divide positive logits, multiply negative.
    for (int32_t t : recent_) {
      if (t < 0 || t >= n_vocab) continue;
      float& l = logits[t];
      l = l > 0 ? l / options_.repeat_penalty : l * options_.repeat_penalty;
    }
  }
  if (options_.temperature <= 0.0f) return ArgMax(logits, n_vocab);

  candidates_.resize(n_vocab);
  for (int64_t i = 0; i < n_vocab; ++i) candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t n = candidates_.size();
  if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < n) {
    n = options_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + n, candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Softmax over the survivors (at temperature 1 for top-p, as llama.cpp does).
  std::vector<double> p(n);
  const float mx = candidates_[0].first;
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += (p[i] = std::exp(static_cast<double>(candidates_[i].first - mx)));
  if (options_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += p[i] / sum;
      if (cum >= options_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    sum += (p[i] = std::exp(static_cast<double>(candidates_[i].first - mx) / options_.temperature));
  }
  std::uniform_real_distribution<double> uniform(0.0, sum);
  double r = uniform(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= p[i];
    if (r <= 0.0) return candidates_[i].second;
  }
  return candidates_[n - 1].second;
}

}  // namespace kvpack
