// EtcdStore: the Store (store/store.h) kept in an etcd v3 cluster, spoken to over etcd's gRPC API.
// For running several Tessera servers on one replicated store; `SqliteStore` remains the
// embedded default.
//
//   core::RealClock clock;
//   EtcdStoreOptions options;
//   options.endpoints = {"https://etcd-1:2379", "https://etcd-2:2379", "https://etcd-3:2379"};
//   options.ca_file = "/etc/tessera/etcd-ca.pem";
//   options.cert_file = "/etc/tessera/etcd-client.pem";  // With key_file: client certificates.
//   options.key_file = "/etc/tessera/etcd-client-key.pem";
//   TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, EtcdStore::open(options, clock));
//
// Options (what a `storage "etcd" { ... }` block of the server's config maps onto):
//   endpoints        etcd client URLs, tried in order: "https://host:port", or "http://host:port"
//                    where host is a loopback address (127.0.0.0/8, ::1, localhost), since keys,
//                    values and lease ids would otherwise cross the network in clear. At least
//                    one.
//   ca_file          PEM CA bundle that signs the servers' certificates; required with https.
//   cert_file        PEM client certificate and its PEM key (key_file), both or neither: for
//   key_file         etcd's --client-cert-auth.
//   prefix           every key this store writes is under it (default "/tessera"), so several
//                    stores may share one cluster: keys under "<prefix>/kv", notes under
//                    "<prefix>/notes/" (below).
//   dial_timeout     how long open() waits for a first answer, and the least time a connection
//                    attempt to an endpoint is given (default 5 s). Without quorum, open() fails
//                    sooner: after no_quorum_timeout of "no leader" from the members that answer.
//   request_timeout  how long one call may take, failovers to other endpoints included
//                    (default 10 s).
//   no_quorum_timeout  how long a call keeps trying while the members it asks say they have no
//                    leader (quorum lost, or an election running long): then it fails at once,
//                    UNAVAILABLE "... no etcd quorum ..." (default 1 s). A write refused so was
//                    never proposed: it was not applied.
//   attempt_timeout  how long one try of a call that may be sent again (a read, a lease
//                    renewal, a Txn marked idempotent) waits before it goes to the next endpoint
//                    (default 1 s): a member whose leader just died holds requests until etcd's
//                    own timeout (about 7 s), while the others elect a new one in about 1 s.
//
// Mapping. Keys, values, revisions, versions and leases are etcd's own: a Store key K is etcd key
// "<prefix>/kv" + K, and revisions come straight from etcd's response headers, so they are the
// cluster's revisions (shared with everything else stored in it) and a store sharing the cluster
// sees the revision move under it. range/put/deleteRange/txn are etcd's Range/Put/DeleteRange/Txn
// (reads are linearizable); a range end of "\0" (no end) stops at the end of "<prefix>/kv".
// watch() is one etcd watch (with prev_kv) per Store watch, all multiplexed on one Watch stream;
// callbacks run on one thread of the store's, one at a time, with no lock held, one response per
// revision. grant/keepAlive/revoke are LeaseGrant (ttl rounded up to whole seconds; etcd may raise
// it to its minimum), one LeaseKeepAlive exchange, LeaseRevoke; compact() is Compact with
// physical=true.
//
// Where etcd differs from the Store contract (the conformance suite runs on both backends and
// marks each of these):
//   - Notes are ordinary etcd keys, "<prefix>/notes/" + topic + "\0" + id as 20 decimal digits,
//     written by the same etcd txn as the txn they come with (in both branches). So they are
//     atomic with it, and never seen by this store's ranges or watches (which stay under
//     "<prefix>/kv"), but they take revisions: a txn that writes only notes, and a dropNotes()
//     that drops any, moves the revision. Topics may not contain a "\0" byte.
//   - Leases expire on etcd's clock, by etcd: expireLeases() returns an empty list and the
//     injected clock is not read. etcd's lease ttl has a one-second granularity and a minimum
//     (about 1.5 election timeouts), and a leader change gives every lease its full ttl again.
//   - Watches: each watch gets every revision in order, once, but etcd feeds different watches
//     independently, so one may be called for revision R before another is called for R - 1
//     (SQLite calls every caught-up watch for a revision before any for the next). A watch that
//     etcd must catch up (started in the past, resumed after a failover, or registered after a
//     write it should see) gets its first events on etcd's next sync, within about 100 ms.
//     `prev_kv` is missing where the previous state has been compacted away.
//   - compact() compacts the whole cluster, every prefix sharing it. A compact at or below the
//     compact revision succeeds without effect, as with SQLite.
//   - stats(): `revision` is read from etcd (a linearizable one-key count), or the latest
//     revision a response carried if etcd does not answer in time; `compact_revision` is the
//     highest this client knows of (found when the store opens, and raised by its own compact()
//     and by watches cut off by compaction), so a compaction by another client shows late.
//     `commits` counts etcd write requests (one raft entry each), and `queued_write_requests`
//     writes in flight.
//   - Request size: etcd refuses a request over its --max-request-bytes (1.5 MiB by default),
//     which a key and value at Store's limits exceed, and a txn with more ops than
//     --max-txn-ops (128 by default), which a txn at kMaxTxnOps with notes exceeds. Run etcd
//     with --max-request-bytes of at least 2 MiB and --max-txn-ops of at least 256. Such refusals
//     are INVALID_ARGUMENT.
//
// Failover. A request goes to the endpoint that answered last; after one failed or timed out,
// the next request goes to the next endpoint. A read (range, keepAlive, stats),
// or a txn marked idempotent, that fails with UNAVAILABLE or takes longer than `attempt_timeout`
// is retried on the next endpoint, until `request_timeout` (or the txn's own `deadline`, which
// bounds the whole call when set). A write is
// retried only when it is known not to have reached etcd (the endpoint refused the connection,
// or had no leader and said so before proposing), as etcd's own Go client does; otherwise it fails
// with UNAVAILABLE saying its outcome is unknown, since retrying a txn that did commit would run
// it twice. The watch stream, when it breaks, is opened again on the next endpoint and every
// watch resumes from the revision after the last one it received: no gap, no repeat (or an
// OUT_OF_RANGE end if that history has been compacted meanwhile). Requests carry etcd's
// "hasleader" requirement, so a member cut off from its cluster refuses them instead of serving
// stale watches.
//
// Errors are core::Status codes mapped from gRPC's (UNAVAILABLE also for deadlines), with
// messages naming the request and the endpoint: "put '/nodes/n1': etcd at https://etcd-1:2379:
// etcdserver: request timed out".
//
// Thread-safety: as Store. The destructor stops the watch threads and closes the connections.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "store/store.h"

namespace tessera::store {

struct EtcdStoreOptions {
  std::vector<std::string> endpoints;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string prefix = "/tessera";
  std::chrono::milliseconds dial_timeout{5'000};
  std::chrono::milliseconds request_timeout{10'000};
  std::chrono::milliseconds no_quorum_timeout{1'000};
  std::chrono::milliseconds attempt_timeout{1'000};
};

// How an error says that etcd has no quorum (every member asked says it has no leader): no write
// can be made anywhere, and none was made. The server answers such a request 503 with
// `X-Tessera-Leader: none` (docs/server.md, "High availability").
inline constexpr std::string_view kNoEtcdQuorum = "no etcd quorum";

class EtcdStore {
 public:
  // Checks `options`, reads the TLS files, connects and waits (up to dial_timeout) until one
  // endpoint answers. Fails with INVALID_ARGUMENT naming the option or file at fault, or
  // UNAVAILABLE naming every endpoint if none answered. `clock` must outlive the store (etcd keeps
  // lease time, so it is not read today; it is taken so every backend opens alike).
  static core::Result<std::unique_ptr<Store>> open(const EtcdStoreOptions& options,
                                                   core::Clock& clock);
};

}  // namespace tessera::store
