#include "cli/audit_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "audit/crypto.h"
#include "audit/record.h"
#include "audit/verify.h"

namespace tessera::cli {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;

int fail(int code, const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return code;
}

struct VerifyArgs {
  std::string file;
  std::string public_key;
};

int runVerify(const VerifyArgs& args) {
  std::unique_ptr<audit::VerifyingKey> key;
  std::string public_key = args.public_key;
  if (public_key.empty() && std::filesystem::exists(args.file + ".public.pem")) {
    // The key the server made beside the log (its audit block names no key of its own).
    public_key = args.file + ".public.pem";
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
  auto report = audit::verifyAuditFile(args.file, key.get());
  if (!report.isOk()) {
    return fail(kExitBadInput, report.status().message());
  }
  if (!report->intact()) {
    return fail(kExitFailure, args.file + ": " + report->summary());
  }
  std::cout << report->summary() << "\n";
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
  verify_cmd->add_option("file", verify->file, "Audit log file (JSON lines)")->required();
  verify_cmd->add_option("--public-key,-k", verify->public_key,
                         "Ed25519 public key (PEM) to check checkpoint signatures with (default: "
                         "FILE.public.pem, the server's, if it is there); without one a rewritten "
                         "tail with recomputed hashes cannot be detected");
  verify_cmd->footer(
      "Checks that every line is a complete record whose hash matches its contents, that seq "
      "counts up from 1, that each prev_hash is the previous record's hash and, with "
      "--public-key, that every checkpoint is signed by that key. Prints a one-line summary, or "
      "the first broken record as 'line N (seq S): what is wrong'.\n"
      "Exit status: 0 chain intact, 1 chain broken, 2 file or key unreadable.\n"
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
