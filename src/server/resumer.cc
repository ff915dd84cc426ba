#include "server/resumer.h"

#include <algorithm>

#include "core/log.h"

namespace tessera::server {

void Resumer::due() {
  std::lock_guard lock(mu_);
  if (stopped_) {
    return;
  }
  due_ = true;
  if (!thread_.joinable()) {
    thread_ = std::thread([this] { run(); });
  }
  cv_.notify_all();
}

void Resumer::stop() {
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void Resumer::run() {
  std::unique_lock lock(mu_);
  auto backoff = std::chrono::milliseconds(100);
  while (!stopped_) {
    cv_.wait(lock, [&] { return stopped_ || due_; });
    if (stopped_) {
      break;
    }
    due_ = false;  // Before `resume` starts a new watch: that watch's own end sets it again.
    lock.unlock();
    const core::Status resumed = resume_();
    lock.lock();
    if (resumed.isOk()) {
      backoff = std::chrono::milliseconds(100);
      continue;
    }
    due_ = true;
    core::logWarn("resuming {}: {}; trying again in {} ms", what_, resumed.message(),
                  backoff.count());
    cv_.wait_for(lock, backoff, [&] { return stopped_; });
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(5));
  }
}

}  // namespace tessera::server
