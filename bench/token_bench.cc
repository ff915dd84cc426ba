// What a token lookup costs (issue #36): every request does one, on the I/O thread, so it must
// stay cheap now that it also refuses a token whose parent, or any ancestor, has expired. The
// manager keeps each token's chain expiry up to date on create and renew, so a lookup is one
// SHA-256 of the secret, one map search and one comparison, whatever the chain's depth.
//   BM_Lookup/<tokens>/<depth>  a lookup of a token `depth` levels below the root token, among
//                               `tokens` live tokens (the rest children of the root)
//
//   build/bench/token_bench
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/clock.h"
#include "server/tokens.h"
#include "store/sqlite_store.h"

namespace tessera::server {
namespace {

struct Fixture {
  core::RealClock clock;
  std::string dir;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<TokenManager> tokens;

  bool open() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-token-bench-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return false;
    }
    dir = pattern;
    store::SqliteStoreOptions options;
    options.lease_check_interval = std::chrono::milliseconds(0);
    auto opened = store::SqliteStore::open(dir + "/store.db", options, clock);
    if (!opened.isOk()) {
      return false;
    }
    store = std::move(opened).value();
    auto t = TokenManager::open(*store, clock, {});
    if (!t.isOk()) {
      return false;
    }
    tokens = std::move(t).value();
    return true;
  }

  ~Fixture() {
    tokens.reset();
    store.reset();
    if (!dir.empty()) {
      std::filesystem::remove_all(dir);
    }
  }
};

void BM_Lookup(benchmark::State& state) {
  Fixture f;
  if (!f.open()) {
    state.SkipWithError("cannot open a store");
    return;
  }
  auto root = f.tokens->bootstrapRoot();
  if (!root.isOk()) {
    state.SkipWithError("no root token");
    return;
  }
  // A line of root-policy tokens (only a root parent gives "root"), `depth` long.
  CreatedToken at = *root;
  const int64_t depth = state.range(1);
  for (int64_t d = 0; d < depth; ++d) {
    auto child = f.tokens->create(at.info, {.policies = {"root"}, .ttl = std::chrono::hours(1)});
    if (!child.isOk()) {
      state.SkipWithError("cannot create a child");
      return;
    }
    at = *child;
  }
  for (int64_t i = depth; i < state.range(0); ++i) {
    if (!f.tokens->create(root->info, {.tenant = "t", .ttl = std::chrono::hours(1)}).isOk()) {
      state.SkipWithError("cannot create a token");
      return;
    }
  }
  for (auto _ : state) {
    auto found = f.tokens->lookup(at.secret);
    benchmark::DoNotOptimize(found);
  }
}
BENCHMARK(BM_Lookup)
    ->Args({100, 1})
    ->Args({10000, 1})
    ->Args({10000, 4})
    ->Args({10000, 64})
    ->Args({10000, 1000});

}  // namespace
}  // namespace tessera::server

BENCHMARK_MAIN();
