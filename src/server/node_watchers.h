// Agents' watches of their task lists (GET sys/nodes/<node>/tasks?index=N&wait_ms=W), held
// without a thread: a watch that must wait leaves here what to do once there is news for its
// node (its task list moved, or a request for its agent arrived) or its time is up, and the
// worker that handled it goes on to the next request. One thread sleeps until the next deadline.
//
//   watchers.wait("gpu-a", deadline, [=] { reply(answerNow()); });   // fired exactly once
//   watchers.notify("gpu-a");   // the driver published a new list, or a log request came
//
// Thread-safe. Callbacks run on the notifying thread or the timer thread, never under the lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::server {

class NodeWatchers {
 public:
  using Clock = std::chrono::steady_clock;
  using Fire = std::function<void()>;

  // At most this many watches of one node wait at once; `wait` refuses more (the caller
  // answers at once), so a node's token cannot pile them up.
  static constexpr size_t kMaxPerNode = 4;

  // `max_per_key`: how many watches of one key may wait at once (a node's: kMaxPerNode).
  explicit NodeWatchers(size_t max_per_key = kMaxPerNode);
  // Fires every watch still waiting (the server is stopping: each gets its answer now); wait()
  // refuses from then on. Idempotent.
  void stop();
  ~NodeWatchers() { stop(); }
  NodeWatchers(const NodeWatchers&) = delete;
  NodeWatchers& operator=(const NodeWatchers&) = delete;

  // Leaves `fire` to run at the next notify(node), or at `deadline`. False (and `fire` is not
  // kept): the node has max_per_key watches waiting already.
  bool wait(const std::string& node, Clock::time_point deadline, Fire fire);
  // Fires every watch of `node`.
  void notify(const std::string& node);
  size_t waiting() const;

 private:
  struct Watch {
    Clock::time_point deadline;
    Fire fire;
  };
  void run();

  const size_t max_per_key_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<Watch>> watches_;  // By node.
  bool stopping_ = false;
  std::thread timer_;
};

}  // namespace tessera::server
