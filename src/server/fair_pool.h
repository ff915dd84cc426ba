// FairPool: worker threads that run jobs from many keys (tenants) fairly. Each key has its own
// FIFO queue; the workers take keys round-robin, one job per turn, and never run more than a
// key's `max_running` of its jobs at once. So a key that floods the pool waits behind its own
// jobs only: another key's job waits at most for one worker to come free.
//
//   FairPool pool(16);                                   // 16 workers (jobs may block)
//   if (!pool.submit("team-1", {4, 64}, [] { ... })) {  // 4 at once, 64 waiting
//     // the key's queue is full: refuse the work
//   }
//   pool.stop();                                         // drops what waits, joins the workers
//
// A caller with a job that never blocks may run it itself instead (runNowIfFree): it then counts
// as one of the key's running jobs, and is run only when it would not jump the key's queue.
//
// Thread-safe. Keys with nothing queued or running take no memory.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::server {

struct FairLimits {
  int max_running = 8;      // Jobs of the key running at once (at least 1).
  size_t max_queued = 256;  // Jobs of the key waiting; submit refuses beyond it.
};

class FairPool {
 public:
  using Job = std::function<void()>;

  explicit FairPool(int workers);
  ~FairPool();
  FairPool(const FairPool&) = delete;
  FairPool& operator=(const FairPool&) = delete;

  // Queues `job` under `key`; false (and `job` dropped) when the key already has
  // `limits.max_queued` jobs waiting, or the pool is stopped. The limits of the latest submit
  // apply to the key.
  bool submit(const std::string& key, FairLimits limits, Job job);
  // Runs `job` on the calling thread now, as one of the key's running jobs, if the key has no job
  // waiting and a free place (`limits.max_running`); true if it did. Otherwise false, and `job`
  // has not run (submit it). For short jobs that never block, so that an I/O thread can skip
  // the hand-off to a worker and back without giving the key more than its places.
  bool runNowIfFree(const std::string& key, FairLimits limits, const Job& job);
  // Drops every waiting job, lets running ones finish and joins the workers. Idempotent.
  void stop();

  // Jobs waiting, over all keys (for metrics and tests).
  size_t queued() const;

 private:
  struct Key {
    std::deque<Job> jobs;
    int running = 0;
    FairLimits limits;
    bool ready = false;  // In ready_.
  };
  void work();
  // Puts `k` at the back of the ring if it has a job it may start; true if it did (the caller
  // then wakes a worker, unless it is a worker about to look at the ring itself). Requires mu_.
  bool markReadyLocked(const std::string& name, Key& k);
  // One of the key's running jobs is done: forgets the key if it has nothing left, or puts it in
  // the ring if it may start a job now (true: the caller wakes a worker, unless it is one).
  // Requires mu_.
  bool finishedLocked(const std::string& name);

  mutable std::mutex mu_;  // Guards everything below.
  std::condition_variable cv_;
  std::map<std::string, Key> keys_;
  std::deque<std::string> ready_;  // Keys with a job they may start, in turn order.
  size_t queued_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tessera::server
