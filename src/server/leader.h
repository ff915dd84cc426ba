// Leader election among server replicas, through a lease of the store (etcd's, as etcd's own
// concurrency package does it): the leader holds key `/sys/leader`, attached to a lease it keeps
// alive; when it stops (a crash, a lost network), the lease expires and the key goes with it,
// and the next replica to try takes it. The key's value is the leader's API address, which
// standbys give clients (docs/server.md, "Several replicas").
//
//   LeaderElection election(store, "https://10.0.0.1:8200", std::chrono::seconds(2));
//   while (!*election.campaign()) { serve redirects to election.leader(); sleep; }
//   election.startKeepAlive([] { std::_Exit(1); });   // lost it: stop at once
//
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/clock.h"
#include "core/status.h"
#include "store/store.h"

namespace tessera::server {

inline constexpr std::string_view kLeaderKey = "/sys/leader";

class LeaderElection {
 public:
  LeaderElection(store::Store& store, std::string address, core::Duration ttl)
      : store_(store), address_(std::move(address)), ttl_(ttl) {}
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // One try: takes the key if nobody holds it (true), else learns who does (false).
  core::Result<bool> campaign();
  // The leader's address as last seen ("" while none is known); ours once leading.
  std::string leader() const;
  bool leading() const { return leading_; }
  // Keeps the lease alive (every quarter of its TTL) on a thread of its own; `lost` runs once
  // if it could not be renewed for three quarters of a TTL: before the lease can lapse and
  // another replica lead.
  void startKeepAlive(std::function<void()> lost);
  // Gives the key up at once (a graceful stop), so another replica need not wait for the TTL.
  void resign();

 private:
  store::Store& store_;
  const std::string address_;
  const core::Duration ttl_;
  store::LeaseId lease_{};
  std::atomic<bool> leading_{false};
  mutable std::mutex mu_;
  std::string leader_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread keeper_;
};

}  // namespace tessera::server
