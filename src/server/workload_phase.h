// A workload's phase, as the scheduler decides it and the APIs show it (docs/server.md): pending
// until it runs, running, then one of three ends. Its name is what the API and the stored record
// carry ("pending", "running", "succeeded", "failed", "cancelled").
#pragma once

#include <optional>
#include <string_view>

namespace tessera::server {

enum class WorkloadPhase { kPending, kRunning, kSucceeded, kFailed, kCancelled };

constexpr std::string_view phaseName(WorkloadPhase p) {
  switch (p) {
    case WorkloadPhase::kPending:
      return "pending";
    case WorkloadPhase::kRunning:
      return "running";
    case WorkloadPhase::kSucceeded:
      return "succeeded";
    case WorkloadPhase::kFailed:
      return "failed";
    case WorkloadPhase::kCancelled:
      return "cancelled";
  }
  return "pending";
}

// The phase named `name`; nullopt for any other text.
constexpr std::optional<WorkloadPhase> parsePhase(std::string_view name) {
  for (WorkloadPhase p :
       {WorkloadPhase::kPending, WorkloadPhase::kRunning, WorkloadPhase::kSucceeded,
        WorkloadPhase::kFailed, WorkloadPhase::kCancelled}) {
    if (phaseName(p) == name) {
      return p;
    }
  }
  return std::nullopt;
}

// Whether a workload in `p` is done with (succeeded, failed, cancelled).
constexpr bool isFinished(WorkloadPhase p) {
  return p == WorkloadPhase::kSucceeded || p == WorkloadPhase::kFailed ||
         p == WorkloadPhase::kCancelled;
}

}  // namespace tessera::server
