#include "core/status.h"

#include <string>

namespace tessera::core {

std::string_view statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
  }
  return "UNKNOWN";
}

Status Status::withContext(std::string_view context) const {
  if (isOk()) {
    return *this;
  }
  return {code_, std::string(context) + ": " + message_};
}

std::string Status::toString() const {
  if (isOk()) {
    return "OK";
  }
  return std::string(statusCodeName(code_)) + ": " + message_;
}

}  // namespace tessera::core
