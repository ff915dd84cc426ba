#include "agent/tenant_guard.h"

#include <fmt/format.h>

#include <algorithm>

namespace tessera::agent {

std::string describeIsolation(NodeMode mode, bool switch_users, const std::string& user_pattern,
                              const std::string& task_user) {
  const std::string what = mode == NodeMode::kDevelopment    ? "a development node"
                           : mode == NodeMode::kSingleTenant ? "a single-tenant node"
                                                             : "a shared node";
  if (switch_users) {
    return fmt::format("node mode {} ({}): each tenant's tasks run as its own Unix user ({})",
                       nodeModeName(mode), what, user_pattern);
  }
  if (mode == NodeMode::kShared) {
    return fmt::format(
        "node mode shared: the agent cannot switch users (not root, or --run-as agent), so every "
        "task runs as {} and tasks of one tenant at a time may run here; another tenant's are "
        "refused while they do (run as root, or declare --node-mode single-tenant)",
        task_user);
  }
  return fmt::format(
      "node mode {} ({}): every tenant's tasks run as {}: tenants are NOT isolated from each "
      "other here (each can read the others' credentials and files)",
      nodeModeName(mode), what, task_user);
}

core::Result<std::vector<TaskAssignment>> TenantGuard::heartbeat(
    const std::string& node, const NodeGpus& gpus, const std::vector<TaskReport>& reports) {
  auto answer = server_.heartbeat(node, gpus, reports);
  if (!answer.isOk()) {
    return answer;
  }
  std::vector<TaskAssignment> wanted = std::move(answer).value();
  std::set<std::string> running;
  for (const std::string& id : runtime_.running()) {
    running.insert(id);
  }
  std::set<std::string> listed;
  for (const TaskAssignment& a : wanted) {
    listed.insert(a.spec.id);
  }
  std::erase_if(tenant_of_, [&](const auto& t) {
    return !listed.contains(t.first) && !running.contains(t.first);
  });
  std::erase_if(refused_, [&](const auto& r) { return !listed.contains(r.first); });
  // Who holds the node: the tenants of the tasks let through that are still assigned or
  // running. A running task this guard never saw (adopted after a restart) is named by the
  // server's list, or, if the server no longer assigns it, holds the node for nobody else
  // until it has stopped.
  for (const TaskAssignment& a : wanted) {
    if (running.contains(a.spec.id)) {
      tenant_of_[a.spec.id] = a.spec.tenant;
    }
  }
  std::set<std::string> holders;
  for (const std::string& id : running) {
    auto it = tenant_of_.find(id);
    holders.insert(it != tenant_of_.end() ? it->second : std::string());
  }
  for (const auto& [id, tenant] : tenant_of_) {
    holders.insert(tenant);
  }
  for (TaskAssignment& a : wanted) {
    const std::string& id = a.spec.id;
    if (!a.invalid.empty() || running.contains(id) || tenant_of_.contains(id)) {
      continue;  // Refused for another reason, or running, or let through before.
    }
    const bool refused_before = refused_.contains({id, a.generation});
    if (!refused_before &&
        (holders.empty() || (holders.size() == 1 && *holders.begin() == a.spec.tenant))) {
      holders.insert(a.spec.tenant);
      tenant_of_[id] = a.spec.tenant;
      continue;
    }
    refused_.insert({id, a.generation});
    std::string others;
    for (const std::string& h : holders) {
      if (h != a.spec.tenant) {
        others += (others.empty() ? "" : ", ") +
                  (h.empty() ? std::string("a task adopted from before a restart")
                             : "tenant '" + h + "'");
      }
    }
    a.invalid = fmt::format(
        "node {} runs the tasks of one tenant at a time, and {} has tasks here: its agent cannot "
        "switch Unix users (it is not root, or runs --run-as agent), so tenant '{}' would share "
        "a user with them; run the agent as root, or declare the node --node-mode single-tenant",
        node_, others.empty() ? "another tenant" : others, a.spec.tenant);
  }
  return wanted;
}

}  // namespace tessera::agent
