// Verifying audit streams: the whole operator stream (one file, or the files of a rotated log),
// and one tenant's view of it.
//
//   auto key = VerifyingKey::fromPemFile("audit-public.pem");
//   TESSERA_ASSIGN_OR_RETURN(VerifyReport r, verifyAuditFile("audit.log", key->get()));
//   std::cout << r.summary() << "\n";  // "12345 records, 12 checkpoints, chain intact ..."
//
// `verifyAuditFile` checks that every line is a complete, canonical record whose hash matches its
// contents, that seq counts 1, 2, 3, ..., that each prev_hash is the previous record's hash, and,
// given the public key, that every checkpoint is signed by it. It reports the FIRST broken record:
// "line 1234 (seq 1234): prev_hash does not match the previous record's hash".
//
// What the chain proves, and what it does not:
// - Any change to a record (one byte anywhere), a removed, inserted, duplicated or reordered
//   record, and a truncated last line are detected at the first record concerned.
// - Someone who can rewrite the file can also recompute every hash after a change; only the
//   checkpoint signatures (verified with the public key) detect that, up to the last checkpoint.
// - Cutting whole records off the end of the file leaves a valid, shorter chain. Given the copy
//   of the last checkpoint that the writer keeps outside the log (`VerifyOptions::
//   checkpoint_copy`; FileSinkOptions::checkpoint_copy), a log that ends before that
//   checkpoint's seq, or holds another record at its seq, fails: that catches a log cut back
//   to before its last checkpoint, and one rewritten up to it. Someone who can also replace the
//   copy with an older one defeats that, unless the copy is kept where they cannot (another
//   machine).
// - Records after the last checkpoint are unsigned (`unsigned_tail`): they may have been
//   rewritten (hashes recomputed) or cut off, and nothing here can tell. A live writer signs
//   them within its checkpoint interval, which its checkpoints state (`checkpoint_interval_ms`),
//   and on a clean stop; `tail_first_time` says how long the oldest of them has waited, so a
//   caller can tell a live log's young tail from one that its writer left unsigned (killed) or
//   that was changed after the writer stopped (`tessera audit verify` exits 3 or 4).
//
// Tenant views. `tenantView` extracts one tenant's records from the operator stream, byte for byte,
// so each still carries the seq, prev_hash and hash of the operator chain.
// - A tenant holding only its view can check (`verifyTenantView`) that each record is intact on
//   its own (canonical, hash matches its contents: the operator cannot later show a different
//   version of it without the hash changing), that the records are its own, that seq increases,
//   and, where two of its records are adjacent in the stream (seq n, n+1), that they are linked.
//   Gaps in seq show how many other records lie between (their number, not their contents).
// - A tenant cannot check, from its view alone, that none of its records was removed or altered
//   and re-hashed between two of its records that others' records separate, nor that its records
//   are covered by a signed checkpoint: both need the records in between, which belong to other
//   tenants. Nor can it recompute the HMACs (the salt is the operator's). An operator or an
//   auditor with the whole stream runs `checkTenantViewAgainstStream` for that.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/status.h"

namespace tessera::audit {

struct VerifyFailure {
  uint64_t line = 0;            // 1-based line of the first broken record.
  std::optional<uint64_t> seq;  // Its seq, if it could be read.
  std::string message;          // What is wrong with it.
  std::string file = {};        // The file it is in (verifyAuditFiles); empty: the one stream.

  // "line 1234 (seq 1234): prev_hash does not match the previous record's hash", after
  // "FILE: " when `file` is set.
  std::string toString() const;
};

// One file of a rotated set, as verifyAuditFiles found it.
struct VerifiedFile {
  std::string path;
  uint64_t first_seq = 0;  // 0: an empty file.
  uint64_t last_seq = 0;
};

struct VerifyOptions {
  // Checks checkpoint signatures (and the copy's) with this key; null: not checked.
  const VerifyingKey* public_key = nullptr;
  // The copy of the log's last checkpoint kept outside it (one checkpoint line): the log must
  // hold exactly this line at its seq. Null: not checked.
  const std::string* checkpoint_copy = nullptr;
  std::string checkpoint_copy_name = "the checkpoint copy";  // For messages.
};

struct VerifyReport {
  uint64_t records = 0;              // Records that verified, checkpoints included.
  uint64_t checkpoints = 0;          // Checkpoints among them.
  bool signatures_checked = false;   // A public key was given and every checkpoint matched it.
  std::string key_id;                // The public key's id, when one was given.
  uint64_t unsigned_tail = 0;        // Records after the last checkpoint.
  uint64_t last_checkpoint_seq = 0;  // 0: no checkpoint.
  // The last checkpoint's promise: no record waits longer than this for one (0: none made).
  uint64_t checkpoint_interval_ms = 0;
  std::string tail_first_time;  // The `time` of the first record after the last checkpoint.
  uint64_t copy_seq = 0;        // The seq of the checkpoint copy checked (0: none given).

  // The seq the stream starts at: 1, or later for a rotated set whose oldest files were
  // removed (it starts with a signed checkpoint marked "file": "start").
  uint64_t first_seq = 0;
  // The last record is a checkpoint marked "file": "end": the files after it are not here.
  bool ends_at_rotation = false;
  std::vector<VerifiedFile> files;  // verifyAuditFiles: the set, in chain order.

  uint64_t last_seq = 0;
  std::string last_hash = std::string(kZeroHash);
  std::optional<VerifyFailure> failure;  // The first broken record; none if intact.

  bool intact() const { return !failure.has_value(); }
  // One line for people: "12345 records, 12 checkpoints, chain intact; ..." or the failure.
  std::string summary() const;
};

// Verifies a stream read from `in`. Fails only if `in` cannot be read; a broken chain is a report
// with `failure` set. Without `public_key`, checkpoint signatures are not checked.
core::Result<VerifyReport> verifyAuditStream(std::istream& in,
                                             const VerifyingKey* public_key = nullptr);
core::Result<VerifyReport> verifyAuditFile(const std::string& path,
                                           const VerifyingKey* public_key = nullptr);
// The same, with a checkpoint copy to hold the log against (VerifyOptions).
core::Result<VerifyReport> verifyAuditStream(std::istream& in, const VerifyOptions& options);
core::Result<VerifyReport> verifyAuditFile(const std::string& path, const VerifyOptions& options);

// Verifies a rotated log: several files that together hold one chain (audit/file_sink.h). The
// files may come in any order: they are put in chain order by their first record's seq, and each
// file's first record must follow the previous file's last (seq + 1, prev_hash = its hash). A
// missing file in the middle, overlapping files and the same file twice fail, naming the files.
// The set may start after seq 1 only at a checkpoint marked "file": "start" (its older files were
// removed by retention: `first_seq` says where it starts); the checkpoint copy, if given, is
// held against the whole set. Empty files are skipped. Fails (a Status) only if a file cannot be
// read; a failure's `file` names the file of the broken record, and `line` counts in that file.
core::Result<VerifyReport> verifyAuditFiles(std::span<const std::string> paths,
                                            const VerifyOptions& options);

// Files beside an audit log that are not part of it: the server's sidecars (checkpoint copy,
// keys, salt) and temporary files.
bool isAuditSidecar(std::string_view name);
// Compressed rotated logs (.gz, .xz, ...): verified once decompressed.
bool isCompressedLog(std::string_view name);
// Whether `name` may be a file rotated from the log named `base` (file names, not paths): the
// sink's `<base>.<time>` or logrotate's `<base>.1`, `<base>-20240501`; not a sidecar.
bool isRotatedFrom(std::string_view base, std::string_view name);
// Whether the file starts like an audit record (or is empty). Records are canonical JSON (keys
// sorted), so every one starts with "auth" or, for a checkpoint, "checkpoint"; only the first
// bytes are read.
bool looksLikeAuditLog(const std::filesystem::path& path);
// The files of the log at `path`, in chain order (by first seq, read from each file's first line;
// empty files first): the files rotated from it beside it that look like audit logs (compressed
// ones are skipped), then `path` itself. Each with its first seq (0: empty); `last_seq` is not
// read. Fails only if the directory cannot be listed.
core::Result<std::vector<VerifiedFile>> rotatedLogFiles(const std::string& path);

// The request and response records of `tenant` in an operator stream, each line byte for byte
// (without its newline). Fails on an unreadable stream, a line that is not a record, or an empty
// `tenant` (operator records are not a tenant's).
core::Result<std::vector<std::string>> tenantView(std::istream& operator_stream,
                                                  std::string_view tenant);
core::Result<std::vector<std::string>> tenantViewOfFile(const std::string& path,
                                                        std::string_view tenant);

// What a tenant can check with its view alone (see above). Lines count from 1 in the view.
VerifyReport verifyTenantView(std::span<const std::string> view, std::string_view tenant);

// Verifies the whole operator stream, then that `view` is exactly `tenant`'s records in it: none
// missing, none added, none altered. The report describes the stream; `failure` is the first
// problem with either (a view problem says "view line N").
core::Result<VerifyReport> checkTenantViewAgainstStream(std::span<const std::string> view,
                                                        std::istream& operator_stream,
                                                        std::string_view tenant,
                                                        const VerifyingKey* public_key = nullptr);

}  // namespace tessera::audit
