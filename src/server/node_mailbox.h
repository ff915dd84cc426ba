// Requests the server has for an agent that only the agent can answer, such as a piece of a
// task's log (the logs live on the node). Agents do not listen on a port: a request waits here,
// the agent's watch (GET sys/nodes/<node>/tasks) hands it over, and the agent answers with a
// PUT (sys/nodes/<node>/logs/<id>). The asking request waits for that answer, up to a timeout.
//
//   auto piece = mailbox.fetchLog("gpu-a", {.task = "t.w.0", .stream = "stdout"}, 5s);
//   ... on the agent's watch:   for (auto& r : mailbox.take("gpu-a")) hand r to the agent
//   ... on the agent's answer:  mailbox.answer("gpu-a", id, reply);
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::server {

struct LogRequest {
  std::string id;      // Set by the mailbox: what the answer names.
  std::string task;    // The task's id on the node ("<tenant>.<workload>.<index>").
  std::string stream;  // stdout or stderr.
  int64_t offset = 0;
  int64_t limit = int64_t{64} * 1024;
};

struct LogPiece {
  std::string data;   // The bytes from `offset`, at most `limit`.
  int64_t size = 0;   // The log's whole size now.
  std::string error;  // Set: the agent could not read it (no such task here, say).
};

class NodeMailbox {
 public:
  // At most this many requests wait per node; more are refused (resource exhausted).
  static constexpr size_t kMaxPerNode = 64;

  // Posts a request for `node`'s agent and waits up to `timeout` for its answer. Unavailable
  // when the agent does not answer in time.
  core::Result<LogPiece> fetchLog(const std::string& node, LogRequest request,
                                  std::chrono::milliseconds timeout);
  // The node's requests not yet handed to its agent (each is handed over once).
  std::vector<LogRequest> take(const std::string& node);
  bool hasWaiting(const std::string& node) const;
  // Called (outside the mailbox's lock) whenever a request for `node`'s agent is posted, so its
  // watch can hand it over. Set before use.
  void setPosted(std::function<void(const std::string& node)> posted) {
    posted_ = std::move(posted);
  }
  // The agent's answer. Not found: no such request for this node (answered, timed out, or
  // another node's).
  core::Status answer(const std::string& node, const std::string& id, LogPiece piece);

 private:
  struct Pending {
    std::string node;
    LogRequest request;
    bool handed = false;
    bool answered = false;
    LogPiece piece;
  };
  std::function<void(const std::string& node)> posted_;
  mutable std::mutex mu_;
  std::condition_variable answered_;
  std::map<std::string, Pending> pending_;  // By id.
  uint64_t next_ = 0;
};

}  // namespace tessera::server
