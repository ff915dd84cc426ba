// The interposer's settings, read once from the caps file the agent binds into a sandboxed task's
// view (kCapsFile, below) or else from the environment the node agent gives a task on a softly
// shared GPU (agent/runtime.cc, gpuEnvironment):
//
//   TESSERA_CUDA_MEMORY_LIMIT   device memory cap of the process: a byte count, or a number with
//                               a K, M, G or T unit (powers of 1024, case-insensitive, "KiB" etc.
//                               too): "8192M". Unset: no cap.
//   TESSERA_CUDA_COMPUTE_SHARE  the percent of GPU time the process's kernels may use, 1 to 100.
//                               Unset or 100: launches are not throttled.
//   TESSERA_CUDA_PERIOD_MS      optional: the compute budget's period in ms, 1 to 10000, default
//                               100. The process may burst one period's share after idling.
//   TESSERA_CUDA_COMPUTE_GUARANTEE  optional, 1 to 100, meaningful in the caps file: the share
//                               the process is guaranteed. The agent gives it where the task may
//                               use more (a burst limit): TESSERA_CUDA_COMPUTE_SHARE is then what
//                               it may use now, and the agent rewrites the file as that changes;
//                               the interposer reads it again (interposer.cc).
//
// A value that does not parse makes the settings invalid; the interposer then fails closed (see
// interposer.cc). Example:
//
//   SettingsResult r = readSettings([](const char* n) -> const char* { return getenv(n); });
//   if (!r.error.empty()) { print r.error; refuse }
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::cuda {

inline constexpr std::int64_t kDefaultPeriodNs = 100'000'000;

struct Settings {
  std::optional<std::uint64_t> memory_limit_bytes;  // nullopt: no cap.
  int compute_share_percent = 100;                  // 100: no throttling.
  std::int64_t period_ns = kDefaultPeriodNs;
  int compute_guarantee_percent = 0;  // 0: none given (the share does not change).
};

// Either settings (error empty) or the one line to print, naming the variable, its value and
// what is wrong with it: "TESSERA_CUDA_MEMORY_LIMIT='12X': unknown unit 'X' (...)".
struct SettingsResult {
  Settings settings;
  std::string error;
};

// One parsed value; error is empty on success and otherwise says what is wrong with the text.
struct ParsedValue {
  std::uint64_t value = 0;
  std::string error;
};

// "1073741824", "8192M", "8g", "512KiB": a positive byte count that fits in 64 bits.
ParsedValue parseByteSize(std::string_view text);

// A decimal integer in [min, max], no sign, spaces or units.
ParsedValue parseWholeNumber(std::string_view text, std::uint64_t min, std::uint64_t max);

// Reads the variables through getenv_fn (getenv in the interposer, a table in tests).
SettingsResult readSettings(const char* (*getenv_fn)(const char*));

// The same settings from the text of the caps file the agent gives a sandboxed task
// (kCapsFile): "NAME=value" lines with the variables' names; blank lines and lines starting
// with '#' are skipped. Any other line, or a bad value, is an error that names `path`, the line
// and what is wrong with it.
SettingsResult readSettingsFile(std::string_view text, const std::string& path);

// Where a task's caps are when the agent runs it in a view of its own (agent/sandbox.h): its
// folder bound there read-only, the file owned by the agent, which replaces it whole when the
// share changes. Present and not empty, it is the task's caps, whatever the
// task's environment says; absent or empty (a node outside a sandbox), the variables are.
inline constexpr const char* kCapsFile = "/etc/tessera/cuda/caps";

}  // namespace tessera::cuda
