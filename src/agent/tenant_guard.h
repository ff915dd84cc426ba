// Tenants on a node whose agent cannot keep them apart (docs/agent.md "Tenant isolation").
//
// An agent keeps tenants apart by running each tenant's tasks as its own Unix user
// (agent/users.h), which needs root. One that cannot (not root, or `--run-as agent`) runs every
// task as its own user, so any task could read every other task's credentials, logs and files.
// On such a node, unless the operator declares it single-tenant or a development node
// (`NodeMode`), `TenantGuard` lets the tasks of one tenant at a time start: while tasks of a
// tenant are assigned here or still running, another tenant's new tasks are refused (the agent
// reports them failed to start, saying why), so the server places or fails them elsewhere.
//
//   TenantGuard guard(*server, runtime, "gpu-a");
//   agent::Agent agent("gpu-a", gpus, guard, runtime, clock, options);
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/agent.h"
#include "agent/agent_config.h"
#include "agent/runtime.h"
#include "core/status.h"

namespace tessera::agent {

// One line for the agent's log at start: the mode, who tasks run as, and what that means for
// tenants here. `task_user` is the tasks' user when the agent does not switch users.
std::string describeIsolation(NodeMode mode, bool switch_users, const std::string& user_pattern,
                              const std::string& task_user);

// Whether the agent must refuse a second tenant's tasks (a shared node without users).
inline bool needsTenantGuard(NodeMode mode, bool switch_users) {
  return mode == NodeMode::kShared && !switch_users;
}

class TenantGuard final : public ControlPlaneClient {
 public:
  // `server` answers the heartbeats; `runtime` says which tasks still run here (a task taken
  // off the node keeps its tenant's hold until it has stopped). Both must outlive the guard.
  TenantGuard(ControlPlaneClient& server, const Runtime& runtime, std::string node)
      : server_(server), runtime_(runtime), node_(std::move(node)) {}

  // The server's answer, with the tasks of a tenant other than the one holding the node marked
  // invalid (so the agent reports them failed to start). Tasks already running are never
  // marked. Called from the agent's loop only.
  core::Result<std::vector<TaskAssignment>> heartbeat(
      const std::string& node, const NodeGpus& gpus,
      const std::vector<TaskReport>& reports) override;

 private:
  ControlPlaneClient& server_;
  const Runtime& runtime_;
  const std::string node_;
  std::map<std::string, std::string> tenant_of_;        // Tasks let through (or running): tenant.
  std::set<std::pair<std::string, uint32_t>> refused_;  // Refused at that generation: again.
};

}  // namespace tessera::agent
