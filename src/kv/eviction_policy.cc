#include "kv/eviction_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvpack {

int64_t Budget::Resolve(int64_t base) const {
  if (!is_fraction) return static_cast<int64_t>(value);
  // The epsilon keeps 0.29 * 100 at 29 tokens despite binary rounding.
  return std::max<int64_t>(
      1, static_cast<int64_t>(std::floor(value * static_cast<double>(base) + 1e-9)));
}

std::string Budget::ToString() const {
  if (!is_fraction) return std::to_string(static_cast<int64_t>(value));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", value);
  std::string s = buf;
  // A fraction always shows its decimal point, so that it reads back as a fraction.
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

Result<Budget> ParseBudget(const MethodSpec& spec, const std::string& key, const Budget* fallback) {
  const std::string* text = spec.Find(key);
  if (!text) {
    if (fallback) return *fallback;
    return InvalidArgument("'" + spec.name + "' needs " + key + "=N (tokens) or " + key +
                           "=0.F (a fraction of the prompt)");
  }
  Budget b;
  if (text->find_first_not_of("0123456789") == std::string::npos) {
    KVPACK_ASSIGN_OR_RETURN(int64_t n, ParamAsInt(spec, key, 0));
    if (n < 1) return InvalidArgument("'" + spec.name + "': " + key + " must be >= 1 token");
    b.value = static_cast<double>(n);
    return b;
  }
  KVPACK_ASSIGN_OR_RETURN(double f, ParamAsDouble(spec, key, 0.0));
  if (!(f > 0.0 && f <= 1.0)) {
    return InvalidArgument("'" + spec.name + "': " + key + "=" + *text +
                           " is neither a token count (an integer) nor a fraction in (0, 1]");
  }
  b.is_fraction = true;
  b.value = f;
  return b;
}

Result<PositionMode> ParsePositionMode(const MethodSpec& spec) {
  KVPACK_ASSIGN_OR_RETURN(std::string mode, ParamAsString(spec, "positions", "original"));
  if (mode == "original") return PositionMode::kOriginal;
  if (mode == "compact") return PositionMode::kCompact;
  return InvalidArgument("'" + spec.name + "': positions=" + mode +
                         " is not one of: original, compact");
}

Result<double> ParseShare(const MethodSpec& spec, const std::string& key, double fallback) {
  KVPACK_ASSIGN_OR_RETURN(double s, ParamAsDouble(spec, key, fallback));
  if (!(s >= 0.0 && s <= 1.0)) {
    return InvalidArgument("'" + spec.name + "': " + key + " is a share of the budget in [0, 1]");
  }
  return s;
}

}  // namespace kvpack
