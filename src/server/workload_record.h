// A workload as the store keeps it (`/tenants/<t>/workloads/<name>`), typed, with its one codec:
// every reader of a stored workload (the registry, the scheduler's feed, both APIs) decodes it
// here, and every writer encodes it here, so the stored form has one definition.
//
//   TESSERA_ASSIGN_OR_RETURN(WorkloadRecord r, decodeWorkload(kv.value, kv.key));
//   r.status.phase = WorkloadPhase::kRunning;
//   store.put(kv.key, encodeWorkload(r));
//
// The stored form is JSON (the server's earlier versions wrote the same keys, so their stores
// load unchanged): name, spec (as submitted, with secret-looking env values sealed into
// sealed_env), submitted, started, finished, status (as the API shows it: statusJson),
// cancel_requested, suspended and events (the last 100).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/driver.h"

namespace tessera::server {

struct WorkloadEvent {
  std::string time;    // RFC 3339.
  std::string event;   // "submitted", "running", "evicted", "cancel requested", ...
  std::string reason;  // "" : none.
  bool operator==(const WorkloadEvent&) const = default;
};

// A workload keeps its last this many events.
inline constexpr size_t kMaxWorkloadEvents = 100;

struct WorkloadRecord {
  std::string name;
  nlohmann::json spec = nlohmann::json::object();  // As submitted (secret env "(sealed)").
  std::string submitted;                           // RFC 3339.
  std::string started;   // Its first start (RFC 3339, milliseconds); "" : not yet.
  std::string finished;  // When it finished (RFC 3339, milliseconds); "" : not finished.
  WorkloadStatus status;
  bool cancel_requested = false;
  // Suspended (`tessera suspend`, a Kubernetes Job's `spec.suspend`): its tasks are stopped and
  // none is placed until it is resumed. Unlike its spec, this may change.
  bool suspended = false;
  std::vector<WorkloadEvent> events;
  std::map<std::string, std::string> sealed_env;  // Env name -> sealed value (hex).
  // Set for a workload created through the Kubernetes API (server/kube): what it keeps of the
  // object to show it back ({"kind", "namespace", "labels", "annotations", "spec"}; its uid is
  // derived from the tenant, name and create revision).
  nlohmann::json kube;
  // Where the store has it (not part of the value): the revisions that created it and last
  // changed it (the Kubernetes API's resourceVersion).
  int64_t create_revision = 0;
  int64_t mod_revision = 0;

  // Appends an event now, dropping the oldest beyond kMaxWorkloadEvents.
  void addEvent(std::string time, std::string event, std::string reason = "");
};

// The stored form of `r`.
nlohmann::json workloadJson(const WorkloadRecord& r);
std::string encodeWorkload(const WorkloadRecord& r);
// A stored workload; an error names `where` (its key) and the field that is wrong.
core::Result<WorkloadRecord> decodeWorkload(std::string_view stored, const std::string& where);
core::Result<WorkloadRecord> workloadFromJson(const nlohmann::json& j, const std::string& where);

// A workload's status as the API shows it (and the record stores it), and back.
nlohmann::json statusJson(const WorkloadStatus& s);
core::Result<WorkloadStatus> statusFromJson(const nlohmann::json& j, const std::string& where);

}  // namespace tessera::server
