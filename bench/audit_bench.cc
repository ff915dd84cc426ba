// Audit FileSink throughput: records per second that are durable when `write` returns, with an
// fdatasync per record (SyncMode::kEveryRecord) and with group commit (kGroupCommit), from 1 and
// 8 writer threads. MemorySink is the no-I/O baseline (redaction, JSON, SHA-256). The file lives
// in $TESSERA_BENCH_DIR, else the system temp directory: put it on the disk you care about
// (tmpfs makes fdatasync free).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "audit/file_sink.h"
#include "audit/sink.h"

namespace tessera::audit {
namespace {

core::RealClock g_clock;
std::unique_ptr<AuditSink> g_sink;  // Shared by the threads of one benchmark run.

std::filesystem::path benchFile() {
  const char* dir = std::getenv("TESSERA_BENCH_DIR");
  return std::filesystem::path(dir != nullptr ? dir : std::filesystem::temp_directory_path()) /
         ("tessera-audit-bench-" + std::to_string(::getpid()) + ".log");
}

AuditEvent event() {
  AuditEvent e;
  e.type = AuditType::kRequest;
  e.request_id = "8f14e45f-ceea-467f-a0e6-1f9a4c3b2d10";
  e.tenant = "team-1";
  e.auth = {"accessor-2b7c", {"default", "team-1-dev"}};
  e.request = {"POST",
               "/v1/tenants/team-1/workloads",
               "10.0.0.7",
               {{"name", "train-llm"}, {"gpus", 8}, {"image", "registry/llm:1.4"}}};
  return e;
}

SinkOptions options() { return {.salt = "bench-salt", .hmac_accessor = true}; }

void openFileSink(const benchmark::State& state) {
  std::filesystem::remove(benchFile());
  auto sink = FileSink::open(
      benchFile().string(),
      {options(), state.range(0) == 0 ? SyncMode::kEveryRecord : SyncMode::kGroupCommit}, g_clock);
  if (!sink.isOk()) {
    std::abort();
  }
  g_sink = std::move(sink).value();
}

void openMemorySink(const benchmark::State&) {
  g_sink = std::make_unique<MemorySink>("mem", options(), g_clock);
}

void closeSink(const benchmark::State&) {
  (void)g_sink->close();
  g_sink.reset();
  std::filesystem::remove(benchFile());
}

void BM_AuditWrite(benchmark::State& state) {
  const AuditEvent e = event();
  for (auto _ : state) {
    if (!g_sink->write(e).isOk()) {
      state.SkipWithError("write failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
}

// Arg: 0 = fdatasync per record, 1 = group commit.
BENCHMARK(BM_AuditWrite)
    ->Name("FileSink/EveryRecord")
    ->Arg(0)
    ->Setup(openFileSink)
    ->Teardown(closeSink)
    ->Threads(1)
    ->Threads(8)
    ->UseRealTime();
BENCHMARK(BM_AuditWrite)
    ->Name("FileSink/GroupCommit")
    ->Arg(1)
    ->Setup(openFileSink)
    ->Teardown(closeSink)
    ->Threads(1)
    ->Threads(8)
    ->UseRealTime();
BENCHMARK(BM_AuditWrite)
    ->Name("MemorySink")
    ->Setup(openMemorySink)
    ->Teardown(closeSink)
    ->Threads(1)
    ->UseRealTime();

}  // namespace
}  // namespace tessera::audit

BENCHMARK_MAIN();
