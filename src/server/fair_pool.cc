#include "server/fair_pool.h"

#include <algorithm>

namespace tessera::server {

FairPool::FairPool(int workers) {
  for (int i = 0; i < std::max(1, workers); ++i) {
    workers_.emplace_back([this] { work(); });
  }
}

FairPool::~FairPool() { stop(); }

bool FairPool::markReadyLocked(const std::string& name, Key& k) {
  if (!k.ready && !k.jobs.empty() && k.running < std::max(1, k.limits.max_running)) {
    k.ready = true;
    ready_.push_back(name);
    return true;
  }
  return false;
}

bool FairPool::submit(const std::string& key, FairLimits limits, Job job) {
  std::unique_lock lock(mu_);
  if (stopping_) {
    return false;
  }
  Key& k = keys_[key];
  k.limits = limits;
  if (k.jobs.size() >= limits.max_queued) {
    if (k.jobs.empty() && k.running == 0) {
      keys_.erase(key);  // max_queued of 0: nothing was ever kept.
    }
    return false;
  }
  k.jobs.push_back(std::move(job));
  ++queued_;
  if (markReadyLocked(key, k)) {
    lock.unlock();  // The worker woken does not then wait for this lock.
    cv_.notify_one();
  }
  return true;
}

bool FairPool::runNowIfFree(const std::string& key, FairLimits limits, const Job& job) {
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
    keys_.erase(name);
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
    const std::string name = std::move(ready_.front());
    ready_.pop_front();
    Key& k = keys_.at(name);
    k.ready = false;
    Job job = std::move(k.jobs.front());
    k.jobs.pop_front();
    --queued_;
    ++k.running;
    // Its next job goes to the back of the ring (one per turn), for another worker.
    const bool more = markReadyLocked(name, k);
    lock.unlock();
    if (more) {
      cv_.notify_one();
    }
    job();
    job = nullptr;  // Whatever it captured goes before the lock is taken again.
    lock.lock();
    // No wake-up: this worker looks at the ring before it waits again.
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
      it->second.ready = false;
      queued_ -= it->second.jobs.size();
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
