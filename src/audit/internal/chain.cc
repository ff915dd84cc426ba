#include "audit/internal/chain.h"

namespace tessera::audit::internal {

using core::Result;
using nlohmann::json;

namespace {

// Seals `record` (which has every field but `hash`): sets its hash and appends its line to `out`.
void seal(json& record, ChainHead& head, std::string& out) {
  head.hash = sha256Hex(canonicalJson(record));
  record["hash"] = head.hash;
  out += canonicalJson(record);
  out += '\n';
}

}  // namespace

Result<PendingLines> Chain::prepare(const AuditEvent& event) const {
  TESSERA_ASSIGN_OR_RETURN(json record, redactedEventJson(event, options_.redaction));
  PendingLines pending{{}, head_};
  const std::string time = formatRfc3339Millis(clock_.wallNow());
  record["seq"] = ++pending.head.seq;
  record["time"] = time;
  record["prev_hash"] = pending.head.hash;
  seal(record, pending.head, pending.bytes);
  ++pending.head.since_checkpoint;
  if (options_.signing_key != nullptr && options_.checkpoint_every > 0 &&
      pending.head.since_checkpoint >= options_.checkpoint_every) {
    TESSERA_RETURN_IF_ERROR(appendCheckpoint(pending.head, time, pending.bytes));
  }
  return pending;
}

Result<PendingLines> Chain::prepareFinalCheckpoint() const {
  PendingLines pending{{}, head_};
  if (options_.signing_key != nullptr && head_.since_checkpoint > 0) {
    TESSERA_RETURN_IF_ERROR(
        appendCheckpoint(pending.head, formatRfc3339Millis(clock_.wallNow()), pending.bytes));
  }
  return pending;
}

core::Status Chain::appendCheckpoint(ChainHead& head, const std::string& time,
                                     std::string& out) const {
  json record = {
      {"type", "checkpoint"},
      {"seq", head.seq + 1},
      {"time", time},
      {"prev_hash", head.hash},
      {"checkpoint", {{"key_id", options_.signing_key->keyId()}}},
  };
  TESSERA_ASSIGN_OR_RETURN(std::string signature,
                           options_.signing_key->signHex(checkpointSigningMessage(record)));
  record["checkpoint"]["signature"] = std::move(signature);
  ++head.seq;
  head.since_checkpoint = 0;
  seal(record, head, out);
  return core::Status::ok();
}

}  // namespace tessera::audit::internal
