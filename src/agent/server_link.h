// The agent's link to its server (docs/agent.md, "The node protocol"), over the one API client
// (api/client.h): the heartbeat as the agent's ControlPlaneClient, the watch of the node's task
// list that wakes the agent's loop, and the answers to the server's log requests. And the
// agent's log lines, which name the node (several agents share a process in `tessera dev`).
//
//   setLogNode("gpu-a");
//   auto server = httpControlPlane(std::move(api), assign, &users);   // for agent::Agent
//   std::thread watcher([&] { watchTasks(watch_api, "gpu-a", dir, 2s, wakeup, stop); });
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/agent.h"
#include "agent/protocol.h"
#include "agent/users.h"
#include "api/client.h"

namespace tessera::agent {

// The node this thread's agent runs (its log lines name it).
void setLogNode(const std::string& node);
// One line of the agent's log (core/log.h): "agent <node>: <line>".
void agentLog(const std::string& line);
// Sleeps `d`, or less if `stop` is set meanwhile.
void sleepUnlessStopped(std::chrono::milliseconds d, const std::atomic<bool>& stop);

// The heartbeat over HTTPS: PUT /v1/sys/nodes/<node>/heartbeat. Tasks become assignments
// (agent/protocol.h) run as the user `users` maps their tenant to (null: the agent's own).
// `advertise_address`, when not empty, is the address the node's peers reach it at (its tasks'
// rendezvous); else the server takes the one the agent's connections come from.
std::unique_ptr<ControlPlaneClient> httpControlPlane(std::unique_ptr<api::ApiClient> api,
                                                     AssignmentOptions assign, UserMapping* users,
                                                     std::string advertise_address = "");

// Wakes the agent's loop: the node's task list changed at the server (the watcher saw it), a
// task ended here, or it is time to renew the lease.
class Wakeup {
 public:
  explicit Wakeup(const std::atomic<bool>& stop) : stop_(stop) {}
  void poke() {
    std::lock_guard lock(mu_);
    poked_ = true;
    cv_.notify_all();
  }
  // Waits until poked or `limit` has passed (checking for a stop request meanwhile).
  void wait(std::chrono::milliseconds limit) {
    std::unique_lock lock(mu_);
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!poked_ && !stop_ && std::chrono::steady_clock::now() < until) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
    poked_ = false;
  }

 private:
  const std::atomic<bool>& stop_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool poked_ = false;
};

// Answers one of the server's log requests from the task's folder: PUT
// sys/nodes/<node>/logs/<id> with the bytes (as hex) and the log's size, or why not.
void answerLogRequest(api::ApiClient& api, const std::string& node, const std::string& work_dir,
                      const nlohmann::json& req);

// Watches the node's task list on its own connection (GET sys/nodes/<node>/tasks, which waits
// at the server for a change) and pokes `wakeup` when it moves; answers the server's log
// requests that come with it. Returns when `stop` is set.
void watchTasks(api::ApiClient& api, const std::string& node, const std::string& work_dir,
                std::chrono::milliseconds wait, Wakeup& wakeup, const std::atomic<bool>& stop);

}  // namespace tessera::agent
