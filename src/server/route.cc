#include "server/route.h"

#include <vector>

#include "core/strings.h"

namespace tessera::server {
namespace {

constexpr size_t kMaxTarget = 4096;
constexpr size_t kMaxSegment = 128;

// Percent-decodes `in`; `allow_slash` false refuses an encoded '/'.
core::Result<std::string> decode(std::string_view in, bool allow_slash) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) {
        return core::invalidArgument("truncated percent-escape in request target");
      }
      const int hi = core::hexDigitValue(in[i + 1]);
      const int lo = core::hexDigitValue(in[i + 2]);
      if (hi < 0 || lo < 0) {
        return core::invalidArgument("bad percent-escape in request target");
      }
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
      if (c == '/' && !allow_slash) {
        return core::invalidArgument("encoded '/' in a path segment");
      }
    } else if (c == '+' && allow_slash) {
      c = ' ';  // In a query, '+' is a space.
    }
    out.push_back(c);
  }
  return out;
}

bool segmentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '@' || c == ':';
}

core::Status checkSegment(const std::string& s) {
  if (s.empty()) {
    return core::invalidArgument("empty path segment");
  }
  if (s == "." || s == "..") {
    return core::invalidArgument("'" + s + "' is not allowed in a path");
  }
  if (s.size() > kMaxSegment) {
    return core::invalidArgument("path segment longer than 128 bytes");
  }
  for (char c : s) {
    if (!segmentChar(c)) {
      return core::invalidArgument("character not allowed in a path segment");
    }
  }
  return core::Status::ok();
}

}  // namespace

bool validName(std::string_view name) {
  if (name.empty() || name.size() > 63) {
    return false;
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && !(c == '-' && i > 0)) {
      return false;
    }
  }
  return true;
}

core::Result<ScopedPath> scopeTarget(std::string_view target, std::string_view chroot_tenant) {
  if (target.size() > kMaxTarget) {
    return core::invalidArgument("request target longer than 4096 bytes");
  }
  const size_t qmark = target.find('?');
  const std::string_view raw_path = target.substr(0, qmark);
  ScopedPath out;
  if (qmark != std::string_view::npos) {
    std::string_view q = target.substr(qmark + 1);
    while (!q.empty()) {
      const size_t amp = q.find('&');
      const std::string_view pair = q.substr(0, amp);
      q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
      if (pair.empty()) {
        continue;
      }
      const size_t eq = pair.find('=');
      TESSERA_ASSIGN_OR_RETURN(std::string key, decode(pair.substr(0, eq), true));
      std::string value;
      if (eq != std::string_view::npos) {
        TESSERA_ASSIGN_OR_RETURN(value, decode(pair.substr(eq + 1), true));
      }
      out.query[std::move(key)] = std::move(value);
    }
  }
  constexpr std::string_view kPrefix = "/v1/";
  if (raw_path.substr(0, kPrefix.size()) != kPrefix) {
    return core::notFound("API paths start with /v1/");
  }
  std::vector<std::string> segments;
  std::string_view rest = raw_path.substr(kPrefix.size());
  if (!rest.empty() && rest.back() == '/') {
    rest.remove_suffix(1);  // "/v1/workloads/" lists like "/v1/workloads".
  }
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    TESSERA_ASSIGN_OR_RETURN(std::string seg, decode(rest.substr(0, slash), false));
    TESSERA_RETURN_IF_ERROR(checkSegment(seg));
    segments.push_back(std::move(seg));
    if (slash == std::string_view::npos) {
      break;
    }
    rest = rest.substr(slash + 1);
    if (rest.empty()) {
      return core::invalidArgument("empty path segment");
    }
  }
  if (segments.empty()) {
    return core::notFound("no API path after /v1/");
  }
  size_t first = 0;
  if (!chroot_tenant.empty()) {
    if (segments[0] == "tenants" || segments[0] == "sys") {
      return core::notFound("not found");  // Outside the tenant: nothing to say about it.
    }
    out.tenant = std::string(chroot_tenant);
  } else if (segments[0] == "tenants" && segments.size() >= 3) {
    if (!validName(segments[1])) {
      return core::notFound("not found");
    }
    out.tenant = segments[1];
    first = 2;
  }
  for (size_t i = first; i < segments.size(); ++i) {
    if (i > first) {
      out.path += '/';
    }
    out.path += segments[i];
  }
  return out;
}

}  // namespace tessera::server
