// Store write throughput: puts per second into a SqliteStore (WAL, synchronous=FULL) with 1, 4
// and 16 concurrent writers. Every put waits until its batch is durable, so one writer is bound
// by the fsync latency of the disk; with group commit, concurrent writers share fsyncs and the
// throughput grows with them. `puts_per_commit` shows how many puts each fsync carried.
//
// The store lives in a fresh directory under $TMPDIR (or /tmp): run it on the disk you care about.
//   build/bench/store_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/clock.h"
#include "store/sqlite_store.h"

namespace tessera::store {
namespace {

core::RealClock clock;
std::string dir;
std::unique_ptr<Store> store;

void openStore(const benchmark::State&) {
  std::string pattern = (std::filesystem::temp_directory_path() / "tessera-store-bench-XXXXXX");
  dir = mkdtemp(pattern.data()) != nullptr ? pattern : "";
  auto opened = SqliteStore::open(dir + "/store.db", {}, clock);
  store = opened.isOk() ? std::move(opened).value() : nullptr;
}

void closeStore(const benchmark::State&) {
  store.reset();
  std::filesystem::remove_all(dir);
}

void BM_Put(benchmark::State& state) {
  if (store == nullptr) {
    state.SkipWithError("cannot open the store");
    return;
  }
  const std::string value(100, 'v');
  std::string key = "/bench/";
  key += std::to_string(state.thread_index());
  key += "/";
  const size_t prefix = key.size();
  StoreStats before;
  if (state.thread_index() == 0) {
    before = store->stats();  // Every thread waits for thread 0 at the start of the loop.
  }
  int64_t i = 0;
  for (auto _ : state) {
    key.resize(prefix);
    key += std::to_string(i++);
    if (!store->put(key, value).isOk()) {
      state.SkipWithError("put failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    const StoreStats after = store->stats();  // The loop's end waits for every thread.
    const double commits = static_cast<double>(after.commits - before.commits);
    state.counters["puts_per_commit"] =
        commits > 0 ? static_cast<double>(after.write_requests - before.write_requests) / commits
                    : 0;
  }
}
BENCHMARK(BM_Put)
    ->Setup(openStore)
    ->Teardown(closeStore)
    ->Threads(1)
    ->Threads(4)
    ->Threads(16)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tessera::store

BENCHMARK_MAIN();
