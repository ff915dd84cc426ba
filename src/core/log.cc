#include "core/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace tessera::core {
namespace {

spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> log = [] {
    auto l = std::make_shared<spdlog::logger>("tessera",
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
    l->set_level(spdlog::level::info);
    l->flush_on(spdlog::level::info);  // A line is on its way when the call returns.
    return l;
  }();
  return *log;
}

}  // namespace

void logLine(LogLevel level, std::string_view line) {
  switch (level) {
    case LogLevel::kInfo:
      logger().info("{}", line);
      break;
    case LogLevel::kWarn:
      logger().warn("{}", line);
      break;
    case LogLevel::kError:
      logger().error("{}", line);
      break;
  }
}

}  // namespace tessera::core
