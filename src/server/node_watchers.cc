#include "server/node_watchers.h"

#include <algorithm>

namespace tessera::server {

NodeWatchers::NodeWatchers(size_t max_per_key)
    : max_per_key_(max_per_key), timer_([this] { run(); }) {}

void NodeWatchers::stop() {
  std::map<std::string, std::vector<Watch>> left;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    left.swap(watches_);
  }
  changed_.notify_all();
  if (timer_.joinable() && timer_.get_id() != std::this_thread::get_id()) {
    timer_.join();
  }
  for (auto& [node, list] : left) {
    for (Watch& w : list) {
      w.fire();
    }
  }
}

bool NodeWatchers::wait(const std::string& node, Clock::time_point deadline, Fire fire) {
  {
    std::lock_guard lock(mu_);
    std::vector<Watch>& list = watches_[node];
    if (stopping_ || list.size() >= max_per_key_) {
      return false;
    }
    list.push_back({deadline, std::move(fire)});
  }
  changed_.notify_all();  // The timer may need to wake sooner.
  return true;
}

void NodeWatchers::notify(const std::string& node) {
  std::vector<Watch> due;
  {
    std::lock_guard lock(mu_);
    auto it = watches_.find(node);
    if (it == watches_.end()) {
      return;
    }
    due.swap(it->second);
    watches_.erase(it);
  }
  for (Watch& w : due) {
    w.fire();
  }
}

size_t NodeWatchers::waiting() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [node, list] : watches_) {
    n += list.size();
  }
  return n;
}

void NodeWatchers::run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    Clock::time_point next = Clock::time_point::max();
    for (const auto& [node, list] : watches_) {
      for (const Watch& w : list) {
        next = std::min(next, w.deadline);
      }
    }
    if (next == Clock::time_point::max()) {
      changed_.wait(lock);
    } else {
      changed_.wait_until(lock, next);
    }
    std::vector<Watch> due;
    const Clock::time_point now = Clock::now();
    for (auto it = watches_.begin(); it != watches_.end();) {
      std::vector<Watch>& list = it->second;
      auto expired = std::stable_partition(list.begin(), list.end(),
                                           [&](const Watch& w) { return w.deadline > now; });
      std::move(expired, list.end(), std::back_inserter(due));
      list.erase(expired, list.end());
      it = list.empty() ? watches_.erase(it) : std::next(it);
    }
    if (!due.empty()) {
      lock.unlock();
      for (Watch& w : due) {
        w.fire();
      }
      lock.lock();
    }
  }
}

}  // namespace tessera::server
