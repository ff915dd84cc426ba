// The audit records of requests refused before the request pipeline records them: failed
// authentication (no token, or one that is unknown, revoked or expired), paths and bodies that do
// not parse, a chroot listener's refusals, 413/431/400 from the HTTP layer, 429s of the rate
// limit and of full queues. Each is one response record (docs/server.md, "Refused requests"),
// written through a budget, so that refusals, which cost an attacker nothing, cannot fill the
// audit disk:
//
// - a token bucket per source: the tenant of a token that did authenticate ("/admin" for an
//   operator's), else the client's IP address (without its port);
// - and, for unauthenticated sources together, one global bucket, so that many addresses do not
//   multiply the budget. At most `max_sources` sources are tracked; beyond that, new addresses
//   share one bucket ("other").
//
// A refusal over budget is counted instead of written. Once a second (`flushSummaries`, from the
// server's housekeeping) each stream that dropped some gets one summary record: "N more refused
// requests not recorded", with the counts by status and the sources that sent the most. The
// counts are also metrics (`tessera_audit_refusals_total{outcome="recorded"|"dropped"}`).
// A refused request changes nothing, so it is answered whether or not its record could be
// written (unlike the pipeline's fail-closed records), and without waiting for a disk flush.
//
//   RefusalLog refusals(auditor, clock, {});
//   refusals.record(RefusalLog::sourceOf(http.remote, token), event);  // on any thread
//   refusals.flushSummaries();                                           // once a second
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "audit/auditor.h"
#include "core/clock.h"

namespace tessera::server {

struct RefusalLogOptions {
  // Records per second, sustained, and burst, of one source.
  double per_source_rate = 10;
  double per_source_burst = 100;
  // Records per second and burst of every unauthenticated source together.
  double unauthenticated_rate = 100;
  double unauthenticated_burst = 1000;
  size_t max_sources = 4096;  // Sources with a bucket of their own.
};

struct RefusalCounts {
  uint64_t recorded = 0;
  uint64_t dropped = 0;  // Counted in summaries instead.
};

class RefusalLog {
 public:
  RefusalLog(audit::Auditor& auditor, const core::Clock& clock, RefusalLogOptions options)
      : auditor_(auditor), clock_(clock), options_(options) {}

  // The source of a refusal: "tenant:<t>" or "/admin" for a token that authenticated (`tenant`
  // its tenant; nullopt: none did), else "ip:<address>" from `remote` ("address:port").
  static std::string sourceOf(const std::string& remote, const std::string* tenant);

  // Appends `event` (a response record; its stream is event.tenant) if `source` is within its
  // budget, otherwise counts it for the next summary. Returns whether it was written.
  bool record(const std::string& source, const audit::AuditEvent& event);

  // Writes a summary record per stream that dropped refusals since the last call, and forgets
  // the buckets of sources that have been quiet long enough to be full again.
  void flushSummaries();

  RefusalCounts counts() const;

 private:
  struct Bucket {
    double tokens = 0;
    core::TimePoint last{};
    bool started = false;  // Full until first used.
  };
  // Dropped refusals of one stream (tenant; "" for the operator's) since the last summary.
  struct Dropped {
    uint64_t count = 0;
    std::map<int, uint64_t> by_status;
    std::map<std::string, uint64_t> by_source;
    std::string since;  // The first one's time (RFC 3339).
  };
  // Takes a token from `b` (rate, burst) if it has one; refills it first.
  bool take(Bucket& b, double rate, double burst, core::TimePoint now);

  audit::Auditor& auditor_;
  const core::Clock& clock_;
  const RefusalLogOptions options_;
  mutable std::mutex mu_;  // Guards everything below.
  std::map<std::string, Bucket> sources_;
  Bucket unauthenticated_;
  std::map<std::string, Dropped> dropped_;  // By stream.
  RefusalCounts counts_;
};

}  // namespace tessera::server
