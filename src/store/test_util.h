// Helpers for the store tests: a temporary directory, a fake clock that may be read from store
// threads, and the options the tests open SQLite stores with.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "store/sqlite_store.h"

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

}  // namespace tessera::store
