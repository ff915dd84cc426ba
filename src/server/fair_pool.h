// FairPool: worker threads that run jobs from many keys (tenants) fairly. Each key has its own
// FIFO queue, and the workers share themselves among the keys by what their jobs cost, not by
// how many jobs they send: a job costs a fixed amount (kJobBaseBytes, what a request costs
// beside its body) plus its bytes (the request's body), and the next job to start is always the
// one whose key has been served least for what it waits with (start-time fair queuing: each job
// is stamped, when queued, with its key's virtual finish time, and the smallest stamp goes
// first). With jobs of equal cost this is round robin, one job per key per turn; a key whose jobs
// carry 1 MiB bodies gets one turn for every ~60 of a key that sends small ones. A key never runs
// more than its `max_running` jobs at once, nor queues more than `max_queued` jobs or
// `max_queued_bytes` of their bytes. So a key that floods the pool, with many requests or with
// large ones, waits behind its own jobs: another key's job waits at most for one worker.
//
//   FairPool pool(16);                                          // 16 workers (jobs may block)
//   if (!pool.submit("team-1", {4, 64}, [] { ... }, body_bytes)) {  // 4 at once, 64 waiting
//     // the key's queue is full: refuse the work
//   }
//   pool.stop();                                                // drops what waits, joins
//
// A caller with a job that never blocks may run it itself instead (runNowIfFree): it then counts
// as one of the key's running jobs (and its cost as served to the key), and is run only when it
// would not jump the key's queue.
//
// Thread-safe. Keys with nothing queued or running take no memory once their service is not
// ahead of the others' (a key that has just been served a large job is remembered until the
// others have caught up, so that it cannot start afresh by pausing).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace tessera::server {

struct FairLimits {
  int max_running = 8;      // Jobs of the key running at once (at least 1).
  size_t max_queued = 256;  // Jobs of the key waiting; submit refuses beyond it.
  // Bytes of the key's waiting jobs (their `bytes`); submit refuses a job that would pass it,
  // unless nothing of the key waits (one job is always taken, whatever its size).
  size_t max_queued_bytes = size_t{64} << 20;
};

class FairPool {
 public:
  using Job = std::function<void()>;
  // What a job costs besides its bytes, in bytes: about what parsing and auditing that much of a
  // JSON body costs next to a request's fixed work (TLS, routing, audit records, the handler).
  static constexpr uint64_t kJobBaseBytes = 16 * 1024;

  explicit FairPool(int workers);
  ~FairPool();
  FairPool(const FairPool&) = delete;
  FairPool& operator=(const FairPool&) = delete;

  // Queues `job` under `key`, costing kJobBaseBytes + `bytes`; false (and `job` dropped) when
  // the key already has `limits.max_queued` jobs, or `limits.max_queued_bytes` bytes, waiting,
  // or the pool is stopped. The limits of the latest submit apply to the key.
  bool submit(const std::string& key, FairLimits limits, Job job, size_t bytes = 0);
  // Runs `job` on the calling thread now, as one of the key's running jobs (costing as submit
  // does), if the key has no job waiting and a free place (`limits.max_running`); true if it
  // did. Otherwise false, and `job` has not run (submit it). For short jobs that never block, so
  // that an I/O thread can skip the hand-off to a worker and back without giving the key more
  // than its places.
  bool runNowIfFree(const std::string& key, FairLimits limits, const Job& job, size_t bytes = 0);
  // Drops every waiting job, lets running ones finish and joins the workers. Idempotent.
  void stop();

  // Jobs waiting, over all keys (for metrics and tests).
  size_t queued() const;

 private:
  struct Queued {
    Job job;
    size_t bytes = 0;
    uint64_t start = 0;  // Virtual time at which its service starts (its stamp).
  };
  struct Key {
    std::deque<Queued> jobs;
    int running = 0;
    FairLimits limits;
    size_t queued_bytes = 0;
    uint64_t finish = 0;  // Virtual time at which the key's last queued or started job ends.
    uint64_t ready = 0;   // Its entry's sequence number in ready_; 0: not there.
  };
  // Stamps a job of cost kJobBaseBytes + `bytes` for `k`: its start, and the key's new finish.
  uint64_t stampLocked(Key& k, size_t bytes);
  void work();
  // Puts `k` in the ready set if it has a job it may start; true if it did (the caller then
  // wakes a worker, unless it is a worker about to look at the set itself). Requires mu_.
  bool markReadyLocked(const std::string& name, Key& k);
  // One of the key's running jobs is done: forgets the key if it has nothing left, or puts it in
  // the ready set if it may start a job now (true: the caller wakes a worker, unless it is one).
  // Requires mu_.
  bool finishedLocked(const std::string& name);
  // Forgets `name` if it has nothing queued or running and its service is not ahead of the
  // virtual time. Requires mu_.
  void forgetIfIdleLocked(const std::string& name);

  mutable std::mutex mu_;  // Guards everything below.
  std::condition_variable cv_;
  std::map<std::string, Key> keys_;
  // Keys with a job they may start, by the stamp of that job, then by when they became ready.
  std::set<std::tuple<uint64_t, uint64_t, std::string>> ready_;
  uint64_t ready_seq_ = 0;
  uint64_t vtime_ = 0;    // The stamp of the job started last: where service stands.
  size_t sweep_at_ = 64;  // keys_'s size at which idle keys that caught up are forgotten.
  size_t queued_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tessera::server
