#include "server/fair_pool.h"

#include <algorithm>

namespace tessera::server {

FairPool::FairPool(int workers) {
  for (int i = 0; i < std::max(1, workers); ++i) {
    workers_.emplace_back([this] { work(); });
  }
}

FairPool::~FairPool() { stop(); }

uint64_t FairPool::stampLocked(Key& k, size_t bytes) {
  // A key that was idle starts where service stands now: it gets no credit for its pause. One
  // that is still ahead (served a large job lately) waits until the others have caught up.
  const uint64_t start = std::max(vtime_, k.finish);
  k.finish = start + kJobBaseBytes + bytes;
  return start;
}

bool FairPool::markReadyLocked(const std::string& name, Key& k) {
  if (k.ready == 0 && !k.jobs.empty() && k.running < std::max(1, k.limits.max_running)) {
    k.ready = ++ready_seq_;
    ready_.emplace(k.jobs.front().start, k.ready, name);
    return true;
  }
  return false;
}

void FairPool::forgetIfIdleLocked(const std::string& name) {
  auto it = keys_.find(name);
  if (it != keys_.end() && it->second.jobs.empty() && it->second.running == 0 &&
      it->second.finish <= vtime_) {
    keys_.erase(it);
  }
}

bool FairPool::submit(const std::string& key, FairLimits limits, Job job, size_t bytes) {
  std::unique_lock lock(mu_);
  if (stopping_) {
    return false;
  }
  Key& k = keys_[key];
  k.limits = limits;
  if (k.jobs.size() >= limits.max_queued ||
      (!k.jobs.empty() && k.queued_bytes + bytes > limits.max_queued_bytes)) {
    forgetIfIdleLocked(key);  // max_queued of 0: nothing was ever kept.
    return false;
  }
  const uint64_t start = stampLocked(k, bytes);
  k.jobs.push_back({std::move(job), bytes, start});
  k.queued_bytes += bytes;
  ++queued_;
  if (markReadyLocked(key, k)) {
    lock.unlock();  // The worker woken does not then wait for this lock.
    cv_.notify_one();
  }
  return true;
}

bool FairPool::runNowIfFree(const std::string& key, FairLimits limits, const Job& job,
                            size_t bytes) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      return false;
    }
    auto it = keys_.find(key);
    if (it != keys_.end() &&
        (!it->second.jobs.empty() || it->second.running >= std::max(1, limits.max_running))) {
      return false;
    }
    Key& k = it != keys_.end() ? it->second : keys_[key];
    k.limits = limits;
    // Served now: it counts against the key's share as a job started by a worker would.
    vtime_ = std::max(vtime_, stampLocked(k, bytes));
    ++k.running;
  }
  // Its place is given back even if the job throws.
  struct Done {
    FairPool& pool;
    const std::string& key;
    ~Done() {
      std::unique_lock lock(pool.mu_);
      if (pool.finishedLocked(key)) {
        lock.unlock();
        pool.cv_.notify_one();  // A job of the key that waited for this place.
      }
    }
  } done{*this, key};
  job();
  return true;
}

bool FairPool::finishedLocked(const std::string& name) {
  Key& k = keys_.at(name);  // Still there: a key with a running job is never erased.
  --k.running;
  if (k.jobs.empty() && k.running == 0) {
    forgetIfIdleLocked(name);
    return false;
  }
  return markReadyLocked(name, k);
}

void FairPool::work() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
    if (stopping_) {
      return;
    }
    auto first = ready_.begin();
    const std::string name = std::get<2>(*first);
    ready_.erase(first);
    Key& k = keys_.at(name);
    k.ready = 0;
    Queued next = std::move(k.jobs.front());
    k.jobs.pop_front();
    k.queued_bytes -= next.bytes;
    --queued_;
    ++k.running;
    vtime_ = std::max(vtime_, next.start);
    // Its next job goes back into the set by its own stamp, for another worker.
    const bool more = markReadyLocked(name, k);
    if (keys_.size() >= sweep_at_) {
      // Idle keys stay while their service is ahead of vtime_; the ones that caught up go.
      std::erase_if(keys_, [this](const auto& entry) {
        const Key& key = entry.second;
        return key.jobs.empty() && key.running == 0 && key.finish <= vtime_;
      });
      sweep_at_ = 2 * keys_.size() + 64;
    }
    lock.unlock();
    if (more) {
      cv_.notify_one();
    }
    next.job();
    next.job = nullptr;  // Whatever it captured goes before the lock is taken again.
    lock.lock();
    // No wake-up: this worker looks at the set before it waits again.
    finishedLocked(name);
  }
}

void FairPool::stop() {
  std::vector<std::thread> workers;
  std::map<std::string, Key> dropped;
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
    workers.swap(workers_);
    // Waiting jobs are dropped; keys with running jobs stay until their workers are done.
    for (auto it = keys_.begin(); it != keys_.end();) {
      it->second.ready = 0;
      queued_ -= it->second.jobs.size();
      it->second.queued_bytes = 0;
      if (it->second.running == 0) {
        dropped.insert(keys_.extract(it++));
      } else {
        dropped[it->first].jobs.swap(it->second.jobs);
        ++it;
      }
    }
    ready_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : workers) {
    t.join();
  }
  // `dropped` (and what its jobs captured) is released here, outside the lock.
}

size_t FairPool::queued() const {
  std::lock_guard lock(mu_);
  return queued_;
}

}  // namespace tessera::server
