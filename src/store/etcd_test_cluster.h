// EtcdTestCluster: a real etcd cluster on loopback for tests (test-only library), started from
// the `etcd` binary of Debian's etcd-server (scripts/bootstrap). Each member gets free ports and
// a data directory in a temporary directory (on /dev/shm when there is one: etcd fsyncs every
// write, and tmpfs makes that free). Members run with --max-request-bytes and --max-txn-ops
// raised as etcd_store.h asks.
//
//   TESSERA_ASSIGN_OR_RETURN(EtcdTestCluster* etcd, EtcdTestCluster::shared());
//   EtcdStoreOptions options = etcd->options("/my-test");
//   auto store = EtcdStore::open(options, clock);
//
// `shared()` starts one 3-member cluster per test binary, the first time a test asks for it, and
// a gtest Environment stops it when the tests end; tests share it by writing under prefixes of
// their own. Members are started with PR_SET_PDEATHSIG, so a crashed test leaves none behind.
//
// Not thread-safe: call from the test's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "store/etcd_store.h"

namespace tessera::store {

class EtcdTestCluster {
 public:
  // Starts `members` members in a new temporary directory and waits (up to 30 s) until every one
  // answers and they have a leader, on fresh ports again if a member lost its port to another
  // process. FAILED_PRECONDITION if there is no `etcd` on the PATH.
  static core::Result<std::unique_ptr<EtcdTestCluster>> start(int members);

  // The cluster of this test binary (3 members), started on first use. A failure to start is
  // remembered and returned again to every later caller.
  static core::Result<EtcdTestCluster*> shared();

  ~EtcdTestCluster();  // Kills every member and removes the directory.
  EtcdTestCluster(const EtcdTestCluster&) = delete;
  EtcdTestCluster& operator=(const EtcdTestCluster&) = delete;

  // Client URLs of the members, by member index.
  const std::vector<std::string>& clientUrls() const { return client_urls_; }

  // Options for an EtcdStore on this cluster under `prefix`, with every member's URL, `first`'s
  // first (the one the store talks to until it fails), and short timeouts.
  EtcdStoreOptions options(const std::string& prefix, size_t first = 0) const;

  // The index of the member that is leader now.
  core::Result<size_t> leader() const;

  // Every etcd key under `prefix` with its value, read directly (not through an EtcdStore), for
  // tests of where the store puts things.
  core::Result<std::vector<std::pair<std::string, std::string>>> rawRange(
      const std::string& prefix) const;

  // Kills member `i` with SIGKILL and reaps it.
  void kill(size_t i);
  // Starts member `i` again on its data directory and waits until it answers.
  core::Status restart(size_t i);
  bool running(size_t i) const { return members_[i].pid > 0; }
  // Stops member `i` (SIGSTOP) without killing it: its connections stay open and every request
  // to it goes unanswered, as with a member stalled or cut off mid-request. resume() (SIGCONT)
  // lets it go on; both do nothing to a member that is not running.
  void pause(size_t i);
  void resume(size_t i);
  bool paused(size_t i) const { return members_[i].paused; }

 private:
  struct Member {
    std::string name;
    std::string data_dir;
    std::string log_file;
    std::vector<std::string> args;  // For the first start; a restart drops the initial-* flags.
    pid_t pid = -1;
    bool paused = false;
  };

  EtcdTestCluster() = default;
  static core::Result<std::unique_ptr<EtcdTestCluster>> startOnce(int members);
  core::Status spawn(Member& m, bool first_start);
  // Waits until every running member answers with a leader, or one exits.
  core::Status waitHealthy(std::chrono::milliseconds timeout);
  std::string logTail(const Member& m) const;

  std::string dir_;
  std::string binary_;
  std::vector<Member> members_;
  std::vector<std::string> client_urls_;
};

}  // namespace tessera::store
