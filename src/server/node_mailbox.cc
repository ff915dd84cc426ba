#include "server/node_mailbox.h"

#include <openssl/rand.h>

#include "core/strings.h"

namespace tessera::server {

core::Result<LogPiece> NodeMailbox::fetchLog(const std::string& node, LogRequest request,
                                             std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  size_t waiting = 0;
  for (const auto& [id, p] : pending_) {
    waiting += p.node == node ? 1 : 0;
  }
  if (waiting >= kMaxPerNode) {
    return core::Status(core::StatusCode::kResourceExhausted,
                        "too many log requests waiting for node '" + node + "'; try again");
  }
  // Unguessable, so that only the agent that was handed the request can answer it.
  unsigned char random[12];
  if (RAND_bytes(random, sizeof random) != 1) {
    return core::unavailable("no randomness for a request id");
  }
  const std::string id = std::to_string(++next_) + "-" + core::hexEncode(random, sizeof random);
  request.id = id;
  Pending& entry = pending_[id];
  entry.node = node;
  entry.request = std::move(request);
  if (posted_) {
    lock.unlock();
    posted_(node);  // The node's waiting watch hands it over.
    lock.lock();
  }
  const bool done = answered_.wait_for(lock, timeout, [&] { return pending_.at(id).answered; });
  Pending p = std::move(pending_.at(id));
  pending_.erase(id);
  if (!done) {
    return core::unavailable("the agent of node '" + node + "' did not answer in time (is it up?)");
  }
  if (!p.piece.error.empty()) {
    return core::notFound(p.piece.error);
  }
  return std::move(p.piece);
}

std::vector<LogRequest> NodeMailbox::take(const std::string& node) {
  std::lock_guard lock(mu_);
  std::vector<LogRequest> out;
  for (auto& [id, p] : pending_) {
    if (p.node == node && !p.handed) {
      p.handed = true;
      out.push_back(p.request);
    }
  }
  return out;
}

bool NodeMailbox::hasWaiting(const std::string& node) const {
  std::lock_guard lock(mu_);
  for (const auto& [id, p] : pending_) {
    if (p.node == node && !p.handed) {
      return true;
    }
  }
  return false;
}

core::Status NodeMailbox::answer(const std::string& node, const std::string& id, LogPiece piece) {
  std::lock_guard lock(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end() || it->second.node != node || !it->second.handed) {
    return core::notFound("no log request '" + id + "' for node '" + node + "'");
  }
  it->second.answered = true;
  it->second.piece = std::move(piece);
  answered_.notify_all();
  return core::Status::ok();
}

}  // namespace tessera::server
