#include "store/event_queue.h"

#include <iterator>

namespace tessera::store {

WatchCallback EventQueue::callback() {
  return [this](const WatchResponse& response) {
    {
      std::lock_guard lock(mu_);
      if (!response.error.isOk()) {
        error_ = response.error;
      }
      events_.insert(events_.end(), response.events.begin(), response.events.end());
    }
    cv_.notify_all();
  };
}

std::vector<Event> EventQueue::poll() {
  std::lock_guard lock(mu_);
  std::vector<Event> out(std::make_move_iterator(events_.begin()),
                         std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

std::vector<Event> EventQueue::waitFor(size_t n, std::chrono::milliseconds timeout) {
  {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return events_.size() >= n || !error_.isOk(); });
  }
  return poll();
}

core::Status EventQueue::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

}  // namespace tessera::store
