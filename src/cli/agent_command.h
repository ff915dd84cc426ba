// `tessera agent ...`: the node agent's commands. `tessera agent discover` shows what the agent
// finds on this machine (GPUs, MIG devices, topology); `tessera agent run` registers the node
// with the server and runs its tasks (docs/agent.md). `runAgentLoop` is the agent itself, also
// run in-process by `tessera dev`, one per simulated node.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <map>
#include <optional>
#include <string>

#include "agent/agent_config.h"
#include "api/client.h"

namespace tessera::cli {

using api::ApiClient;
using api::ClientConfig;
using api::pathSegment;

void addAgentCommands(CLI::App& app, int* rc);

struct AgentSettings {
  agent::AgentConfig config;  // Node name and GPU discovery.
  ClientConfig client;        // The server: address, CA, the node's token.
  std::string work_dir = "/var/lib/tessera/agent";
  std::string cgroups = "auto";  // auto, required or off.
  std::string run_as;            // tenant or agent; "": tenant when root, else agent.
  std::string user_pattern = "tessera-{tenant}";
  std::optional<std::string> device_dir;  // Unset: /dev with NVML, none when simulated.
  // libtessera-cuda.so for time-sliced shares: a path, "auto" (next to the tessera binary:
  // ../lib/tessera/ or, in a build tree, src/cuda/) or "none".
  std::string cuda_interposer = "auto";
  std::string cuda_driver = "auto";  // --cuda-driver: a path, auto or none.
  int64_t wait_ms = 2000;            // A watch's wait at the server.
  int64_t fence_after_ms = 10000;
  int64_t no_leader_bound_ms = 600000;  // AgentOptions::no_leader_bound.
  // Tasks' credential files (identity tokens); "": CredentialFiles::defaultRoot (a tmpfs).
  std::string credentials_dir;
  // Joining (docs/server.md, "Nodes join"): with no token, the node's credential kept in
  // <work_dir>/node-credential from an earlier join, else a join with this join token (the
  // node's GPUs from discovery; `labels` besides the token's).
  std::string join_token;
  std::map<std::string, std::string> labels;
  // Tasks in namespaces of their own (agent/sandbox.h): auto (when the machine allows it: root),
  // required (refuse to start without) or off.
  std::string sandbox = "auto";
  // Processes and threads each task may have at once; 0: no limit.
  int64_t task_pids_max = 4096;
  // The address other nodes reach this one at (its tasks' rendezvous); "": the one the server
  // sees the agent's connections come from.
  std::string advertise_address;
  // On stop, leave running tasks to their shims for the next agent (a restart) rather than
  // stop them (`tessera dev`, whose nodes go away with it).
  bool detach_on_stop = true;
};

// Runs the agent until `stop` is set. Returns the exit status: 0 stopped, 1 discovery, cgroups
// or work folder failed, 2 bad settings. Logs go to standard error, each line naming the node.
int runAgentLoop(const AgentSettings& settings, const std::atomic<bool>& stop);

}  // namespace tessera::cli
