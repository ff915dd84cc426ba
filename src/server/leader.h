// Leader election among server replicas, through a lease of the store (etcd's, as etcd's own
// concurrency package does it): the leader holds key `/sys/leader`, attached to a lease it keeps
// alive; when it stops (a crash, a lost network), the lease expires and the key goes with it,
// and the next replica to try takes it. The key's value is the leader's API address, which
// standbys give clients (docs/server.md, "High availability").
//
//   LeaderElection election(store, "https://10.0.0.1:8200", std::chrono::seconds(2));
//   while (!*election.campaign()) { serve redirects to election.leader(); sleep; }
//   election.startKeepAlive([] { step down });   // lost it: stop leading at once
//   FencedStore fenced(store, election.fence(), [&] { election.stepDown("fenced"); });
//
// The leader stops leading on its own clock: three quarters of a TTL after the last renewal it
// sent that etcd accepted, whatever a blocking call is doing meanwhile (a watchdog thread, not
// the renewing one, keeps that deadline). Since clocks and pauses can still fool it, every write
// it makes is fenced as well (fence(), server/fenced_store.h).
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

  // One try: takes the key if nobody holds it (true), else learns who does (false). A key that
  // names this replica's own address under another lease was left by an earlier start of it (a
  // crash and an immediate restart): it is taken over at once (its lease revoked) rather than
  // sent to clients as the leader. Call it only once this replica's listeners are bound (so no
  // other live process serves its address).
  core::Result<bool> campaign();
  // The leader's address as last seen ("" while none is known, and after a campaign that could
  // not reach the store); ours once leading.
  std::string leader() const;
  bool leading() const { return leading_; }
  // While leading: the guard every write of this replica carries (the leader key still has the
  // create revision it got when this replica took it).
  store::Compare fence() const;
  // Keeps the lease alive (every quarter of its TTL) on a thread of its own; `lost` runs once
  // (on another thread) if it could not be renewed for three quarters of a TTL, before the lease
  // can lapse and another replica lead, or when stepDown() is called.
  void startKeepAlive(std::function<void()> lost);
  // Stops leading now (the store fenced a write, say): `lost` runs if it has not yet.
  void stepDown(const std::string& why);
  // Gives the key up at once (a graceful stop), so another replica need not wait for the TTL.
  void resign();

 private:
  core::Result<bool> tryCampaign();

  store::Store& store_;
  const std::string address_;
  const core::Duration ttl_;
  store::LeaseId lease_{};
  int64_t term_ = 0;  // The leader key's create revision while this replica leads.
  std::atomic<bool> leading_{false};
  mutable std::mutex mu_;
  std::string leader_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  bool lost_called_ = false;
  std::function<void()> lost_;
  // When the last renewal etcd accepted was sent (guarded by mu_).
  std::chrono::steady_clock::time_point renewed_{};
  std::thread keeper_;
  std::thread watchdog_;
};

}  // namespace tessera::server
