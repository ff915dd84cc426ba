#include "cli/audit_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "audit/crypto.h"
#include "audit/record.h"
#include "audit/verify.h"
#include "core/rfc3339.h"

namespace tessera::cli {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;
// `audit verify`: the chain is intact, but its last records follow the last checkpoint (they
// are not signed yet): a live server's young tail (3), or one older than the writer's
// checkpoint interval, or from a writer that promised none (4).
constexpr int kExitTailNotYetSigned = 3;
constexpr int kExitTailUnsigned = 4;

int fail(int code, const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return code;
}

struct VerifyArgs {
  std::vector<std::string> files;
  std::string public_key;
  std::string checkpoint_copy;
  bool only = false;  // Not the rotated files beside a single FILE.
};

// The audit logs among the regular files of `dir` whose names `keep` accepts, sorted by name;
// what is skipped is said on stderr.
std::vector<std::string> auditLogsIn(const std::filesystem::path& dir,
                                     const std::function<bool(const std::string&)>& keep) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !keep(name) || audit::isAuditSidecar(name)) {
      continue;
    }
    if (audit::isCompressedLog(name)) {
      std::cerr << "skipping " << entry.path().string()
                << " (compressed: decompress it to verify it with the others)\n";
    } else if (!audit::looksLikeAuditLog(entry.path())) {
      std::cerr << "skipping " << entry.path().string() << " (not an audit log)\n";
    } else {
      out.push_back(entry.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The files to verify: FILE and the rotated files beside it (unless --only), each DIR's audit
// logs, or exactly the files given. `live` gets the file whose sidecars (public key, checkpoint
// copy) apply: a single FILE, or the one file of the set that has them.
core::Result<std::vector<std::string>> verifySet(const VerifyArgs& args, std::string* live) {
  std::vector<std::string> files;
  for (const std::string& arg : args.files) {
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      auto found = auditLogsIn(arg, [](const std::string&) { return true; });
      if (found.empty()) {
        return core::notFound(arg + ": no audit log files in this directory");
      }
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(arg);
    }
  }
  if (args.files.size() == 1 && files.size() == 1 && !args.only) {
    // A log and the files it was rotated into: the sink's own names (audit.log.<time>) and
    // logrotate's (audit.log.1, audit.log-20240501).
    const std::filesystem::path log(files[0]);
    const std::string base = log.filename().string();
    std::filesystem::path dir = log.parent_path();
    auto rotated = auditLogsIn(dir.empty() ? "." : dir, [&](const std::string& name) {
      return audit::isRotatedFrom(base, name);
    });
    if (!rotated.empty()) {
      std::cerr << "verifying " << files[0] << " with the " << rotated.size()
                << " rotated files beside it (--only for it alone)\n";
      files.insert(files.end(), rotated.begin(), rotated.end());
    }
  }
  if (args.files.size() == 1 && !std::filesystem::is_directory(args.files[0])) {
    *live = args.files[0];
  } else {
    for (const std::string& f : files) {
      if (std::filesystem::exists(f + ".public.pem") ||
          std::filesystem::exists(f + ".checkpoint")) {
        if (!live->empty()) {
          live->clear();  // Two candidates: none is assumed.
          break;
        }
        *live = f;
      }
    }
  }
  return files;
}

// How long an unsigned tail may wait for its checkpoint, beyond the writer's interval, before
// verify stops calling it a live server's: a flush, a slow disk, clocks a little apart.
std::chrono::milliseconds tailGrace(uint64_t interval_ms) {
  return std::chrono::milliseconds(interval_ms + 2000);
}

// The exit status and message for an intact chain's unsigned tail (report.unsigned_tail > 0).
int unsignedTail(const audit::VerifyReport& report) {
  const auto first = core::parseRfc3339(report.tail_first_time);
  const auto age = first ? std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now() - *first)
                         : std::chrono::milliseconds::max();
  const std::string what = fmt::format(
      "{} records after the last checkpoint ({}) are not signed yet; the oldest was written at {}",
      report.unsigned_tail,
      report.last_checkpoint_seq > 0 ? fmt::format("seq {}", report.last_checkpoint_seq)
                                     : std::string("there is none"),
      report.tail_first_time);
  if (report.checkpoint_interval_ms > 0 && age <= tailGrace(report.checkpoint_interval_ms)) {
    std::cerr << "warning: " << what << " (" << age.count() / 1000.0
              << " s ago). The server signs them within its checkpoint interval ("
              << report.checkpoint_interval_ms
              << " ms) and when it stops: verify again then. Until then they could be rewritten "
                 "or cut off without a trace.\n";
    return kExitTailNotYetSigned;
  }
  std::cerr << "warning: " << what << ", "
            << (report.checkpoint_interval_ms > 0
                    ? fmt::format("longer ago than the writer's checkpoint interval ({} ms)",
                                  report.checkpoint_interval_ms)
                    : std::string("and the writer promised no checkpoint interval"))
            << ". The server stopped without its final checkpoint (killed or crashed: it signs "
               "them when it starts again), or these records were rewritten or cut after it "
               "stopped. They cannot be vouched for.\n";
  return kExitTailUnsigned;
}

int runVerify(const VerifyArgs& args) {
  std::string live;
  auto files = verifySet(args, &live);
  if (!files.isOk()) {
    return fail(kExitBadInput, files.status().message());
  }
  std::unique_ptr<audit::VerifyingKey> key;
  std::string public_key = args.public_key;
  if (public_key.empty() && !live.empty() && std::filesystem::exists(live + ".public.pem")) {
    // The key the server made beside the log (its audit block names no key of its own).
    public_key = live + ".public.pem";
    std::cerr << "checking checkpoint signatures with " << public_key
              << " (found beside the log; --public-key to give another)\n";
  }
  if (!public_key.empty()) {
    auto k = audit::VerifyingKey::fromPemFile(public_key);
    if (!k.isOk()) {
      return fail(kExitBadInput, k.status().message());
    }
    key = std::move(k).value();
  }
  audit::VerifyOptions options{.public_key = key.get()};
  std::string copy_file = args.checkpoint_copy;
  if (copy_file.empty() && !live.empty() && std::filesystem::exists(live + ".checkpoint")) {
    // The copy of its last checkpoint that the server keeps beside the log.
    copy_file = live + ".checkpoint";
    std::cerr << "checking the log against the copy of its last checkpoint in " << copy_file
              << " (found beside the log; --checkpoint to give another)\n";
  }
  std::string copy;
  if (!copy_file.empty()) {
    std::ifstream in(copy_file, std::ios::binary);
    if (!in) {
      return fail(kExitBadInput, copy_file + ": cannot open the checkpoint copy");
    }
    copy.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    options.checkpoint_copy = &copy;
    options.checkpoint_copy_name = copy_file;
  }
  // The copy is read before the log: the log a server writes meanwhile still holds it.
  auto report = audit::verifyAuditFiles(*files, options);
  if (!report.isOk()) {
    return fail(kExitBadInput, report.status().message());
  }
  if (!report->intact()) {
    // A failure names its file, except one against the checkpoint copy (which names the copy).
    const std::string where =
        report->failure->file.empty() && files->size() == 1 ? (*files)[0] + ": " : "";
    return fail(kExitFailure, where + report->summary());
  }
  if (files->size() > 1) {
    for (const audit::VerifiedFile& f : report->files) {
      std::cout << "  " << f.path << ": "
                << (f.first_seq == 0 ? std::string("empty")
                                     : fmt::format("seq {} to {}", f.first_seq, f.last_seq))
                << "\n";
    }
  }
  std::cout << report->summary() << "\n";
  if (report->unsigned_tail > 0) {
    return unsignedTail(*report);
  }
  return 0;
}

struct PubkeyArgs {
  std::string file;
};

// Prints the public key a server made beside its audit log, for whoever verifies the log.
int runPubkey(const PubkeyArgs& args) {
  const std::string path = args.file + ".public.pem";
  std::ifstream in(path);
  if (!in) {
    return fail(kExitBadInput, "no " + path +
                                   ": the server makes it beside the log at its first start, "
                                   "unless its audit block names a signing_key_file");
  }
  std::cout << in.rdbuf();
  return 0;
}

struct HashArgs {
  std::string salt_file;
  std::string value;
  bool json = false;
};

int runHash(const HashArgs& args) {
  auto salt = audit::readSaltFile(args.salt_file);
  if (!salt.isOk()) {
    return fail(kExitBadInput, salt.status().message());
  }
  std::string value = args.value;
  if (value == "-") {
    value.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (!value.empty() && value.back() == '\n') {
      value.pop_back();
    }
  }
  if (args.json) {
    // The sink's rule: a string is HMAC'd as its text, anything else as its canonical JSON.
    const nlohmann::json parsed = nlohmann::json::parse(value, nullptr, false);
    if (parsed.is_discarded()) {
      return fail(kExitBadInput, "--json: the value is not valid JSON");
    }
    value = parsed.is_string() ? parsed.get<std::string>() : audit::canonicalJson(parsed);
  }
  std::cout << audit::hmacValue(*salt, value) << "\n";
  return 0;
}

struct KeygenArgs {
  std::string private_key;
  std::string public_key;
};

int runKeygen(const KeygenArgs& args) {
  const core::Status s = audit::writeKeyPairFiles(args.private_key, args.public_key);
  if (!s.isOk()) {
    return fail(s.code() == core::StatusCode::kAlreadyExists ? kExitBadInput : kExitFailure,
                s.message());
  }
  auto key = audit::VerifyingKey::fromPemFile(args.public_key);
  std::cout << "Wrote " << args.private_key << " (private, mode 0600) and " << args.public_key
            << "; key id " << (key.isOk() ? (*key)->keyId() : "?") << "\n";
  return 0;
}

struct ViewArgs {
  std::string file;
  std::string tenant;
};

int runView(const ViewArgs& args) {
  auto view = audit::tenantViewOfFile(args.file, args.tenant);
  if (!view.isOk()) {
    return fail(kExitBadInput, view.status().message());
  }
  for (const std::string& line : *view) {
    std::cout << line << "\n";
  }
  return 0;
}

}  // namespace

void addAuditCommand(CLI::App& app, int* rc) {
  CLI::App* audit_cmd = app.add_subcommand(
      "audit",
      "The tamper-evident audit log: offline tools (verify, hash, keygen, view) and tail (a "
      "tenant's records from the server)");
  audit_cmd->require_subcommand(1);
  audit_cmd->footer(
      "An audit log is one JSON record per line. Each record carries seq (1, 2, ...), prev_hash "
      "(the previous record's hash) and hash (SHA-256 of the line without its hash field), so "
      "changing, removing or reordering any record breaks the chain. Checkpoint records are "
      "signed with an Ed25519 key. Sensitive values appear only as hmac-sha256:<hex>, keyed "
      "with the sink's salt.");

  auto verify = std::make_shared<VerifyArgs>();
  CLI::App* verify_cmd = audit_cmd->add_subcommand(
      "verify",
      "Check an audit log's hash chain and checkpoint signatures; report the first broken record");
  verify_cmd
      ->add_option("files", verify->files,
                   "Audit log file (JSON lines), with the rotated files beside it; or several "
                   "files, or a directory, holding one rotated log")
      ->required();
  verify_cmd->add_flag("--only", verify->only,
                       "Verify FILE alone, not with the rotated files beside it");
  verify_cmd->add_option("--public-key,-k", verify->public_key,
                         "Ed25519 public key (PEM) to check checkpoint signatures with (default: "
                         "FILE.public.pem, the server's, if it is there); without one a rewritten "
                         "tail with recomputed hashes cannot be detected");
  verify_cmd->add_option("--checkpoint,-c", verify->checkpoint_copy,
                         "The copy of the log's last checkpoint (one line) to hold the log "
                         "against (default: FILE.checkpoint, the server's, if it is there); keep "
                         "one where the log's writer cannot change it");
  verify_cmd->footer(
      "Checks that every line is a complete record whose hash matches its contents, that seq "
      "counts up from 1, that each prev_hash is the previous record's hash, with --public-key "
      "that every checkpoint is signed by that key, and with --checkpoint that the log holds "
      "that checkpoint at its seq (a log cut back to before its last checkpoint, or rewritten up "
      "to it, fails). Prints a one-line summary, or the first broken record as 'FILE: line N "
      "(seq S): what is wrong'.\n"
      "A rotated log is one chain over several files (audit.log, audit.log.<time>, or "
      "logrotate's audit.log.1 ...): given FILE, verify also reads the rotated files beside it; "
      "given several files or a directory, it reads those. It orders them by their first seq "
      "and checks that each file's first record follows the previous file's last; a missing "
      "file in the middle fails, naming the files on either side. A set whose oldest files were "
      "removed (retain_files) starts at a signed checkpoint marked as a file's start: verify "
      "says 'starts at seq N (earlier files removed)'. Compressed files are skipped.\n"
      "Records after the last checkpoint are not signed: they could have been rewritten or cut "
      "off without a trace. A live server signs them within its checkpoint interval (audit "
      "block: checkpoint_interval_ms, 5000 by default) and when it stops.\n"
      "Exit status: 0 chain intact and every record signed; 1 chain broken (a record changed, "
      "missing or cut off, a bad signature); 2 file or key unreadable; 3 chain intact, but the "
      "last records are not signed yet and younger than the server's checkpoint interval (a "
      "live server's tail: verify again later); 4 chain intact, but the last records are not "
      "signed and older than that interval, or the log has no interval (its server was killed "
      "before it signed them, or they were changed since: they cannot be vouched for).\n"
      "Example: tessera audit verify /var/lib/tessera/audit.log --public-key audit-public.pem");
  verify_cmd->callback([verify, rc] { *rc = runVerify(*verify); });

  auto pubkey = std::make_shared<PubkeyArgs>();
  CLI::App* pubkey_cmd = audit_cmd->add_subcommand(
      "pubkey", "Print the public key that checks an audit log's checkpoint signatures");
  pubkey_cmd->add_option("file", pubkey->file, "Audit log file")->required();
  pubkey_cmd->footer(
      "A server whose audit block names no signing_key_file signs checkpoints with a key it "
      "makes beside the log at its first start (FILE.signing-key.pem, mode 0600) and writes the "
      "public key to FILE.public.pem; keep a copy where the log's writer cannot change it.\n"
      "Example: tessera audit pubkey /var/lib/tessera/audit.log > audit-public.pem");
  pubkey_cmd->callback([pubkey, rc] { *rc = runPubkey(*pubkey); });

  auto hash = std::make_shared<HashArgs>();
  CLI::App* hash_cmd = audit_cmd->add_subcommand(
      "hash", "Print the HMAC an audit sink writes for a value (like Vault's sys/audit-hash)");
  hash_cmd
      ->add_option("--salt-file,-s", hash->salt_file,
                   "The sink's salt file (its bytes without trailing newline are the key)")
      ->required();
  hash_cmd
      ->add_option("value", hash->value,
                   "The candidate value; '-' reads it from standard input (one trailing "
                   "newline dropped), which keeps secrets out of shell history")
      ->required();
  hash_cmd->add_flag("--json", hash->json,
                     "VALUE is JSON: a string is hashed as its text, anything else as its "
                     "canonical JSON (sorted keys, no spaces), as the sink does");
  hash_cmd->footer(
      "Use it to check whether a hmac-sha256:<hex> in the log was a given token or secret.\n"
      "Formula: \"hmac-sha256:\" + hex(HMAC-SHA256(key = salt, message = value)).\n"
      "Example: tessera audit hash --salt-file audit.salt - <<< \"$TOKEN\"");
  hash_cmd->callback([hash, rc] { *rc = runHash(*hash); });

  auto keygen = std::make_shared<KeygenArgs>();
  CLI::App* keygen_cmd = audit_cmd->add_subcommand(
      "keygen", "Create an Ed25519 key pair for signing audit checkpoints (PEM files)");
  keygen_cmd
      ->add_option("--private-key", keygen->private_key,
                   "Private key file to create (mode 0600; never overwritten)")
      ->required();
  keygen_cmd
      ->add_option("--public-key", keygen->public_key,
                   "Public key file to create (give it to whoever verifies the log)")
      ->required();
  keygen_cmd->callback([keygen, rc] { *rc = runKeygen(*keygen); });

  auto view = std::make_shared<ViewArgs>();
  CLI::App* view_cmd = audit_cmd->add_subcommand(
      "view", "Print one tenant's records from an operator audit log, byte for byte");
  view_cmd->footer(
      "Each record keeps the operator chain's seq, prev_hash and hash, so the tenant can check "
      "each one on its own; proving that none is missing needs the whole log (see "
      "src/audit/verify.h).");
  view_cmd->add_option("file", view->file, "Operator audit log file")->required();
  view_cmd->add_option("--tenant,-t", view->tenant, "Tenant name")->required();
  view_cmd->callback([view, rc] { *rc = runView(*view); });
}

}  // namespace tessera::cli
