// Helpers for the store tests (and others over a store): a temporary directory, a fake clock that
// may be read from store threads, the options the tests open SQLite stores with, and a store
// whose writes a test can hold back or fail.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "store/sqlite_store.h"
#include "store/store.h"

// Asserts that a Status is OK, printing it if not.
#define TESSERA_ASSERT_OK(expr)                \
  do {                                         \
    const ::tessera::core::Status s_ = (expr); \
    ASSERT_TRUE(s_.isOk()) << s_.toString();   \
  } while (false)

// Asserts that a Result is OK and moves its value into `lhs` (a declaration or a variable).
#define TESSERA_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  TESSERA_ASSERT_OK_AND_ASSIGN_IMPL_(TESSERA_CONCAT_(assert_result_, __LINE__), lhs, expr)
#define TESSERA_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                       \
  ASSERT_TRUE(tmp.isOk()) << tmp.status().toString();      \
  lhs = std::move(tmp).value()

namespace tessera::store {

// A directory under the test temp dir, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "tessera-store-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << pattern;
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

// Like core::FakeClock, but safe to read from store threads while the test advances it.
class ThreadSafeFakeClock final : public core::Clock {
 public:
  core::TimePoint now() const override { return core::TimePoint(core::Duration(ns_.load())); }
  core::WallTime wallNow() const override { return core::WallTime(core::Duration(ns_.load())); }
  void advance(core::Duration d) { ns_ += d.count(); }

 private:
  std::atomic<int64_t> ns_{0};
};

// `prefix` followed by the numbers, '/'-separated: numbered("w", 3, 4) is "w3/4". (Not
// "w" + std::to_string(3): GCC 12 warns falsely about it, -Wrestrict.)
template <typename... Ints>
std::string numbered(std::string_view prefix, Ints... numbers) {
  std::string out(prefix);
  const char* separator = "";
  ((out += separator, out += std::to_string(numbers), separator = "/"), ...);
  return out;
}

// Leases expire only when a test calls expireLeases().
inline SqliteStoreOptions testOptions() {
  SqliteStoreOptions options;
  options.lease_check_interval = std::chrono::milliseconds(0);
  return options;
}

// A store whose writes under one key prefix can be held (each waits until it is let go) or made
// to fail; everything else goes straight to the store underneath. For tests of what waits for a
// store write and what does not.
class HeldStore final : public Store {
 public:
  explicit HeldStore(Store& inner) : inner_(inner) {}

  // Writes of keys under `prefix` wait until it is released (several prefixes may be held).
  void hold(std::string prefix) {
    std::lock_guard lock(mu_);
    prefixes_.insert(std::move(prefix));
  }
  void release(const std::string& prefix) {
    std::lock_guard lock(mu_);
    prefixes_.erase(prefix);
    cv_.notify_all();
  }
  void release() {
    std::lock_guard lock(mu_);
    prefixes_.clear();
    cv_.notify_all();
  }
  // Writes of keys under `prefix` fail (UNAVAILABLE), as on a failing disk: at once, or when
  // released if they were held.
  void fail(std::string prefix) {
    std::lock_guard lock(mu_);
    failing_ = std::move(prefix);
  }
  void heal() {
    std::lock_guard lock(mu_);
    failing_.reset();
  }
  // The deadline (Txn::deadline) of each txn sent so far, in order.
  std::vector<std::chrono::milliseconds> txnDeadlines() {
    std::lock_guard lock(mu_);
    return txn_deadlines_;
  }
  // Waits (up to 5 s) until `n` writes have waited.
  bool waitHeld(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return held_ >= n; });
  }

  // Reads of keys under `prefix` throw, as a backend with a bug might ("": none do).
  void throwOnRange(std::string prefix) {
    std::lock_guard lock(mu_);
    throwing_ = std::move(prefix);
  }

  // Ranges that start at `key` fail (UNAVAILABLE), as while the backend is unreachable, and
  // reads of other keys still work; failRangesFrom("") heals them.
  void failRangesFrom(std::string key) {
    std::lock_guard lock(mu_);
    failing_reads_ = std::move(key);
  }

  core::Result<RangeResult> range(std::string_view key, std::string_view range_end, int64_t limit,
                                  int64_t revision) override {
    {
      std::lock_guard lock(mu_);
      if (!throwing_.empty() && key.starts_with(throwing_)) {
        throw std::runtime_error("store fault injected on " + std::string(key));
      }
      if (!failing_reads_.empty() && key == failing_reads_) {
        return core::Status(core::StatusCode::kUnavailable, "the test's store cannot be read");
      }
    }
    return inner_.range(key, range_end, limit, revision);
  }
  core::Result<int64_t> put(std::string_view key, std::string_view value, LeaseId lease) override {
    TESSERA_RETURN_IF_ERROR(waitIfHeld(key));
    return inner_.put(key, value, lease);
  }
  core::Result<DeleteResult> deleteRange(std::string_view key,
                                         std::string_view range_end) override {
    TESSERA_RETURN_IF_ERROR(waitIfHeld(key));
    return inner_.deleteRange(key, range_end);
  }
  core::Result<TxnResult> txn(Txn txn) override {
    {
      std::lock_guard lock(mu_);
      txn_deadlines_.push_back(txn.deadline);
    }
    for (const Op& op : txn.success) {
      TESSERA_RETURN_IF_ERROR(waitIfHeld(op.key));
    }
    return inner_.txn(std::move(txn));
  }
  core::Result<WatchId> watch(std::string_view key, std::string_view range_end,
                              int64_t from_revision, WatchCallback callback) override {
    auto id = inner_.watch(key, range_end, from_revision, callback);
    if (id.isOk()) {
      std::lock_guard lock(mu_);
      watches_.emplace_back(*id, std::move(callback));
    }
    return id;
  }
  void cancelWatch(WatchId id) override {
    {
      std::lock_guard lock(mu_);
      std::erase_if(watches_, [&](const auto& w) { return w.first == id; });
    }
    inner_.cancelWatch(id);
  }
  // Ends every watch made through it so far, as a backend ends one whose history was compacted
  // away: what is written from now on does not reach them, and each callback's last response
  // is `error`. Returns how many it ended.
  size_t endWatches(const core::Status& error) {
    std::vector<std::pair<WatchId, WatchCallback>> ended;
    {
      std::lock_guard lock(mu_);
      ended.swap(watches_);
    }
    for (auto& [id, callback] : ended) {
      inner_.cancelWatch(id);
      WatchResponse last;
      last.revision = inner_.stats().revision + 1;
      last.error = error;
      callback(last);
    }
    return ended.size();
  }
  core::Result<LeaseId> grant(core::Duration ttl) override { return inner_.grant(ttl); }
  core::Result<core::Duration> keepAlive(LeaseId id) override { return inner_.keepAlive(id); }
  core::Result<int64_t> revoke(LeaseId id) override { return inner_.revoke(id); }
  core::Result<std::vector<LeaseId>> expireLeases() override { return inner_.expireLeases(); }
  core::Status compact(int64_t revision) override { return inner_.compact(revision); }
  StoreStats stats() const override { return inner_.stats(); }
  core::Result<std::vector<Note>> notes(std::string_view topic) override {
    return inner_.notes(topic);
  }
  core::Status dropNotes(std::string_view topic, uint64_t up_to) override {
    return inner_.dropNotes(topic, up_to);
  }

 private:
  core::Status waitIfHeld(std::string_view key) {
    std::unique_lock lock(mu_);
    auto held = [&] {
      return std::any_of(prefixes_.begin(), prefixes_.end(),
                         [&](const std::string& p) { return key.starts_with(p); });
    };
    if (held()) {
      ++held_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !held(); });
    }
    if (failing_ && key.starts_with(*failing_)) {
      return {core::StatusCode::kUnavailable, "the test's disk fails"};
    }
    return core::Status::ok();
  }

  Store& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> prefixes_;      // Writes of keys under one of them wait.
  std::optional<std::string> failing_;  // Set: writes of keys under it fail.
  std::string throwing_;                // Non-empty: reads of keys under it throw.
  std::string failing_reads_;           // Non-empty: ranges from it fail.
  std::vector<std::chrono::milliseconds> txn_deadlines_;
  int held_ = 0;
  std::vector<std::pair<WatchId, WatchCallback>> watches_;  // Made through it, not cancelled.
};

}  // namespace tessera::store
