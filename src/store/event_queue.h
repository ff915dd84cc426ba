// EventQueue: a watch callback that queues what it receives, so that tests and simple consumers
// can poll or block for events instead of handling them on the store's thread.
//
//   EventQueue q;
//   TESSERA_ASSIGN_OR_RETURN(WatchId w, store.watch("/a/", prefixEnd("/a/"), 0, q.callback()));
//   std::vector<Event> events = q.waitFor(2, std::chrono::seconds(10));
//   store.cancelWatch(w);  // Before `q` goes away.
//
// Thread-safe. The queue must outlive every watch its callback was passed to.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "store/store.h"

namespace tessera::store {

class EventQueue {
 public:
  WatchCallback callback();

  // Takes every event queued so far, without waiting.
  std::vector<Event> poll();

  // Waits (real time, at most `timeout`) until at least `n` events are queued or the watch ended
  // with an error, then takes every queued event. Fewer than `n` means it timed out or ended.
  std::vector<Event> waitFor(size_t n, std::chrono::milliseconds timeout);

  // The error the watch ended with, or OK while it runs.
  core::Status error() const;

 private:
  mutable std::mutex mu_;  // Guards events_ and error_.
  std::condition_variable cv_;
  std::deque<Event> events_;
  core::Status error_;
};

}  // namespace tessera::store
