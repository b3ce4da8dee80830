// Status and Result<T>: the error channel of the whole library.
//
// Design goals: recoverable problems (a malformed file, a bad spec string, a bad request)
// travel back to the caller as values with a message naming the file, tensor or field; the
// library never calls exit() and never throws across its API.
// Non-goals: error codes for programmatic dispatch beyond a coarse category.
#ifndef KVPACK_STATUS_H_
#define KVPACK_STATUS_H_

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace kvpack {

enum class StatusCode { kOk = 0, kInvalidArgument, kNotFound, kDataLoss, kUnimplemented, kIo,
                        kOutOfRange, kInternal };

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prepends context ("while loading x.gguf: ") to an error; no-op when ok.
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIo, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Internal("Result constructed from an ok Status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace kvpack

#define KVPACK_CONCAT_INNER(a, b) a##b
#define KVPACK_CONCAT(a, b) KVPACK_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is an error.
#define KVPACK_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::kvpack::Status kvpack_status_ = (expr);   \
    if (!kvpack_status_.ok()) return kvpack_status_; \
  } while (0)

// `KVPACK_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a Result or returns its Status.
#define KVPACK_ASSIGN_OR_RETURN(lhs, expr) \
  KVPACK_ASSIGN_OR_RETURN_IMPL(KVPACK_CONCAT(kvpack_result_, __LINE__), lhs, expr)
#define KVPACK_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#endif  // KVPACK_STATUS_H_
