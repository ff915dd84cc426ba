#include "server/idempotency.h"

#include <nlohmann/json.hpp>

#include "audit/crypto.h"
#include "core/log.h"
#include "core/rfc3339.h"
#include "server/api_util.h"

namespace tessera::server {

using nlohmann::json;

namespace {

thread_local Idempotency::Ticket* t_ticket = nullptr;

// A record lives from 10 minutes (the lease's ttl less its age when granted anew) to 15.
constexpr auto kRecordTtl = std::chrono::minutes(15);
constexpr auto kLeaseReuse = std::chrono::minutes(5);
constexpr size_t kMaxKeyChars = 128;
// Answers waiting to be kept; beyond it an answer is dropped (its change is kept all the same).
constexpr size_t kMaxQueuedAnswers = 10'000;
// A keyed write's try, and how long one whose outcome is unknown is sent again.
constexpr auto kTry = std::chrono::milliseconds(1000);
constexpr auto kResendFor = std::chrono::seconds(10);

bool writes(const store::Txn& t) {
  for (const store::Op& op : t.success) {
    if (op.kind != store::Op::Kind::kRange) {
      return true;
    }
  }
  return false;
}

}  // namespace

core::Status Idempotency::checkKey(const std::string& key) {
  if (key.empty() || key.size() > kMaxKeyChars) {
    return core::invalidArgument("Idempotency-Key: 1 to 128 characters, like a UUID");
  }
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == ':';
    if (!ok) {
      return core::invalidArgument(
          "Idempotency-Key: letters, digits and - _ . : only, like a UUID");
    }
  }
  return core::Status::ok();
}

Idempotency::Scope::Scope(Ticket* ticket) : previous_(t_ticket) { t_ticket = ticket; }

Idempotency::Scope::~Scope() { t_ticket = previous_; }

Idempotency::Ticket* Idempotency::current() { return t_ticket; }

core::Result<store::LeaseId> Idempotency::lease() {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (lease_.value() == 0 || now - lease_granted_ >= kLeaseReuse) {
    TESSERA_ASSIGN_OR_RETURN(lease_, store_.grant(kRecordTtl));
    lease_granted_ = now;
  }
  return lease_;
}

core::Result<std::optional<HttpResponse>> Idempotency::replay(const Ticket& ticket) {
  TESSERA_ASSIGN_OR_RETURN(std::optional<store::KeyValue> kv, store_.get(ticket.record_key));
  if (!kv) {
    return std::optional<HttpResponse>();
  }
  const json record = json::parse(kv->value, nullptr, false);
  if (!record.is_object()) {
    return core::internalError("idempotency record " + ticket.record_key + " is not JSON");
  }
  if (record.value("request", "") != ticket.request_hash) {
    return std::optional<HttpResponse>(
        api::error(422,
                   "Idempotency-Key was used for another request (another method, path or body): "
                   "use a new key for each change"));
  }
  HttpResponse resp;
  resp.headers.emplace_back("Idempotent-Replayed", "true");
  if (record.contains("status") && record.contains("body") && record["status"].is_number() &&
      record["body"].is_string()) {
    resp.status = record["status"].get<unsigned>();
    resp.body = record["body"].get<std::string>();
    return std::optional<HttpResponse>(std::move(resp));
  }
  // Applied, with no answer kept: the server stopped before it answered, or the answer held a
  // secret.
  resp.status = record.value("status", 200U);
  if (resp.status == 204) {
    resp.status = 200;
  }
  resp.body = json{{"data", json::object()},
                   {"warnings",
                    {record.contains("status")
                         ? "this change was applied once already (same Idempotency-Key); its "
                           "answer held a secret, which is not kept"
                         : "this change was applied once already (same Idempotency-Key); its "
                           "answer was lost before it was kept"}}}
                  .dump();
  return std::optional<HttpResponse>(std::move(resp));
}

core::Status Idempotency::begin(const std::string& key, const std::string& accessor,
                                const std::string& method, const std::string& target,
                                const std::string& body, Ticket& ticket) {
  ticket.record_key = std::string(kIdempotencyPrefix) + audit::sha256Hex(accessor + '\n' + key);
  ticket.request_hash = audit::sha256Hex(method + ' ' + target + '\n' + body);
  TESSERA_ASSIGN_OR_RETURN(ticket.lease, lease());
  return core::Status::ok();
}

HttpResponse Idempotency::end(Ticket& ticket, HttpResponse resp, bool sensitive) {
  if (ticket.raced) {
    auto earlier = replay(ticket);
    if (earlier.isOk() && *earlier) {
      return std::move(**earlier);
    }
    return resp;
  }
  if (!ticket.attached) {
    if (resp.status >= 400) {
      // Refused without writing: because an earlier try applied it ("exists")? Then that try's
      // answer. Otherwise nothing was written, and a retry is judged again.
      auto earlier = replay(ticket);
      if (earlier.isOk() && *earlier) {
        return std::move(**earlier);
      }
    }
    return resp;
  }
  json record = {{"request", ticket.request_hash},
                 {"status", resp.status},
                 {"time", core::formatRfc3339(clock_.wallNow())}};
  if (!sensitive) {
    record["body"] = resp.body;
  }
  const std::string value = record.dump();
  if (value.size() > store::kMaxValueBytes) {
    record.erase("body");
  }
  // Kept after the answer goes, off the request's path: a retry that comes before it lands is
  // told the change was applied, without its answer.
  keep(ticket.record_key, record.dump(), ticket.lease);
  return resp;
}

void Idempotency::keep(std::string key, std::string value, store::LeaseId lease) {
  std::lock_guard lock(mu_);
  if (answers_.size() >= kMaxQueuedAnswers) {
    ++dropped_;
    return;  // The changes are stored with their records; only these answers are not kept.
  }
  answers_.push_back({std::move(key), std::move(value), lease});
  if (!keeper_.joinable()) {
    keeper_ = std::thread([this] { keepAnswers(); });
  }
  cv_.notify_one();
}

void Idempotency::keepAnswers() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !answers_.empty(); });
    if (answers_.empty()) {
      return;  // Stopping, and every answer written.
    }
    std::vector<Answer> batch;
    batch.swap(answers_);
    writing_ = true;
    lock.unlock();
    // One txn for many: a put per answer, up to the store's limit per txn.
    for (size_t i = 0; i < batch.size(); i += store::kMaxTxnOps) {
      store::Txn txn;
      for (size_t j = i; j < std::min(batch.size(), i + store::kMaxTxnOps); ++j) {
        txn.success.push_back(store::Op::put(batch[j].key, batch[j].value, batch[j].lease));
      }
      if (auto r = store_.txn(std::move(txn)); !r.isOk()) {
        core::logWarn("idempotency: cannot keep {} answer(s): {}", batch.size() - i,
                      r.status().message());
      }
    }
    lock.lock();
    writing_ = false;
    flushed_.notify_all();
  }
}

void Idempotency::flush() {
  std::unique_lock lock(mu_);
  flushed_.wait(lock, [&] { return answers_.empty() && !writing_; });
}

Idempotency::~Idempotency() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (keeper_.joinable()) {
    keeper_.join();
  }
}

core::Result<int64_t> IdempotentStore::put(std::string_view key, std::string_view value,
                                           store::LeaseId lease) {
  if (Idempotency::current() == nullptr || Idempotency::current()->attached) {
    return inner().put(key, value, lease);
  }
  store::Txn t;
  t.success.push_back(store::Op::put(std::string(key), std::string(value), lease));
  TESSERA_ASSIGN_OR_RETURN(store::TxnResult r, txn(std::move(t)));
  return r.revision;
}

core::Result<store::DeleteResult> IdempotentStore::deleteRange(std::string_view key,
                                                               std::string_view range_end) {
  if (Idempotency::current() == nullptr || Idempotency::current()->attached) {
    return inner().deleteRange(key, range_end);
  }
  store::Txn t;
  t.success.push_back(store::Op::del(std::string(key), std::string(range_end)));
  TESSERA_ASSIGN_OR_RETURN(store::TxnResult r, txn(std::move(t)));
  return store::DeleteResult{r.results.empty() ? 0 : r.results[0].deleted, r.revision};
}

core::Result<store::TxnResult> IdempotentStore::txn(store::Txn t) {
  Idempotency::Ticket* ticket = Idempotency::current();
  if (ticket == nullptr || ticket->attached || !writes(t) ||
      t.success.size() + 1 > store::kMaxTxnOps) {
    return inner().txn(std::move(t));
  }
  const size_t own = t.success.size();
  t.success.push_back(store::Op::put(
      ticket->record_key, json{{"request", ticket->request_hash}}.dump(), ticket->lease));
  t.guard.push_back(store::Compare::version(ticket->record_key, store::Compare::kEqual, 0));
  t.idempotent = false;  // Not blindly: sent again, it fails its guard (below).
  if (t.deadline.count() == 0) {
    t.deadline = kTry;
  }
  const auto until = std::chrono::steady_clock::now() + kResendFor;
  core::Result<store::TxnResult> got = inner().txn(t);
  while (!got.isOk() && got.status().message().find(store::kOutcomeUnknown) != std::string::npos &&
         std::chrono::steady_clock::now() < until) {
    // Its answer was lost: sent again (the store sends it to another member), it is applied
    // if the first try was not, and fails its guard if it was.
    core::logWarn("a keyed write's outcome is unknown ({}); sending it again",
                  got.status().message());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    got = inner().txn(t);
  }
  TESSERA_ASSIGN_OR_RETURN(store::TxnResult r, std::move(got));
  if (r.guard_failed) {
    // Another try of this key wrote first (another request's, or an earlier send of this
    // one): this one changes nothing.
    ticket->raced = true;
    return core::alreadyExists("this change was applied once already (same Idempotency-Key)");
  }
  if (r.succeeded) {
    ticket->attached = true;
    r.results.resize(own);  // The record's put is none of the caller's business.
  }
  return r;
}

}  // namespace tessera::server
