// Status and Result<T>: how every fallible function in Tessera reports failure.
//
// No exceptions cross module boundaries. A function that can fail returns `Status` (no value)
// or `Result<T>` (a value or a failed Status). Messages are written for the person who has to
// act on them: say what was wrong and where ("nodes.csv:12: column 'gpu' is not a number").
//
//   Result<int> parsePort(std::string_view s);
//   TESSERA_ASSIGN_OR_RETURN(int port, parsePort(text));
//   TESSERA_RETURN_IF_ERROR(store.put(key, value));
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tessera::core {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // The caller's input is malformed.
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,  // The request is well formed but the state does not allow it.
  kResourceExhausted,
  kPermissionDenied,
  kUnauthenticated,
  kUnavailable,
  kInternal,
  kOutOfRange,  // Past what exists or is kept, e.g. a store revision whose history was compacted.
};

std::string_view statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool isOk() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "<context>: <message>", for adding where an error happened.
  Status withContext(std::string_view context) const;

  // "INVALID_ARGUMENT: message", or "OK".
  std::string toString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalidArgument(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}
inline Status notFound(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
inline Status failedPrecondition(std::string message) {
  return {StatusCode::kFailedPrecondition, std::move(message)};
}
inline Status alreadyExists(std::string message) {
  return {StatusCode::kAlreadyExists, std::move(message)};
}
inline Status permissionDenied(std::string message) {
  return {StatusCode::kPermissionDenied, std::move(message)};
}
inline Status outOfRange(std::string message) {
  return {StatusCode::kOutOfRange, std::move(message)};
}
inline Status unavailable(std::string message) {
  return {StatusCode::kUnavailable, std::move(message)};
}
inline Status internalError(std::string message) {
  return {StatusCode::kInternal, std::move(message)};
}

// A value of type T or a failed Status. Accessing the value of a failed Result is a bug and
// asserts in debug builds.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.isOk() && "a Result holding a Status must hold a failure");
  }

  bool isOk() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & {
    assert(isOk());
    return *value_;
  }
  const T& value() const& {
    assert(isOk());
    return *value_;
  }
  T&& value() && {
    assert(isOk());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace tessera::core

#define TESSERA_CONCAT_INNER_(a, b) a##b
#define TESSERA_CONCAT_(a, b) TESSERA_CONCAT_INNER_(a, b)

#define TESSERA_RETURN_IF_ERROR(expr)                 \
  do {                                                \
    ::tessera::core::Status tessera_status_ = (expr); \
    if (!tessera_status_.isOk())                      \
      return tessera_status_;                         \
  } while (false)

#define TESSERA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.isOk())                                     \
    return tmp.status();                               \
  lhs = std::move(tmp).value()

#define TESSERA_ASSIGN_OR_RETURN(lhs, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_CONCAT_(tessera_result_, __LINE__), lhs, expr)
