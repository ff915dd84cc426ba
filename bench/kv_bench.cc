// The secrets engine's own cost per KV read, in process and without the API (issue #6): what a
// `GET secrets/kv/data/...` adds to the shared request path (TLS, audit, routing), which
// secrets_bench measures end to end. A key holds `versions` versions of a 64-byte value in one
// sealed record, as after that many writes; BM_KvRead reads the newest.
//   BM_BarrierOpen  opening one sealed record (the tenant key and AES-256-GCM) of that size
//   BM_KvRead       store read + open + parse + picking the version
//
//   build/bench/kv_bench
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/clock.h"
#include "secrets/keys.h"
#include "secrets/kv.h"
#include "store/sqlite_store.h"

namespace tessera::secrets {
namespace {

struct Fixture {
  core::RealClock clock;
  std::string dir;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<KeyManager> keys;
  std::unique_ptr<KvEngine> kv;

  bool open() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-kv-bench-XXXXXX");
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
    auto k = KeyManager::open(*store, {SealOptions::Mode::kKeyFile, dir + "/unseal-key"});
    if (!k.isOk() || !(*k)->addTenant("demo").isOk()) {
      return false;
    }
    keys = std::move(k).value();
    kv = std::make_unique<KvEngine>(*store, *keys, clock);
    return true;
  }

  ~Fixture() {
    kv.reset();
    keys.reset();
    store.reset();
    if (!dir.empty()) {
      std::filesystem::remove_all(dir);
    }
  }
};

bool writeVersions(KvEngine& kv, const std::string& path, int64_t versions) {
  for (int64_t v = 0; v < versions; ++v) {
    const nlohmann::json data = {{"value", std::string(64, static_cast<char>('a' + v % 26))}};
    if (!kv.write("demo", path, data, std::nullopt).isOk()) {
      return false;
    }
  }
  return true;
}

void BM_KvRead(benchmark::State& state) {
  Fixture f;
  if (!f.open() || !writeVersions(*f.kv, "app/db", state.range(0))) {
    state.SkipWithError("cannot set up the KV engine");
    return;
  }
  for (auto _ : state) {
    auto r = f.kv->read("demo", "app/db", 0);
    if (!r.isOk()) {
      state.SkipWithError(r.status().toString().c_str());
      return;
    }
    benchmark::DoNotOptimize(r);
  }
  state.counters["versions"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_KvRead)->Arg(1)->Arg(10);

void BM_BarrierOpen(benchmark::State& state) {
  Fixture f;
  if (!f.open() || !writeVersions(*f.kv, "app/db", state.range(0))) {
    state.SkipWithError("cannot set up the KV engine");
    return;
  }
  const std::string key = "/secrets/demo/kv/app/db";
  auto r = f.store->range(key);
  if (!r.isOk() || r->kvs.empty()) {
    state.SkipWithError("the record is missing");
    return;
  }
  const std::string sealed = r->kvs[0].value;
  for (auto _ : state) {
    auto plain = f.keys->decrypt("demo", key, sealed);
    if (!plain.isOk()) {
      state.SkipWithError(plain.status().toString().c_str());
      return;
    }
    benchmark::DoNotOptimize(plain);
  }
  state.counters["bytes"] = static_cast<double>(sealed.size());
}
BENCHMARK(BM_BarrierOpen)->Arg(1)->Arg(10);

}  // namespace
}  // namespace tessera::secrets

BENCHMARK_MAIN();
