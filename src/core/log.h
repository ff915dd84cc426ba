// The process's log: one line per event on standard error, through spdlog, each starting with
// its time in RFC 3339 UTC with milliseconds and its level:
//   2026-12-02T05:12:42.123Z warn node gpu-a lost: no heartbeat from its agent for 15000 ms
// Servers and agents log here; commands that talk to a person print plain messages instead.
//
//   core::logWarn("node {} lost: no heartbeat for {} ms", name, ttl_ms);
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace tessera::core {

enum class LogLevel { kInfo, kWarn, kError };

void logLine(LogLevel level, std::string_view line);

template <typename... Args>
void logInfo(fmt::format_string<Args...> format, Args&&... args) {
  logLine(LogLevel::kInfo, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void logWarn(fmt::format_string<Args...> format, Args&&... args) {
  logLine(LogLevel::kWarn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void logError(fmt::format_string<Args...> format, Args&&... args) {
  logLine(LogLevel::kError, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tessera::core
