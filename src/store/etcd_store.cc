#include "store/etcd_store.h"

#include <arpa/inet.h>
#include <etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "core/log.h"
#include "store/internal/checks.h"

namespace tessera::store {
namespace {

namespace pb = etcdserverpb;
using core::Result;
using core::Status;
using SystemTime = std::chrono::system_clock::time_point;

// Where a store's keys and notes live under its prefix (etcd_store.h).
constexpr char kKeysPart[] = "/kv";
constexpr char kNotesPart[] = "/notes/";
// Digits of a note id in its key: UINT64_MAX has 20, and fixed width keeps key order = id order.
constexpr int kNoteIdDigits = 20;
// etcd's metadata asking a member to refuse requests while it has no leader.
constexpr char kRequireLeaderKey[] = "hasleader";
// How long the watch thread waits before opening its stream again once every endpoint failed.
constexpr std::chrono::milliseconds kMaxWatchBackoff{1000};
// How long open() gives one endpoint per round before trying the next.
constexpr std::chrono::milliseconds kOpenTry{500};

// One etcd endpoint: its URL (for messages) and the stubs on its channel.
struct Endpoint {
  std::string url;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Lease::Stub> lease;
};

Result<std::string> readFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return core::invalidArgument("etcd " + std::string(what) + " '" + path +
                                 "' cannot be read: " + std::strerror(errno));
  }
  std::ostringstream out;
  out << in.rdbuf();
  if (out.str().empty()) {
    return core::invalidArgument("etcd " + std::string(what) + " '" + path + "' is empty");
  }
  return out.str();
}

bool isLoopback(const std::string& host) {
  if (host == "localhost" || host == "::1") {
    return true;
  }
  in_addr v4{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

struct ParsedEndpoint {
  bool tls = false;
  std::string target;  // host:port for gRPC.
};

// "http://127.0.0.1:2379" or "https://etcd-1:2379" (an IPv6 host in brackets); a trailing "/" is
// allowed, nothing else after the port.
Result<ParsedEndpoint> parseEndpoint(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return core::invalidArgument("etcd endpoint '" + url + "': " + why);
  };
  ParsedEndpoint out;
  std::string_view rest = url;
  if (rest.starts_with("https://")) {
    out.tls = true;
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else {
    return bad("must start with https:// (or http:// on a loopback address)");
  }
  if (rest.ends_with('/')) {
    rest.remove_suffix(1);
  }
  std::string host;
  std::string_view port;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return bad("expected [ipv6]:port");
    }
    host = std::string(rest.substr(1, close - 1));
    port = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) {
      return bad("needs a port, e.g. https://etcd-1:2379");
    }
    host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
  }
  int port_number = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  if (host.empty() || host.find_first_of("/@?#") != std::string::npos || ec != std::errc() ||
      end != port.data() + port.size() || port_number < 1 || port_number > 65535) {
    return bad("expected scheme://host:port with a port from 1 to 65535");
  }
  if (!out.tls && !isLoopback(host)) {
    return bad(
        "plain http is allowed only on a loopback address (127.0.0.0/8, ::1, localhost): "
        "use https with ca_file");
  }
  out.target = host.find(':') != std::string::npos ? "[" + host + "]:" + std::string(port)
                                                   : host + ":" + std::string(port);
  return out;
}

core::StatusCode codeOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return core::StatusCode::kOk;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return core::StatusCode::kInvalidArgument;
    case grpc::StatusCode::NOT_FOUND:
      return core::StatusCode::kNotFound;
    case grpc::StatusCode::ALREADY_EXISTS:
      return core::StatusCode::kAlreadyExists;
    case grpc::StatusCode::FAILED_PRECONDITION:
      return core::StatusCode::kFailedPrecondition;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return core::StatusCode::kResourceExhausted;
    case grpc::StatusCode::PERMISSION_DENIED:
      return core::StatusCode::kPermissionDenied;
    case grpc::StatusCode::UNAUTHENTICATED:
      return core::StatusCode::kUnauthenticated;
    case grpc::StatusCode::OUT_OF_RANGE:
      return core::StatusCode::kOutOfRange;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::ABORTED:
      return core::StatusCode::kUnavailable;
    default:
      return core::StatusCode::kInternal;
  }
}

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// A write that failed this way never reached a member that could apply it, so sending it again
// cannot apply it twice: no connection could be made, or the member said it has no leader (the
// "hasleader" check runs before anything is proposed) or is overloaded.
// The endpoint could not be reached at all (the request never left this process).
bool unreachable(const grpc::Status& s) {
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE) {
    return false;
  }
  const std::string& m = s.error_message();
  return contains(m, "failed to connect") || contains(m, "Failed to connect") ||
         contains(m, "Connection refused") || contains(m, "connections to all backends failing") ||
         contains(m, "DNS resolution failed");
}

bool writeNeverSent(const grpc::Status& s) {
  const std::string& m = s.error_message();
  return unreachable(s) || (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
                            (m == "etcdserver: no leader" || m == "etcdserver: too many requests" ||
                             m == "etcdserver: not capable"));
}

int64_t maxRevision(std::atomic<int64_t>& a, int64_t r) {
  int64_t seen = a.load();
  while (r > seen && !a.compare_exchange_weak(seen, r)) {
  }
  return std::max(seen, r);
}

std::string noteId(uint64_t id) {
  char digits[kNoteIdDigits + 1];
  std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(id));
  return std::string(digits, kNoteIdDigits);
}

class EtcdStoreImpl final : public Store {
 public:
  EtcdStoreImpl(EtcdStoreOptions options, std::vector<std::unique_ptr<Endpoint>> endpoints)
      : options_(std::move(options)),
        endpoints_(std::move(endpoints)),
        keys_prefix_(options_.prefix + kKeysPart),
        keys_end_(prefixEnd(keys_prefix_)),
        notes_prefix_(options_.prefix + kNotesPart) {}

  ~EtcdStoreImpl() override {
    {
      std::lock_guard stream_lock(stream_mu_);
      std::lock_guard lock(mu_);
      stop_ = true;
      if (stream_ctx_ != nullptr) {
        stream_ctx_->TryCancel();
      }
    }
    wake_.notify_all();
    if (watch_thread_.joinable()) {
      watch_thread_.join();
    }
    if (dispatch_thread_.joinable()) {
      dispatch_thread_.join();
    }
  }

  // Waits until an endpoint answers, learns the revision and compact revision, and starts the
  // watch threads.
  Status start() {
    const SystemTime deadline = std::chrono::system_clock::now() + options_.dial_timeout;
    std::vector<std::string> errors(endpoints_.size(), "no answer");
    // Round after round over the endpoints, each try bounded, so that one that never answers
    // does not keep open() from the others.
    bool connected = false;
    // Since when every round heard "no leader" from some members and nothing from the others:
    // no quorum, said after no_quorum_timeout rather than the whole dial_timeout.
    std::optional<SystemTime> no_quorum_since;
    while (!connected && std::chrono::system_clock::now() < deadline) {
      bool no_leader = false;
      bool other_error = false;
      for (size_t i = 0; i < endpoints_.size() && !connected; ++i) {
        Endpoint& e = *endpoints_[i];
        pb::RangeRequest req;
        req.set_key(keys_prefix_);
        req.set_count_only(true);
        pb::RangeResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::min(deadline, std::chrono::system_clock::now() + kOpenTry));
        ctx.AddMetadata(kRequireLeaderKey, "true");
        const grpc::Status s = e.kv->Range(&ctx, req, &resp);
        if (!s.ok()) {
          errors[i] = s.error_message();
          if (s.error_message() == "etcdserver: no leader") {
            no_leader = true;
          } else if (!unreachable(s)) {
            other_error = true;
          }
          continue;
        }
        current_ = i;
        maxRevision(revision_, resp.header().revision());
        connected = true;
      }
      if (!connected) {
        const SystemTime now = std::chrono::system_clock::now();
        if (!no_leader || other_error) {
          no_quorum_since.reset();
        } else if (!no_quorum_since) {
          no_quorum_since = now;
        } else if (now - *no_quorum_since >= options_.no_quorum_timeout) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (!connected) {
      std::string all;
      bool no_leader = false;  // Some member answered, and said it has no leader.
      for (size_t i = 0; i < endpoints_.size(); ++i) {
        all += (i == 0 ? "" : "; ") + endpoints_[i]->url + ": " + errors[i];
        no_leader = no_leader || errors[i] == "etcdserver: no leader";
      }
      if (no_quorum_since) {
        return core::unavailable(std::string(kNoEtcdQuorum) + ": the members that answer have " +
                                 "had no leader for " +
                                 std::to_string(options_.no_quorum_timeout.count()) +
                                 " ms, the others cannot be reached (" + all + ")");
      }
      return core::unavailable((no_leader ? std::string(kNoEtcdQuorum) + ": " : std::string()) +
                               "no etcd endpoint answered within " +
                               std::to_string(options_.dial_timeout.count()) + " ms (" + all + ")");
    }
    TESSERA_RETURN_IF_ERROR(findCompactRevision());
    watch_thread_ = std::thread([this] { runWatchStream(); });
    dispatch_thread_ = std::thread([this] { dispatch(); });
    return Status::ok();
  }

  Result<RangeResult> range(std::string_view key, std::string_view range_end, int64_t limit,
                            int64_t revision) override {
    TESSERA_RETURN_IF_ERROR(internal::checkRange(key, range_end));
    if (limit < 0 || revision < 0) {
      return core::invalidArgument("range of " + internal::describeKey(key) +
                                   ": limit and revision must not be negative");
    }
    pb::RangeRequest req = rangeRequest(key, range_end, limit);
    req.set_revision(revision);
    pb::RangeResponse resp;
    TESSERA_RETURN_IF_ERROR(
        call("range " + internal::describeKey(key), Retry::kAlways,
             [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Range(&ctx, req, &resp); }));
    return rangeResult(resp, revision == 0 ? resp.header().revision() : revision);
  }

  Result<int64_t> put(std::string_view key, std::string_view value, LeaseId lease) override {
    TESSERA_RETURN_IF_ERROR(internal::checkKey(key));
    TESSERA_RETURN_IF_ERROR(internal::checkValue(key, value));
    pb::PutRequest req;
    req.set_key(dataKey(key));
    req.set_value(std::string(value));
    req.set_lease(lease.value());
    pb::PutResponse resp;
    TESSERA_RETURN_IF_ERROR(
        write("put " + internal::describeKey(key),
              [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Put(&ctx, req, &resp); },
              {lease}));
    return resp.header().revision();
  }

  Result<DeleteResult> deleteRange(std::string_view key, std::string_view range_end) override {
    TESSERA_RETURN_IF_ERROR(internal::checkRange(key, range_end));
    pb::DeleteRangeRequest req;
    req.set_key(dataKey(key));
    req.set_range_end(dataEnd(range_end));
    pb::DeleteRangeResponse resp;
    TESSERA_RETURN_IF_ERROR(
        write("delete " + internal::describeKey(key), [&](Endpoint& e, grpc::ClientContext& ctx) {
          return e.kv->DeleteRange(&ctx, req, &resp);
        }));
    return DeleteResult{resp.deleted(), resp.header().revision()};
  }

  Result<TxnResult> txn(Txn txn) override {
    TESSERA_RETURN_IF_ERROR(internal::checkTxn(txn));
    pb::TxnRequest req;
    for (const Compare& c : txn.compares) {
      addCompare(c, req.add_compare());
    }
    std::vector<LeaseId> leases;
    for (const Op& op : txn.success) {
      addOp(op, req.add_success(), leases);
    }
    for (const Op& op : txn.failure) {
      addOp(op, req.add_failure(), leases);
    }
    // Notes go with whichever branch runs: one put per note in each.
    for (const Note& note : txn.notes) {
      TESSERA_ASSIGN_OR_RETURN(std::string key, noteKey(note.topic, note.id));
      for (auto* branch : {req.mutable_success(), req.mutable_failure()}) {
        pb::PutRequest* put = branch->Add()->mutable_request_put();
        put->set_key(key);
        put->set_value(note.body);
      }
    }
    // A guard is an outer txn whose only op is this one (etcd's nested txns, 3.3 and later).
    pb::TxnRequest outer;
    if (!txn.guard.empty()) {
      for (const Compare& c : txn.guard) {
        addCompare(c, outer.add_compare());
      }
      *outer.add_success()->mutable_request_txn() = std::move(req);
    }
    const pb::TxnRequest& sent = txn.guard.empty() ? req : outer;
    pb::TxnResponse got;
    // A txn that may be applied twice is sent again wherever its outcome is unknown.
    TESSERA_RETURN_IF_ERROR(write(
        "txn", [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, sent, &got); },
        leases, txn.idempotent ? Retry::kAlways : Retry::kIfNeverSent, txn.deadline));
    TxnResult result;
    if (!txn.guard.empty() && !got.succeeded()) {
      result.guard_failed = true;
      result.revision = got.header().revision();
      return result;
    }
    if (!txn.guard.empty() && (got.responses_size() != 1 || !got.responses(0).has_response_txn())) {
      return core::internalError("txn: etcd's answer to a guarded txn holds no inner txn");
    }
    const pb::TxnResponse& resp = txn.guard.empty() ? got : got.responses(0).response_txn();
    result.succeeded = resp.succeeded();
    result.revision = got.header().revision();
    const std::vector<Op>& ran = resp.succeeded() ? txn.success : txn.failure;
    for (size_t i = 0; i < ran.size() && i < static_cast<size_t>(resp.responses_size()); ++i) {
      const pb::ResponseOp& r = resp.responses(static_cast<int>(i));
      OpResult out;
      out.kind = ran[i].kind;
      if (r.has_response_range()) {
        out.range = rangeResult(r.response_range(), result.revision);
      } else if (r.has_response_delete_range()) {
        out.deleted = r.response_delete_range().deleted();
      }
      result.results.push_back(std::move(out));
    }
    return result;
  }

  Result<WatchId> watch(std::string_view key, std::string_view range_end, int64_t from_revision,
                        WatchCallback callback) override {
    TESSERA_RETURN_IF_ERROR(internal::checkRange(key, range_end));
    if (from_revision < 0 || !callback) {
      return core::invalidArgument("watch of " + internal::describeKey(key) +
                                   ": needs a callback and a revision >= 0");
    }
    // One linearizable read settles where the watch starts: "the next revision" is the one
    // after the cluster's current revision (not after what a lagging member has applied), and a
    // start below the compact revision fails here rather than in the callback.
    pb::RangeRequest probe;
    probe.set_key(dataKey(key));
    probe.set_count_only(true);
    probe.set_revision(from_revision);
    pb::RangeResponse resp;
    const Status s = call(
        "watch " + internal::describeKey(key), Retry::kAlways,
        [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Range(&ctx, probe, &resp); });
    int64_t start = from_revision;
    if (s.isOk()) {
      start = from_revision == 0 ? resp.header().revision() + 1 : from_revision;
    } else if (s.code() != core::StatusCode::kOutOfRange || !contains(s.message(), "future")) {
      if (s.code() == core::StatusCode::kOutOfRange) {
        return core::outOfRange("cannot watch " + internal::describeKey(key) + " from revision " +
                                std::to_string(from_revision) +
                                ": that history has been compacted; read the current state with "
                                "range() and watch from its revision + 1 (" +
                                s.message() + ")");
      }
      return s;
    }
    auto w = std::make_shared<Watcher>();
    w->key = dataKey(key);
    w->range_end = dataEnd(range_end);
    w->callback = std::move(callback);
    w->next_revision = start;
    std::lock_guard stream_lock(stream_mu_);
    {
      std::lock_guard lock(mu_);
      if (stop_) {
        return core::unavailable("the etcd store is closing");
      }
      w->id = next_watch_id_++;
      watchers_[w->id] = w;
    }
    if (stream_ != nullptr) {
      sendCreate(*w);
    }
    return WatchId{w->id};
  }

  void cancelWatch(WatchId id) override {
    std::shared_ptr<Watcher> w;
    {
      std::lock_guard lock(mu_);
      if (auto it = watchers_.find(id.value()); it != watchers_.end()) {
        w = it->second;
        w->done = true;
        watchers_.erase(it);
      }
    }
    if (w != nullptr) {
      std::lock_guard stream_lock(stream_mu_);
      if (stream_ != nullptr && w->stream_generation == stream_generation_) {
        pb::WatchRequest req;
        req.mutable_cancel_request()->set_watch_id(w->id);
        (void)stream_->Write(req);  // Best effort: a broken stream ends the watch anyway.
      }
    }
    std::unique_lock lock(mu_);
    if (std::this_thread::get_id() != dispatch_thread_.get_id()) {
      callback_done_.wait(lock, [&] { return running_ != id.value(); });
    }
  }

  Result<LeaseId> grant(core::Duration ttl) override {
    if (ttl <= core::Duration::zero()) {
      return core::invalidArgument("lease ttl must be positive, got " +
                                   std::to_string(ttl.count()) + "ns");
    }
    pb::LeaseGrantRequest req;
    req.set_ttl(std::chrono::ceil<std::chrono::seconds>(ttl).count());
    pb::LeaseGrantResponse resp;
    // A grant sent twice only leaves a lease nobody uses, which expires: safe to retry.
    TESSERA_RETURN_IF_ERROR(
        call("grant a lease", Retry::kAlways, [&](Endpoint& e, grpc::ClientContext& ctx) {
          return e.lease->LeaseGrant(&ctx, req, &resp);
        }));
    if (!resp.error().empty()) {
      return core::unavailable("grant a lease: etcd: " + resp.error());
    }
    countWrite();
    return LeaseId{resp.id()};
  }

  Result<core::Duration> keepAlive(LeaseId id) override {
    pb::LeaseKeepAliveRequest req;
    req.set_id(id.value());
    pb::LeaseKeepAliveResponse resp;
    TESSERA_RETURN_IF_ERROR(call("keep lease " + std::to_string(id.value()) + " alive",
                                 Retry::kAlways, [&](Endpoint& e, grpc::ClientContext& ctx) {
                                   auto stream = e.lease->LeaseKeepAlive(&ctx);
                                   if (stream->Write(req) && stream->WritesDone() &&
                                       stream->Read(&resp)) {
                                     pb::LeaseKeepAliveResponse ignored;
                                     while (stream->Read(&ignored)) {
                                     }
                                   }
                                   return stream->Finish();
                                 }));
    if (resp.ttl() <= 0) {
      return core::notFound("lease " + std::to_string(id.value()) +
                            " not found: it expired or was revoked");
    }
    return core::Duration(std::chrono::seconds(resp.ttl()));
  }

  Result<int64_t> revoke(LeaseId id) override {
    pb::LeaseRevokeRequest req;
    req.set_id(id.value());
    pb::LeaseRevokeResponse resp;
    const Status s = write("revoke lease " + std::to_string(id.value()),
                           [&](Endpoint& e, grpc::ClientContext& ctx) {
                             return e.lease->LeaseRevoke(&ctx, req, &resp);
                           });
    if (s.code() == core::StatusCode::kNotFound) {
      return core::notFound("lease " + std::to_string(id.value()) +
                            " not found: it expired or was revoked (" + s.message() + ")");
    }
    TESSERA_RETURN_IF_ERROR(s);
    return resp.header().revision();
  }

  Result<std::vector<LeaseId>> expireLeases() override {
    return std::vector<LeaseId>();  // etcd expires leases itself (etcd_store.h).
  }

  Status compact(int64_t revision) override {
    if (revision <= 0) {
      return Status::ok();
    }
    pb::CompactionRequest req;
    req.set_revision(revision);
    req.set_physical(true);
    pb::CompactionResponse resp;
    const Status s = write(
        "compact at revision " + std::to_string(revision),
        [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Compact(&ctx, req, &resp); });
    if (s.code() == core::StatusCode::kOutOfRange && contains(s.message(), "compacted")) {
      return Status::ok();  // Already compacted at or past `revision`.
    }
    TESSERA_RETURN_IF_ERROR(s);
    maxRevision(compact_revision_, revision);
    return Status::ok();
  }

  StoreStats stats() const override {
    StoreStats s;
    pb::RangeRequest req;
    req.set_key(keys_prefix_);
    req.set_count_only(true);
    pb::RangeResponse resp;
    const Status read = call("stats", Retry::kAlways, [&](Endpoint& e, grpc::ClientContext& ctx) {
      return e.kv->Range(&ctx, req, &resp);
    });
    s.revision = read.isOk() ? maxRevision(revision_, resp.header().revision()) : revision_.load();
    s.compact_revision = compact_revision_.load();
    s.write_requests = write_requests_.load();
    s.commits = write_requests_.load();
    s.queued_write_requests = writes_in_flight_.load();
    return s;
  }

  Result<std::vector<Note>> notes(std::string_view topic) override {
    TESSERA_ASSIGN_OR_RETURN(std::string first, noteKey(topic, 0));
    const std::string topic_prefix = first.substr(0, first.size() - kNoteIdDigits);
    pb::RangeRequest req;
    req.set_key(topic_prefix);
    req.set_range_end(prefixEnd(topic_prefix));
    pb::RangeResponse resp;
    TESSERA_RETURN_IF_ERROR(
        call("notes of topic " + internal::describeKey(topic), Retry::kAlways,
             [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Range(&ctx, req, &resp); }));
    std::vector<Note> out;
    for (const auto& kv : resp.kvs()) {
      const std::string_view digits = std::string_view(kv.key()).substr(topic_prefix.size());
      uint64_t id = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
      if (ec != std::errc() || end != digits.data() + digits.size()) {
        return core::internalError("etcd key " + internal::describeKey(kv.key()) +
                                   " under the notes prefix is not a note");
      }
      out.push_back(Note{std::string(topic), id, kv.value()});
    }
    return out;
  }

  Status dropNotes(std::string_view topic, uint64_t up_to) override {
    TESSERA_ASSIGN_OR_RETURN(std::string first, noteKey(topic, 0));
    pb::DeleteRangeRequest req;
    req.set_key(first);
    if (up_to == UINT64_MAX) {
      req.set_range_end(prefixEnd(first.substr(0, first.size() - kNoteIdDigits)));
    } else {
      req.set_range_end(first.substr(0, first.size() - kNoteIdDigits) + noteId(up_to + 1));
    }
    pb::DeleteRangeResponse resp;
    return write(
        "drop notes of topic " + internal::describeKey(topic),
        [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->DeleteRange(&ctx, req, &resp); });
  }

 private:
  enum class Retry { kAlways, kIfNeverSent };

  struct Watcher {
    int64_t id = 0;
    std::string key;  // etcd keys.
    std::string range_end;
    WatchCallback callback;
    int64_t next_revision = 0;      // The first revision not yet received; guarded by mu_.
    int64_t stream_generation = 0;  // The stream it was created on; guarded by stream_mu_.
    bool done = false;              // Cancelled, or its last response delivered; guarded by mu_.
    bool ended = false;             // Its last response is queued; guarded by mu_.
  };

  struct Delivery {
    std::shared_ptr<Watcher> watcher;
    WatchResponse response;
  };

  std::string dataKey(std::string_view key) const { return keys_prefix_ + std::string(key); }

  // A Store range end as an etcd one: empty stays empty (one key), "\0" (no end) stops at the
  // end of this store's keys.
  std::string dataEnd(std::string_view range_end) const {
    if (range_end.empty()) {
      return {};
    }
    if (range_end == std::string_view("\0", 1)) {
      return keys_end_;
    }
    return dataKey(range_end);
  }

  Result<std::string> noteKey(std::string_view topic, uint64_t id) const {
    if (topic.find('\0') != std::string_view::npos) {
      return core::invalidArgument("note topic " + internal::describeKey(topic) +
                                   " contains a zero byte, which the etcd store cannot keep");
    }
    return notes_prefix_ + std::string(topic) + '\0' + noteId(id);
  }

  pb::RangeRequest rangeRequest(std::string_view key, std::string_view range_end,
                                int64_t limit) const {
    pb::RangeRequest req;
    req.set_key(dataKey(key));
    req.set_range_end(dataEnd(range_end));
    req.set_limit(limit);
    return req;
  }

  void addCompare(const Compare& c, pb::Compare* out) const {
    out->set_key(dataKey(c.key));
    switch (c.relation) {
      case Compare::kEqual:
        out->set_result(pb::Compare::EQUAL);
        break;
      case Compare::kNotEqual:
        out->set_result(pb::Compare::NOT_EQUAL);
        break;
      case Compare::kLess:
        out->set_result(pb::Compare::LESS);
        break;
      case Compare::kGreater:
        out->set_result(pb::Compare::GREATER);
        break;
    }
    switch (c.target) {
      case Compare::Target::kVersion:
        out->set_target(pb::Compare::VERSION);
        out->set_version(c.number);
        break;
      case Compare::Target::kCreateRevision:
        out->set_target(pb::Compare::CREATE);
        out->set_create_revision(c.number);
        break;
      case Compare::Target::kModRevision:
        out->set_target(pb::Compare::MOD);
        out->set_mod_revision(c.number);
        break;
      case Compare::Target::kValue:
        out->set_target(pb::Compare::VALUE);
        out->set_value(c.bytes);
        break;
    }
  }

  void addOp(const Op& op, pb::RequestOp* out, std::vector<LeaseId>& leases) const {
    switch (op.kind) {
      case Op::Kind::kPut: {
        pb::PutRequest* put = out->mutable_request_put();
        put->set_key(dataKey(op.key));
        put->set_value(op.value);
        put->set_lease(op.lease.value());
        if (op.lease.value() != 0) {
          leases.push_back(op.lease);
        }
        break;
      }
      case Op::Kind::kDelete: {
        pb::DeleteRangeRequest* del = out->mutable_request_delete_range();
        del->set_key(dataKey(op.key));
        del->set_range_end(dataEnd(op.range_end));
        break;
      }
      case Op::Kind::kRange:
        *out->mutable_request_range() = rangeRequest(op.key, op.range_end, op.limit);
        break;
    }
  }

  KeyValue keyValue(const mvccpb::KeyValue& kv) const {
    return KeyValue{kv.key().substr(std::min(keys_prefix_.size(), kv.key().size())),
                    kv.value(),
                    kv.create_revision(),
                    kv.mod_revision(),
                    kv.version(),
                    LeaseId{kv.lease()}};
  }

  RangeResult rangeResult(const pb::RangeResponse& resp, int64_t revision) const {
    RangeResult r;
    for (const auto& kv : resp.kvs()) {
      r.kvs.push_back(keyValue(kv));
    }
    r.count = resp.count();
    r.more = resp.more();
    r.revision = revision;
    return r;
  }

  // Runs `fn` (one gRPC call on an endpoint, with a context carrying the deadline) on the
  // current endpoint, moving to the next one on UNAVAILABLE as `retry` allows, until the request
  // timeout. `what` names the request in errors.
  template <typename Fn>
  Status call(const std::string& what, Retry retry, Fn&& fn,
              std::chrono::milliseconds within = std::chrono::milliseconds(0)) const {
    const auto limit =
        within.count() > 0 ? std::min(within, options_.request_timeout) : options_.request_timeout;
    const SystemTime deadline = std::chrono::system_clock::now() + limit;
    std::chrono::milliseconds backoff{10};
    std::optional<SystemTime> no_leader_since;  // Every answer since said "no leader".
    for (size_t attempt = 1;; ++attempt) {
      size_t i = current_.load();
      Endpoint& e = *endpoints_[i];
      grpc::ClientContext ctx;
      ctx.set_deadline(
          retry == Retry::kAlways
              ? std::min(deadline, std::chrono::system_clock::now() + options_.attempt_timeout)
              : deadline);
      ctx.AddMetadata(kRequireLeaderKey, "true");
      const grpc::Status s = fn(e, ctx);
      if (s.ok()) {
        return Status::ok();
      }
      // Members that answer say they have no leader, the others cannot be reached: no quorum.
      if (s.error_message() == "etcdserver: no leader" || (no_leader_since && unreachable(s))) {
        const SystemTime now = std::chrono::system_clock::now();
        if (!no_leader_since) {
          no_leader_since = now;
        } else if (now - *no_leader_since >= options_.no_quorum_timeout) {
          return core::unavailable(
              what + ": store unavailable: " + std::string(kNoEtcdQuorum) + " (etcd at " + e.url +
              " and the others asked have had no leader for " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::milliseconds>(now - *no_leader_since)
                      .count()) +
              " ms; nothing was written)");
        }
      } else {
        no_leader_since.reset();
      }
      // A call that may be sent twice goes to the next endpoint also when its try timed out
      // (a member whose leader just died holds proposals until etcd's own timeout, ~7 s).
      const bool may_retry =
          (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
           (retry == Retry::kAlways || writeNeverSent(s))) ||
          (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && retry == Retry::kAlways);
      // The next try, or the next call (a write sent again by its caller), goes to the next
      // member.
      const bool member_failed = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                 s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
      if (member_failed && endpoints_.size() > 1) {
        current_.compare_exchange_strong(i, (i + 1) % endpoints_.size());
      }
      if (!may_retry || std::chrono::system_clock::now() >= deadline) {
        return failure(what, e, s, retry, limit);
      }
      if (attempt % endpoints_.size() == 0) {
        // Every endpoint failed once more: give the cluster a moment (an election, say).
        std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
            backoff, std::chrono::duration_cast<std::chrono::milliseconds>(
                         deadline - std::chrono::system_clock::now())));
        backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
      }
    }
  }

  Status failure(const std::string& what, const Endpoint& e, const grpc::Status& s, Retry retry,
                 std::chrono::milliseconds limit) const {
    std::string message = what + ": etcd at " + e.url + ": " + s.error_message();
    if ((s.error_code() == grpc::StatusCode::UNAVAILABLE && !writeNeverSent(s)) ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      if (retry == Retry::kIfNeverSent) {
        message += " (" + std::string(kOutcomeUnknown) + ")";
      }
    } else if (s.error_code() == grpc::StatusCode::UNAVAILABLE && retry == Retry::kIfNeverSent) {
      message += " (the write was not applied)";
    }
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      message += " (no answer within " +
                 std::string(limit == options_.request_timeout ? "the request timeout of "
                                                               : "the call's deadline of ") +
                 std::to_string(limit.count()) + " ms)";
    }
    return Status(codeOf(s.error_code()), std::move(message));
  }

  // A write: retried only if it never reached etcd; counted in stats. A NOT_FOUND naming a
  // lease says which of `leases` the request attached keys to.
  template <typename Fn>
  Status write(const std::string& what, Fn&& fn, const std::vector<LeaseId>& leases = {},
               Retry retry = Retry::kIfNeverSent,
               std::chrono::milliseconds within = std::chrono::milliseconds(0)) {
    ++writes_in_flight_;
    Status s = call(what, retry, std::forward<Fn>(fn), within);
    --writes_in_flight_;
    if (s.code() == core::StatusCode::kNotFound && contains(s.message(), "lease") &&
        !leases.empty()) {
      std::string names;
      for (const LeaseId& id : std::set<LeaseId>(leases.begin(), leases.end())) {
        names += (names.empty() ? "" : ", ") + std::to_string(id.value());
      }
      return core::notFound(what + ": lease " + names + " not found: it expired or was revoked (" +
                            s.message() + ")");
    }
    TESSERA_RETURN_IF_ERROR(s);
    countWrite();
    return s;
  }

  void countWrite() { ++write_requests_; }

  // The compact revision is not in etcd's Status answer; a read at a revision fails exactly when
  // that revision is below it, so find the lowest readable revision by bisection.
  Status findCompactRevision() {
    int64_t lo = 1;
    int64_t hi = revision_.load();
    if (hi <= 1) {
      return Status::ok();
    }
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      pb::RangeRequest req;
      req.set_key(keys_prefix_);
      req.set_count_only(true);
      req.set_serializable(true);
      req.set_revision(mid);
      pb::RangeResponse resp;
      Status s = call(
          "find the compact revision", Retry::kAlways,
          [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Range(&ctx, req, &resp); });
      if (s.isOk()) {
        hi = mid;
      } else if (s.code() == core::StatusCode::kOutOfRange) {
        lo = mid + 1;
      } else {
        return s;
      }
    }
    maxRevision(compact_revision_, lo > 1 ? lo : 0);
    return Status::ok();
  }

  // Watch stream (watch thread). Writes the create request of `w` on the current stream, from
  // its next revision. Requires stream_mu_ held and stream_ set.
  void sendCreate(Watcher& w) {
    pb::WatchRequest req;
    pb::WatchCreateRequest* create = req.mutable_create_request();
    create->set_key(w.key);
    create->set_range_end(w.range_end);
    create->set_prev_kv(true);
    create->set_watch_id(w.id);
    {
      std::lock_guard lock(mu_);
      create->set_start_revision(w.next_revision);
    }
    w.stream_generation = stream_generation_;
    (void)stream_->Write(req);  // A broken stream is noticed by the reader and reopened.
  }

  // Keeps one Watch stream open, on the current endpoint, with every live watch on it; when it
  // breaks, opens it again on the next endpoint and creates every watch again from the
  // revision after the last one it received.
  void runWatchStream() {
    std::chrono::milliseconds backoff{10};
    for (;;) {
      size_t i = current_.load();
      Endpoint& e = *endpoints_[i];
      grpc::ClientContext ctx;
      ctx.AddMetadata(kRequireLeaderKey, "true");
      {
        std::lock_guard stream_lock(stream_mu_);
        std::lock_guard lock(mu_);
        if (stop_) {
          return;
        }
        stream_ctx_ = &ctx;
      }
      std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>> stream =
          e.watch->Watch(&ctx);
      {
        std::lock_guard stream_lock(stream_mu_);
        stream_ = stream.get();
        ++stream_generation_;
        std::vector<std::shared_ptr<Watcher>> live;
        {
          std::lock_guard lock(mu_);
          for (const auto& [id, w] : watchers_) {
            if (!w->ended) {
              live.push_back(w);
            }
          }
        }
        for (const auto& w : live) {
          sendCreate(*w);
        }
      }
      bool received = false;
      pb::WatchResponse resp;
      while (stream->Read(&resp)) {
        received = true;
        handle(resp);
      }
      {
        std::lock_guard stream_lock(stream_mu_);
        stream_ = nullptr;
        stream_ctx_ = nullptr;
      }
      const grpc::Status s = stream->Finish();
      std::unique_lock lock(mu_);
      if (stop_) {
        return;
      }
      if (endpoints_.size() > 1) {
        current_.compare_exchange_strong(i, (i + 1) % endpoints_.size());
      }
      core::logWarn("etcd store: watch stream to {} ended ({}); resuming every watch on {}", e.url,
                    s.error_message(), endpoints_[current_.load()]->url);
      backoff = received ? std::chrono::milliseconds(10) : std::min(backoff * 2, kMaxWatchBackoff);
      wake_.wait_for(lock, backoff, [&] { return stop_; });
    }
  }

  // Turns one etcd watch response into deliveries, one per revision.
  void handle(const pb::WatchResponse& resp) {
    std::lock_guard lock(mu_);
    auto it = watchers_.find(resp.watch_id());
    if (it == watchers_.end() || it->second->ended) {
      if (resp.created() && resp.canceled()) {
        core::logWarn("etcd store: etcd refused a watch: {}", resp.cancel_reason());
      }
      return;  // Cancelled by us, or already ended.
    }
    const std::shared_ptr<Watcher>& w = it->second;
    for (int k = 0; k < resp.events_size();) {
      const int64_t revision = resp.events(k).kv().mod_revision();
      WatchResponse out;
      out.revision = revision;
      for (; k < resp.events_size() && resp.events(k).kv().mod_revision() == revision; ++k) {
        const mvccpb::Event& e = resp.events(k);
        Event event;
        event.type = e.type() == mvccpb::Event::DELETE ? EventType::kDelete : EventType::kPut;
        if (event.type == EventType::kDelete) {
          event.kv.key = keyValue(e.kv()).key;
          event.kv.mod_revision = revision;
        } else {
          event.kv = keyValue(e.kv());
        }
        if (e.has_prev_kv()) {
          event.prev_kv = keyValue(e.prev_kv());
        }
        out.events.push_back(std::move(event));
      }
      if (revision >= w->next_revision) {  // Never deliver a revision twice.
        w->next_revision = revision + 1;
        queue_.push_back({w, std::move(out)});
      }
    }
    if (resp.canceled()) {
      WatchResponse last;
      last.revision = w->next_revision;
      if (resp.compact_revision() > 0) {
        maxRevision(compact_revision_, resp.compact_revision());
        last.error = core::outOfRange(
            "watch needs revision " + std::to_string(w->next_revision) +
            " but the history before revision " + std::to_string(resp.compact_revision()) +
            " has been compacted; read the current state with range() and watch again from its "
            "revision + 1");
      } else {
        last.error = core::unavailable("etcd cancelled the watch: " + resp.cancel_reason());
      }
      w->ended = true;
      queue_.push_back({w, std::move(last)});
    }
    wake_.notify_all();
  }

  // The store's callback thread: one callback at a time, no lock held.
  void dispatch() {
    for (;;) {
      Delivery d;
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) {
          return;
        }
        d = std::move(queue_.front());
        queue_.pop_front();
        if (d.watcher->done) {
          continue;
        }
        running_ = d.watcher->id;
      }
      d.watcher->callback(d.response);
      {
        std::lock_guard lock(mu_);
        running_ = 0;
        if (!d.response.error.isOk()) {
          d.watcher->done = true;
          watchers_.erase(d.watcher->id);
        }
      }
      callback_done_.notify_all();
    }
  }

  const EtcdStoreOptions options_;
  const std::vector<std::unique_ptr<Endpoint>> endpoints_;
  const std::string keys_prefix_;   // "<prefix>/kv": a Store key K is etcd key keys_prefix_ + K.
  const std::string keys_end_;      // prefixEnd(keys_prefix_).
  const std::string notes_prefix_;  // "<prefix>/notes/".

  mutable std::atomic<size_t> current_{0};    // Index of the endpoint requests go to first.
  mutable std::atomic<int64_t> revision_{0};  // Highest revision a response carried.
  std::atomic<int64_t> compact_revision_{0};
  std::atomic<int64_t> write_requests_{0};
  std::atomic<int64_t> writes_in_flight_{0};

  // Guards stream_, stream_ctx_, stream_generation_ and Watcher::stream_generation, and
  // serializes writes on the stream. Taken before mu_.
  std::mutex stream_mu_;
  grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>* stream_ = nullptr;
  grpc::ClientContext* stream_ctx_ = nullptr;
  int64_t stream_generation_ = 0;

  std::mutex mu_;                 // Guards every field below, and Watcher's fields marked so.
  std::condition_variable wake_;  // Work for the dispatcher; stop for the watch thread.
  std::condition_variable callback_done_;  // cancelWatch waits for a running callback.
  bool stop_ = false;
  int64_t next_watch_id_ = 1;
  std::map<int64_t, std::shared_ptr<Watcher>> watchers_;  // Live watches by id.
  std::deque<Delivery> queue_;                            // Responses for the dispatcher, in order.
  int64_t running_ = 0;  // Id of the watch whose callback runs now.

  std::thread watch_thread_;
  std::thread dispatch_thread_;
};

}  // namespace

Result<std::unique_ptr<Store>> EtcdStore::open(const EtcdStoreOptions& options,
                                               core::Clock& clock) {
  (void)clock;  // etcd keeps lease time (etcd_store.h).
  if (options.endpoints.empty()) {
    return core::invalidArgument("etcd store: no endpoints: list at least one etcd client URL");
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return core::invalidArgument(
        "etcd store: cert_file and key_file go together: give both for a client certificate, or "
        "neither");
  }
  if (options.dial_timeout <= std::chrono::milliseconds::zero() ||
      options.request_timeout <= std::chrono::milliseconds::zero()) {
    return core::invalidArgument("etcd store: dial_timeout and request_timeout must be positive");
  }
  std::shared_ptr<grpc::ChannelCredentials> tls;
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  for (const std::string& url : options.endpoints) {
    TESSERA_ASSIGN_OR_RETURN(ParsedEndpoint parsed, parseEndpoint(url));
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    if (parsed.tls) {
      if (tls == nullptr) {
        if (options.ca_file.empty()) {
          return core::invalidArgument("etcd endpoint '" + url +
                                       "' is https: ca_file must name the CA that signs the "
                                       "etcd servers' certificates");
        }
        grpc::SslCredentialsOptions ssl;
        TESSERA_ASSIGN_OR_RETURN(ssl.pem_root_certs, readFile(options.ca_file, "ca_file"));
        if (!options.cert_file.empty()) {
          TESSERA_ASSIGN_OR_RETURN(ssl.pem_cert_chain, readFile(options.cert_file, "cert_file"));
          TESSERA_ASSIGN_OR_RETURN(ssl.pem_private_key, readFile(options.key_file, "key_file"));
        }
        tls = grpc::SslCredentials(ssl);
      }
      credentials = tls;
    } else {
      credentials = grpc::InsecureChannelCredentials();
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);  // A range's answer may be large.
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(options.dial_timeout.count()));
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2'000);
    // Notice a member that stopped answering on a quiet watch stream (etcd allows pings every
    // 5 s by default).
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
    auto e = std::make_unique<Endpoint>();
    e->url = url;
    e->channel = grpc::CreateCustomChannel(parsed.target, credentials, args);
    e->kv = pb::KV::NewStub(e->channel);
    e->watch = pb::Watch::NewStub(e->channel);
    e->lease = pb::Lease::NewStub(e->channel);
    endpoints.push_back(std::move(e));
  }
  auto store = std::make_unique<EtcdStoreImpl>(options, std::move(endpoints));
  TESSERA_RETURN_IF_ERROR(store->start());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace tessera::store
