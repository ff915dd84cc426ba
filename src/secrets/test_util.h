// Helpers for the secrets tests: a SQLite store in a temporary directory, and a scan of its files
// for bytes that must never be stored in the clear.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "store/sqlite_store.h"
#include "store/test_util.h"

namespace tessera::secrets::testing {

using store::TempDir;
using store::ThreadSafeFakeClock;

inline std::unique_ptr<store::Store> openStore(const std::string& dir, core::Clock& clock) {
  auto s = store::SqliteStore::open(dir + "/state.db", store::testOptions(), clock);
  EXPECT_TRUE(s.isOk()) << s.status().toString();
  return s.isOk() ? std::move(s).value() : nullptr;
}

// Every file in `dir` (the database, its WAL, ...) whose bytes contain `needle`.
inline std::vector<std::string> filesContaining(const std::string& dir, const std::string& needle) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) {
      continue;
    }
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.find(needle) != std::string::npos) {
      found.push_back(entry.path().string());
    }
  }
  return found;
}

}  // namespace tessera::secrets::testing
