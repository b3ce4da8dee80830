#include "kv/spec.h"

#include <cerrno>
#include <cstdlib>

namespace kvpack {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

Status CheckName(std::string_view what, std::string_view s, std::string_view whole) {
  if (s.empty()) return InvalidArgument("empty " + std::string(what) + " in spec '" +
                                        std::string(whole) + "'");
  for (char c : s) {
    if (!IsNameChar(c)) {
      return InvalidArgument("bad character '" + std::string(1, c) + "' in " + std::string(what) +
                             " '" + std::string(s) + "' of spec '" + std::string(whole) + "'");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string MethodSpec::ToString() const {
  std::string out = name;
  for (size_t i = 0; i < params.size(); ++i) {
    out += (i == 0 ? ":" : ",") + params[i].first + "=" + params[i].second;
  }
  return out;
}

const std::string* MethodSpec::Find(std::string_view key) const {
  for (const auto& [k, v] : params) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string KvSpec::ToString() const {
  std::string out = policy ? policy->ToString() + " + " : "";
  const std::string k = keys.ToString(), v = values.ToString();
  return out + (k == v ? k : "k=" + k + " v=" + v);
}

Result<MethodSpec> ParseMethodSpec(std::string_view text) {
  const std::string_view whole = text;
  text = Trim(text);
  MethodSpec spec;
  const size_t colon = text.find(':');
  spec.name = std::string(Trim(text.substr(0, colon)));
  KVPACK_RETURN_IF_ERROR(CheckName("method name", spec.name, whole));
  if (colon == std::string_view::npos) return spec;
  std::string_view rest = text.substr(colon + 1);
  if (Trim(rest).empty()) {
    return InvalidArgument("spec '" + std::string(whole) + "' has ':' but no parameters");
  }
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = Trim(rest.substr(0, comma));
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument("parameter '" + std::string(item) + "' of '" + spec.name +
                             "' needs the form key=value");
    }
    const std::string key(Trim(item.substr(0, eq)));
    const std::string value(Trim(item.substr(eq + 1)));
    KVPACK_RETURN_IF_ERROR(CheckName("parameter name", key, whole));
    KVPACK_RETURN_IF_ERROR(CheckName("value of '" + key + "'", value, whole));
    if (spec.Find(key)) {
      return InvalidArgument("parameter '" + key + "' given twice for '" + spec.name + "'");
    }
    spec.params.emplace_back(key, value);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
    if (Trim(rest).empty()) return InvalidArgument("trailing ',' in '" + std::string(whole) + "'");
  }
  return spec;
}

Result<KvSpec> ParseKvSpec(std::string_view text) {
  KvSpec spec;
  std::string_view codecs = Trim(text);
  if (codecs.empty()) return InvalidArgument("empty KV cache spec");
  const size_t plus = codecs.find('+');
  if (plus != std::string_view::npos) {
    KVPACK_ASSIGN_OR_RETURN(MethodSpec policy, ParseMethodSpec(codecs.substr(0, plus)));
    spec.policy = std::move(policy);
    codecs = Trim(codecs.substr(plus + 1));
    if (codecs.find('+') != std::string_view::npos) {
      return InvalidArgument("spec '" + std::string(text) +
                             "' has more than one '+': write one policy, then the codecs");
    }
  }
  if (codecs.rfind("k=", 0) == 0) {
    const size_t v_at = codecs.find(" v=");
    if (v_at == std::string_view::npos) {
      return InvalidArgument("spec '" + std::string(text) +
                             "' gives keys with 'k=' but no ' v=' part for the values");
    }
    KVPACK_ASSIGN_OR_RETURN(spec.keys, ParseMethodSpec(codecs.substr(2, v_at - 2)));
    KVPACK_ASSIGN_OR_RETURN(spec.values, ParseMethodSpec(codecs.substr(v_at + 3)));
  } else {
    if (codecs.find(' ') != std::string_view::npos) {
      return InvalidArgument("unexpected space in codec spec '" + std::string(codecs) +
                             "' (separate keys and values as 'k=... v=...')");
    }
    KVPACK_ASSIGN_OR_RETURN(spec.keys, ParseMethodSpec(codecs));
    spec.values = spec.keys;
  }
  return spec;
}

Result<double> ParamAsDouble(const MethodSpec& spec, std::string_view key, double fallback) {
  const std::string* v = spec.Find(key);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v->c_str(), &end);
  if (errno != 0 || end != v->c_str() + v->size()) {
    return InvalidArgument("'" + spec.name + "': " + std::string(key) + "=" + *v +
                           " is not a number");
  }
  return d;
}

Result<int64_t> ParamAsInt(const MethodSpec& spec, std::string_view key, int64_t fallback) {
  const std::string* v = spec.Find(key);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(v->c_str(), &end, 10);
  if (errno != 0 || end != v->c_str() + v->size()) {
    return InvalidArgument("'" + spec.name + "': " + std::string(key) + "=" + *v +
                           " is not an integer");
  }
  return static_cast<int64_t>(i);
}

Result<std::string> ParamAsString(const MethodSpec& spec, std::string_view key,
                                  std::string fallback) {
  const std::string* v = spec.Find(key);
  return v ? *v : fallback;
}

Status CheckParamNames(const MethodSpec& spec, const std::vector<std::string>& allowed) {
  for (const auto& [key, value] : spec.params) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == key;
    if (!ok) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return InvalidArgument("unknown parameter '" + key + "' for '" + spec.name + "'; valid: " +
                             (list.empty() ? "(none)" : list));
    }
  }
  return Status::Ok();
}

}  // namespace kvpack
