// The hash-chain state of one audit stream and the lines it produces. Shared by the sinks, which
// add storage and locking around it; not thread-safe on its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/clock.h"
#include "core/status.h"

namespace tessera::audit::internal {

// Where a stream stands: the last record's seq and hash.
struct ChainHead {
  uint64_t seq = 0;
  std::string hash = std::string(kZeroHash);
  uint64_t since_checkpoint = 0;  // Records written since the last checkpoint.
};

struct ChainOptions {
  RedactionOptions redaction;
  std::shared_ptr<const SigningKey> signing_key;  // Null: no checkpoints.
  uint64_t checkpoint_every = 1000;               // 0: only on close.
  // Written into each checkpoint as "interval_ms" (0: not written): the sink's promise that a
  // record waits at most this long for a checkpoint (FileSinkOptions::checkpoint_interval).
  uint64_t checkpoint_interval_ms = 0;
};

// The part of a record that does not depend on the chain (everything but seq, time, prev_hash
// and hash), already serialized: each top-level field as `"key":value`, in key order. Built
// outside the sink's lock, so concurrent writers serialize and HMAC in parallel and the lock
// covers only the join and one hash.
struct RedactedRecord {
  std::vector<std::pair<std::string, std::string>> fields;  // key -> `"key":value`
};

// Lines ready to append, and the head the chain will have once they are stored.
struct PendingLines {
  std::string bytes;  // One or two '\n'-terminated lines; empty if there is nothing to write.
  ChainHead head;
};

class Chain {
 public:
  Chain(ChainOptions options, ChainHead head, const core::Clock& clock)
      : options_(std::move(options)), head_(std::move(head)), clock_(clock) {}

  // The record for `event`, followed by a checkpoint when one is due. Does not change the head:
  // call `commit` once the bytes are stored. Same as seal(redact(event)).
  core::Result<PendingLines> prepare(const AuditEvent& event) const;
  // The chain-independent part of `event`'s record; reads only the options, so it may run
  // concurrently with anything but a change of options.
  core::Result<RedactedRecord> redact(const AuditEvent& event) const;
  // The chain-independent part of a new record for a record line this stream lost (see
  // AuditSink::writeRecovered): its fields but the chain's, and "recovered" with its seq, time
  // and hash. Fails if `line` is not a record.
  static core::Result<RedactedRecord> recovered(std::string_view line);
  // The record after the current head (byte for byte what canonicalJson of the whole record
  // gives), followed by a checkpoint when one is due.
  core::Result<PendingLines> seal(const RedactedRecord& record) const;
  // A checkpoint if any record came after the last one and there is a signing key; else empty.
  // (Any checkpoint made outside `seal`: on close, on a timer, on request.)
  core::Result<PendingLines> prepareFinalCheckpoint() const;
  // A checkpoint now, whatever came since the last one (a new log's first line, which states
  // the writer's checkpoint interval from the start); empty without a signing key. `file_mark`
  // ("start" or "end"; empty: none) is written as its "file" field: the checkpoint opens or
  // closes one file of a rotated log (audit/file_sink.h).
  core::Result<PendingLines> prepareCheckpoint(std::string_view file_mark = {}) const;
  // Whether the chain signs checkpoints at all.
  bool signs() const { return options_.signing_key != nullptr; }
  void commit(PendingLines pending) { head_ = std::move(pending.head); }

  const ChainHead& head() const { return head_; }

 private:
  // Appends the checkpoint line after `head` to `out`.
  core::Status appendCheckpoint(ChainHead& head, const std::string& time, std::string& out,
                                std::string_view file_mark = {}) const;

  ChainOptions options_;
  ChainHead head_;
  const core::Clock& clock_;
};

}  // namespace tessera::audit::internal
