// Idempotency keys (docs/server.md, "High availability"): a change sent with an
// `Idempotency-Key` header is applied at most once per key, however often it is sent. Clients
// send one with every change (api/client.h) and send the change again when its answer is lost
// (the leader died, a connection dropped, the store's answer did not come): the retry gets the
// first answer again, with `Idempotent-Replayed: true`, instead of a second application.
//
// How: the record of a key lives in the store, "/sys/idempotency/<sha256(token accessor, key)>",
// and is written by the same store txn as the change itself: the store handlers write through
// (IdempotentStore, below) adds it to the first write a request makes, guarded on the record not
// existing yet. So either both are stored or neither, and of two tries racing on one key only
// one writes. A first try costs no read: a key seen before shows itself when the guard of the
// write fails, or (for a change refused before it writes) in one read after the refusal. Once
// the handler has answered, the answer is added to the record off the request's path (an answer
// that holds a secret, such as a new token, is not kept: the retry is told it was applied and
// that its answer is withheld). Records live 10 to 15 minutes (a lease of the store's).
//
// A request that writes nothing (a refusal) keeps no record: sent again, it is judged again. A
// key may name one request: the same key with another method, path or body is refused (422).
//
// The guard also lets the server itself send such a write again: a try is bounded (1 s), and
// one whose outcome is unknown (an etcd member whose leader just died holds a write until
// etcd's own timeout, about 7 s) is sent again, to the next member, for up to 10 s. If the
// first try did apply, the next one's guard fails, and the request is answered as a replay.
//
// Thread-safe. The request in progress on a thread is known through a thread-local ticket, set
// by Idempotency::Scope for the handler's run.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "server/http_server.h"
#include "store/forwarding_store.h"

namespace tessera::server {

inline constexpr std::string_view kIdempotencyPrefix = "/sys/idempotency/";

class Idempotency {
 public:
  // One change's record while its handler runs.
  struct Ticket {
    std::string record_key;    // Its store key.
    std::string request_hash;  // What the key was first used for.
    store::LeaseId lease;      // The record's.
    bool attached = false;     // Written with the change.
    bool raced = false;        // Another try of the same key wrote first.
  };

  Idempotency(store::Store& store, const core::Clock& clock) : store_(store), clock_(clock) {}
  ~Idempotency();  // Keeps the answers still waiting first.
  Idempotency(const Idempotency&) = delete;
  Idempotency& operator=(const Idempotency&) = delete;

  // A key as clients send it: 1 to 128 characters of [A-Za-z0-9_.:-]. Empty: no key.
  static core::Status checkKey(const std::string& key);

  // Before the handler of a change sent with `key` by the token `accessor`: readies `ticket`
  // to make the handler's first write carry the record (no store read: a key seen before shows
  // itself when that write's guard fails, or in end()).
  core::Status begin(const std::string& key, const std::string& accessor, const std::string& method,
                     const std::string& target, const std::string& body, Ticket& ticket);
  // After the handler answered `resp`: keeps the answer with the record (unless `sensitive`),
  // soon after, on a thread of its own; or, if an earlier try of the key applied the change,
  // gives that one's answer instead.
  HttpResponse end(Ticket& ticket, HttpResponse resp, bool sensitive);
  // Waits until every answer end() was given is in the store (tests).
  void flush();

  // Makes writes on this thread carry `ticket` while it lives.
  class Scope {
   public:
    explicit Scope(Ticket* ticket);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Ticket* previous_;
  };

  // The ticket of the request on this thread (nullptr: none).
  static Ticket* current();

 private:
  struct Answer {
    std::string key;
    std::string value;
    store::LeaseId lease;
  };
  core::Result<store::LeaseId> lease();
  core::Result<std::optional<HttpResponse>> replay(const Ticket& ticket);
  void keep(std::string key, std::string value, store::LeaseId lease);
  void keepAnswers();  // The keeper thread.

  store::Store& store_;
  const core::Clock& clock_;
  std::mutex mu_;
  store::LeaseId lease_;
  std::chrono::steady_clock::time_point lease_granted_{};
  std::vector<Answer> answers_;  // Waiting to be kept.
  std::condition_variable cv_;
  std::condition_variable flushed_;
  bool writing_ = false;
  bool stopping_ = false;
  int64_t dropped_ = 0;
  std::thread keeper_;  // Started with the first answer to keep.
};

// The store as handlers see it: the first write of a request with a ticket carries its record
// (Idempotency above). Everything else passes through.
class IdempotentStore final : public store::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;

  core::Result<int64_t> put(std::string_view key, std::string_view value,
                            store::LeaseId lease = store::LeaseId{}) override;
  core::Result<store::DeleteResult> deleteRange(std::string_view key,
                                                std::string_view range_end = {}) override;
  core::Result<store::TxnResult> txn(store::Txn txn) override;
};

}  // namespace tessera::server
