#include "audit/internal/chain.h"

#include <algorithm>

#include "core/rfc3339.h"

namespace tessera::audit::internal {

using core::Result;
using nlohmann::json;

namespace {

// Seals `record` (which has every field but `hash`): sets its hash and appends its line to `out`.
void sealJson(json& record, ChainHead& head, std::string& out) {
  head.hash = sha256Hex(canonicalJson(record));
  record["hash"] = head.hash;
  out += canonicalJson(record);
  out += '\n';
}

}  // namespace

std::string field(const std::string& key, const json& value) {
  return canonicalJson(json(key)) + ":" + canonicalJson(value);
}

// `{` + fields + extra, merged in key order (what nlohmann's std::map objects dump), + `}`.
std::string join(const std::vector<std::pair<std::string, std::string>>& fields,
                 std::vector<std::pair<std::string, std::string>> extra) {
  std::sort(extra.begin(), extra.end());
  size_t size = 2;
  for (const auto& f : fields) {
    size += f.second.size() + 1;
  }
  for (const auto& f : extra) {
    size += f.second.size() + 1;
  }
  std::string out;
  out.reserve(size);
  out += '{';
  size_t i = 0, k = 0;
  while (i < fields.size() || k < extra.size()) {
    const bool take_field =
        k == extra.size() || (i < fields.size() && fields[i].first < extra[k].first);
    if (out.size() > 1) {
      out += ',';
    }
    out += take_field ? fields[i++].second : extra[k++].second;
  }
  out += '}';
  return out;
}

namespace {

// The fields of `record` but the chain's (seq, time, prev_hash, hash), serialized, in key order.
RedactedRecord withoutChainFields(const json& record) {
  RedactedRecord out;
  out.fields.reserve(record.size());
  for (auto it = record.begin(); it != record.end(); ++it) {  // Key order.
    if (it.key() == "seq" || it.key() == "time" || it.key() == "prev_hash" || it.key() == "hash") {
      continue;
    }
    out.fields.emplace_back(it.key(), field(it.key(), it.value()));
  }
  return out;
}

}  // namespace

Result<RedactedRecord> Chain::redact(const AuditEvent& event) const {
  TESSERA_ASSIGN_OR_RETURN(json record, redactedEventJson(event, options_.redaction));
  return withoutChainFields(record);
}

Result<RedactedRecord> Chain::recovered(std::string_view line) {
  TESSERA_ASSIGN_OR_RETURN(AuditRecord lost, parseRecordLine(line));
  if (lost.type == "checkpoint") {
    return core::invalidArgument("a checkpoint is not recovered: a new one signs what follows");
  }
  json record = std::move(lost.json);
  record["recovered"] = {{"seq", lost.seq}, {"time", record["time"]}, {"hash", lost.hash}};
  return withoutChainFields(record);
}

Result<PendingLines> Chain::prepare(const AuditEvent& event) const {
  TESSERA_ASSIGN_OR_RETURN(RedactedRecord record, redact(event));
  return seal(record);
}

Result<PendingLines> Chain::seal(const RedactedRecord& record) const {
  PendingLines pending{{}, head_};
  const std::string time = core::formatRfc3339Millis(clock_.wallNow());
  ++pending.head.seq;
  std::vector<std::pair<std::string, std::string>> chain = {
      {"prev_hash", field("prev_hash", pending.head.hash)},
      {"seq", field("seq", pending.head.seq)},
      {"time", field("time", time)}};
  const std::string unsealed = join(record.fields, chain);
  pending.head.hash = sha256Hex(unsealed);
  chain.emplace_back("hash", field("hash", pending.head.hash));
  pending.bytes = join(record.fields, std::move(chain));
  pending.bytes += '\n';
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
        appendCheckpoint(pending.head, core::formatRfc3339Millis(clock_.wallNow()), pending.bytes));
  }
  return pending;
}

Result<PendingLines> Chain::prepareCheckpoint(std::string_view file_mark) const {
  PendingLines pending{{}, head_};
  if (options_.signing_key != nullptr) {
    TESSERA_RETURN_IF_ERROR(appendCheckpoint(
        pending.head, core::formatRfc3339Millis(clock_.wallNow()), pending.bytes, file_mark));
  }
  return pending;
}

core::Status Chain::appendCheckpoint(ChainHead& head, const std::string& time, std::string& out,
                                     std::string_view file_mark) const {
  json record = {
      {"type", "checkpoint"},
      {"seq", head.seq + 1},
      {"time", time},
      {"prev_hash", head.hash},
      {"checkpoint", {{"key_id", options_.signing_key->keyId()}}},
  };
  if (options_.checkpoint_interval_ms > 0) {
    record["checkpoint"]["interval_ms"] = options_.checkpoint_interval_ms;
  }
  if (!file_mark.empty()) {
    record["checkpoint"]["file"] = std::string(file_mark);
  }
  TESSERA_ASSIGN_OR_RETURN(std::string signature,
                           options_.signing_key->signHex(checkpointSigningMessage(record)));
  record["checkpoint"]["signature"] = std::move(signature);
  ++head.seq;
  head.since_checkpoint = 0;
  sealJson(record, head, out);
  return core::Status::ok();
}

}  // namespace tessera::audit::internal
