#include "audit/verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <istream>
#include <tuple>

namespace tessera::audit {
namespace {

using core::Result;
using nlohmann::json;

// The seq of a line that may not be a valid record, if one can be read from it.
std::optional<uint64_t> looseSeq(std::string_view line) {
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    if (auto it = j.find("seq"); it != j.end() && it->is_number_unsigned()) {
      return it->get<uint64_t>();
    }
  }
  return std::nullopt;
}

// The "file" mark of a checkpoint record ("start", "end"), or "".
std::string fileMark(const AuditRecord& rec) {
  if (rec.type != "checkpoint") {
    return "";
  }
  const auto cp = rec.json.find("checkpoint");
  if (cp == rec.json.end() || !cp->is_object()) {
    return "";
  }
  const auto mark = cp->find("file");
  return mark != cp->end() && mark->is_string() ? mark->get<std::string>() : "";
}

// Checks one stream line by line and keeps the report. `on_record` sees each verified record.
class StreamVerifier {
 public:
  using OnRecord = std::function<void(const AuditRecord&, const std::string&)>;

  StreamVerifier(const VerifyingKey* key, OnRecord on_record)
      : key_(key), on_record_(std::move(on_record)) {
    if (key_ != nullptr) {
      report_.key_id = key_->keyId();
    }
  }

  // The copy of the last checkpoint that the log must hold (VerifyOptions::checkpoint_copy);
  // false (and the report says why) if the copy itself is not a valid checkpoint.
  bool expectCopy(const std::string& copy, const std::string& name) {
    std::string line = copy;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
      line.pop_back();
    }
    copy_name_ = name;
    auto parsed = parseRecordLine(line);
    if (!parsed.isOk() || parsed->type != "checkpoint") {
      report_.failure = VerifyFailure{
          0, std::nullopt,
          name + " is not an audit checkpoint: " +
              (parsed.isOk() ? "a " + parsed->type + " record" : parsed.status().message())};
      return false;
    }
    if (key_ != nullptr && !signatureValid(parsed.value())) {
      report_.failure = VerifyFailure{
          0, parsed->seq, name + " is not signed by the given public key (a forged copy)"};
      return false;
    }
    copy_line_ = line;
    report_.copy_seq = parsed->seq;
    copy_time_ = parsed->json.value("time", "");
    return true;
  }

  // The lines that follow come from the file `path` (a set of rotated files): failures name it,
  // lines count from 1 in it, and its first record must follow the previous file's last.
  void beginFile(const std::string& path) {
    if (!report_.files.empty() && report_.files.back().first_seq > 0) {
      prev_file_ = report_.files.back().path;
    }
    report_.files.push_back({path});
    file_ = path;
    line_no_ = 0;
  }

  // Checks the next line; false once the chain is broken (the report says where).
  bool feed(const std::string& line, bool has_newline) {
    ++line_no_;
    if (!has_newline) {
      return fail(looseSeq(line),
                  "the last line is incomplete (no newline at the end): the file was truncated "
                  "or a write was interrupted");
    }
    if (line.empty()) {
      return fail(std::nullopt, "empty line");
    }
    auto parsed = parseRecordLine(line);
    if (!parsed.isOk()) {
      return fail(looseSeq(line), parsed.status().message());
    }
    const AuditRecord& rec = parsed.value();
    const uint64_t expected = report_.last_seq + 1;
    const std::string mark = fileMark(rec);
    const bool file_first = !report_.files.empty() && report_.files.back().first_seq == 0;
    if (report_.records == 0) {
      // The stream's first record: seq 1, or a rotated file's start (older files removed), whose
      // prev_hash names a record that is not here.
      if (rec.seq != 1 && mark != "start") {
        return fail(rec.seq,
                    fmt::format("the first record has seq {}, not 1: records before it are missing "
                                "(a rotated log whose oldest files were removed starts with a "
                                "checkpoint marked \"file\": \"start\")",
                                rec.seq));
      }
      if (rec.seq == 1 && rec.prev_hash != kZeroHash) {
        return fail(rec.seq, "prev_hash of the first record is not all zeros");
      }
      report_.first_seq = rec.seq;
    } else if (file_first && !prev_file_.empty()) {
      // The first record of the next file of a set continues the previous file's chain.
      if (rec.seq > expected) {
        return fail(rec.seq,
                    fmt::format("the file starts at seq {}, but the previous file, {}, "
                                "ends at seq {}: records {} to {} are missing (a file "
                                "between them was removed or is not in the set)",
                                rec.seq, prev_file_, report_.last_seq, expected, rec.seq - 1));
      }
      if (rec.seq < expected) {
        return fail(rec.seq, fmt::format("the file starts at seq {}, but the previous file, {}, "
                                         "already reached seq {}: the files overlap (one file "
                                         "given twice, or a copy of one)",
                                         rec.seq, prev_file_, report_.last_seq));
      }
      if (rec.prev_hash != report_.last_hash) {
        return fail(rec.seq, fmt::format("prev_hash does not match the hash of the last record of "
                                         "the previous file, {} (seq {}): the files are not one "
                                         "chain",
                                         prev_file_, report_.last_seq));
      }
    } else if (rec.seq != expected) {
      return fail(rec.seq, fmt::format("seq {} follows seq {} (expected {}): a record is missing, "
                                       "duplicated or out of order",
                                       rec.seq, report_.last_seq, expected));
    } else if (rec.prev_hash != report_.last_hash) {
      return fail(rec.seq, "prev_hash does not match the previous record's hash");
    }
    report_.ends_at_rotation = mark == "end";
    if (file_first) {
      report_.files.back().first_seq = rec.seq;
    }
    if (!report_.files.empty()) {
      report_.files.back().last_seq = rec.seq;
    }
    if (rec.type == "checkpoint") {
      if (key_ != nullptr) {
        const json& cp = rec.json["checkpoint"];
        const std::string& key_id = cp["key_id"].get_ref<const std::string&>();
        if (key_id != key_->keyId()) {
          return fail(rec.seq, fmt::format("checkpoint signed by key {}, not by the given public "
                                           "key {}",
                                           key_id, key_->keyId()));
        }
        if (!signatureValid(rec)) {
          return fail(rec.seq, "checkpoint signature is not valid for the given public key");
        }
      }
      ++report_.checkpoints;
      report_.unsigned_tail = 0;
      report_.last_checkpoint_seq = rec.seq;
      const json& interval = rec.json["checkpoint"].value("interval_ms", json());
      report_.checkpoint_interval_ms = interval.is_number_unsigned() ? interval.get<uint64_t>() : 0;
      report_.tail_first_time.clear();
    } else {
      if (report_.unsigned_tail == 0) {
        report_.tail_first_time = rec.json.value("time", "");
      }
      ++report_.unsigned_tail;
    }
    if (!copy_line_.empty() && rec.seq == report_.copy_seq && line != copy_line_) {
      return fail(rec.seq,
                  fmt::format("not the checkpoint that {} holds for seq {} (written {}): the log "
                              "was rewritten up to here",
                              copy_name_, report_.copy_seq, copy_time_));
    }
    ++report_.records;
    report_.last_seq = rec.seq;
    report_.last_hash = rec.hash;
    if (on_record_) {
      on_record_(rec, line);
    }
    return true;
  }

  bool intact() const { return report_.intact(); }

  VerifyReport finish() {
    if (report_.intact() && !copy_line_.empty() && report_.copy_seq < report_.first_seq) {
      report_.failure = VerifyFailure{
          0, std::nullopt,
          fmt::format("{} holds checkpoint seq {}, before the first record here (seq {}): it is "
                      "older than every file given",
                      copy_name_, report_.copy_seq, report_.first_seq)};
    }
    if (report_.intact() && !copy_line_.empty() && report_.last_seq < report_.copy_seq) {
      report_.failure = VerifyFailure{
          line_no_ + 1, std::nullopt,
          fmt::format("the log ends at seq {}, but {} holds its checkpoint seq {} (written {}): "
                      "records were cut off the end of the log",
                      report_.last_seq, copy_name_, report_.copy_seq, copy_time_)};
    }
    report_.signatures_checked = key_ != nullptr && report_.intact();
    return std::move(report_);
  }

 private:
  bool signatureValid(const AuditRecord& rec) const {
    const json& cp = rec.json["checkpoint"];
    return cp["key_id"].get_ref<const std::string&>() == key_->keyId() &&
           key_->verifyHex(checkpointSigningMessage(rec.json),
                           cp["signature"].get_ref<const std::string&>());
  }

  bool fail(std::optional<uint64_t> seq, std::string message) {
    report_.failure = VerifyFailure{line_no_, seq, std::move(message), file_};
    return false;
  }

  const VerifyingKey* key_;
  OnRecord on_record_;
  uint64_t line_no_ = 0;
  VerifyReport report_;
  std::string copy_line_;  // The checkpoint copy's line; empty: none given.
  std::string copy_name_;
  std::string copy_time_;
  std::string file_;       // The file being read (beginFile); empty: one stream.
  std::string prev_file_;  // The last file before it that held records.
};

// Feeds every line of `in` to `verifier` until it fails.
core::Status feedStream(std::istream& in, StreamVerifier& verifier) {
  std::string line;
  while (std::getline(in, line)) {
    if (!verifier.feed(line, !in.eof())) {
      break;
    }
  }
  if (in.bad()) {
    return core::internalError("cannot read the audit stream");
  }
  return core::Status::ok();
}

Result<std::ifstream> openFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return core::notFound(path + ": cannot open: " + std::strerror(errno));
  }
  return in;
}

}  // namespace

std::string VerifyFailure::toString() const {
  if (line == 0) {
    return message;  // Not a line of the log (the checkpoint copy).
  }
  const std::string where = file.empty() ? "" : file + ": ";
  if (seq.has_value()) {
    return fmt::format("{}line {} (seq {}): {}", where, line, *seq, message);
  }
  return fmt::format("{}line {}: {}", where, line, message);
}

std::string VerifyReport::summary() const {
  if (failure.has_value()) {
    return fmt::format("{} ({} records before it verified)", failure->toString(), records);
  }
  std::string s = fmt::format("{} records, {} checkpoints", records, checkpoints);
  if (files.size() > 1) {
    s += fmt::format(" in {} files", files.size());
  }
  s += ", chain intact";
  if (first_seq > 1) {
    s += fmt::format("; starts at seq {} (earlier files removed)", first_seq);
  }
  if (signatures_checked && checkpoints > 0) {
    s += fmt::format("; checkpoint signatures valid (key {})", key_id);
  } else if (signatures_checked) {
    s += fmt::format("; no signed checkpoint to check (key {})", key_id);
  } else if (checkpoints > 0) {
    s += "; checkpoint signatures not checked (no public key)";
  }
  if (copy_seq > 0) {
    s += fmt::format("; holds its last checkpoint's copy (seq {})", copy_seq);
  }
  if (unsigned_tail > 0 && records > 0) {
    s += fmt::format(
        "; {} records after the last checkpoint, not covered by a signed checkpoint yet",
        unsigned_tail);
  }
  if (ends_at_rotation) {
    s += fmt::format(
        "; ends where its writer rotated to a new file (seq {}): later files are not "
        "in the set",
        last_seq);
  }
  return s;
}

Result<VerifyReport> verifyAuditStream(std::istream& in, const VerifyOptions& options) {
  StreamVerifier verifier(options.public_key, nullptr);
  if (options.checkpoint_copy == nullptr ||
      verifier.expectCopy(*options.checkpoint_copy, options.checkpoint_copy_name)) {
    TESSERA_RETURN_IF_ERROR(feedStream(in, verifier));
  }
  return verifier.finish();
}

Result<VerifyReport> verifyAuditStream(std::istream& in, const VerifyingKey* public_key) {
  return verifyAuditStream(in, VerifyOptions{.public_key = public_key});
}

Result<VerifyReport> verifyAuditFile(const std::string& path, const VerifyOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(std::ifstream in, openFile(path));
  auto report = verifyAuditStream(in, options);
  if (!report.isOk()) {
    return report.status().withContext(path);
  }
  return report;
}

Result<VerifyReport> verifyAuditFile(const std::string& path, const VerifyingKey* public_key) {
  return verifyAuditFile(path, VerifyOptions{.public_key = public_key});
}

Result<VerifyReport> verifyAuditFiles(std::span<const std::string> paths,
                                      const VerifyOptions& options) {
  struct Entry {
    std::string path;
    uint64_t first_seq = 0;  // 0: empty.
  };
  std::vector<Entry> entries;
  for (const std::string& path : paths) {
    TESSERA_ASSIGN_OR_RETURN(std::ifstream in, openFile(path));
    std::string first;
    Entry e{path};
    if (std::getline(in, first)) {
      const std::optional<uint64_t> seq = looseSeq(first);
      if (!seq.has_value()) {
        // Not a record at all: its place in the chain cannot even be told.
        VerifyReport report;
        auto parsed = parseRecordLine(first);
        report.failure = VerifyFailure{
            1, std::nullopt,
            "not an audit record (" +
                (parsed.isOk() ? std::string("no seq") : parsed.status().message()) + ")",
            path};
        return report;
      }
      e.first_seq = *seq;
    } else if (in.bad()) {
      return core::internalError(path + ": cannot read");
    }
    entries.push_back(std::move(e));
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.first_seq < b.first_seq; });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].first_seq > 0 && entries[i].first_seq == entries[i - 1].first_seq) {
      VerifyReport report;
      report.failure = VerifyFailure{
          1, entries[i].first_seq,
          fmt::format("starts at the same seq as {}: one file given twice, or a copy of one",
                      entries[i - 1].path),
          entries[i].path};
      return report;
    }
  }
  StreamVerifier verifier(options.public_key, nullptr);
  if (options.checkpoint_copy == nullptr ||
      verifier.expectCopy(*options.checkpoint_copy, options.checkpoint_copy_name)) {
    for (const Entry& e : entries) {
      verifier.beginFile(e.path);
      if (e.first_seq == 0) {
        continue;
      }
      TESSERA_ASSIGN_OR_RETURN(std::ifstream in, openFile(e.path));
      if (auto s = feedStream(in, verifier); !s.isOk()) {
        return s.withContext(e.path);
      }
      if (!verifier.intact()) {
        break;
      }
    }
  }
  return verifier.finish();
}

Result<std::vector<std::string>> tenantView(std::istream& operator_stream,
                                            std::string_view tenant) {
  if (tenant.empty()) {
    return core::invalidArgument(
        "a tenant view needs a tenant name (operator records are not "
        "part of any tenant's view)");
  }
  std::vector<std::string> view;
  std::string line;
  uint64_t line_no = 0;
  while (std::getline(operator_stream, line)) {
    ++line_no;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      return core::invalidArgument(
          fmt::format("line {}: not an audit record; verify the stream first", line_no));
    }
    const auto it = j.find("tenant");
    const auto type = j.find("type");
    if (it != j.end() && it->is_string() && *it == tenant && type != j.end() &&
        (*type == "request" || *type == "response")) {
      view.push_back(line);
    }
  }
  if (operator_stream.bad()) {
    return core::internalError("cannot read the audit stream");
  }
  return view;
}

namespace {

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool isAuditSidecar(std::string_view name) {
  for (std::string_view suffix : {".checkpoint", ".tmp", ".pem", ".salt", ".new"}) {
    if (endsWith(name, suffix)) {
      return true;
    }
  }
  return false;
}

bool isCompressedLog(std::string_view name) {
  for (std::string_view suffix : {".gz", ".xz", ".zst", ".bz2", ".lz4"}) {
    if (endsWith(name, suffix)) {
      return true;
    }
  }
  return false;
}

bool isRotatedFrom(std::string_view base, std::string_view name) {
  return name.size() > base.size() + 1 && name.substr(0, base.size()) == base &&
         (name[base.size()] == '.' || name[base.size()] == '-') && !isAuditSidecar(name);
}

bool looksLikeAuditLog(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return false;
  }
  char head[16] = {};
  in.read(head, sizeof head);
  const std::string_view start(head, static_cast<size_t>(in.gcount()));
  return start.empty() || start.rfind("{\"auth\":{", 0) == 0 ||
         start.rfind("{\"checkpoint\":{", 0) == 0;
}

Result<std::vector<VerifiedFile>> rotatedLogFiles(const std::string& path) {
  const std::filesystem::path log(path);
  const std::string base = log.filename().string();
  std::filesystem::path dir = log.parent_path();
  if (dir.empty()) {
    dir = ".";
  }
  auto first_seq = [](const std::filesystem::path& p) -> uint64_t {
    std::ifstream in(p, std::ios::binary);
    std::string line;
    if (!std::getline(in, line)) {
      return 0;
    }
    return looseSeq(line).value_or(0);
  };
  std::vector<VerifiedFile> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code type_ec;
    if (!isRotatedFrom(base, name) || isCompressedLog(name) || !entry.is_regular_file(type_ec) ||
        !looksLikeAuditLog(entry.path())) {
      continue;
    }
    out.push_back({entry.path().string(), first_seq(entry.path()), 0});
  }
  if (ec) {
    return core::unavailable(fmt::format("{}: cannot list it: {}", dir.string(), ec.message()));
  }
  std::sort(out.begin(), out.end(), [](const VerifiedFile& a, const VerifiedFile& b) {
    return std::tie(a.first_seq, a.path) < std::tie(b.first_seq, b.path);
  });
  out.push_back({path, first_seq(log), 0});
  return out;
}

Result<std::vector<std::string>> tenantViewOfFile(const std::string& path,
                                                  std::string_view tenant) {
  TESSERA_ASSIGN_OR_RETURN(std::ifstream in, openFile(path));
  auto view = tenantView(in, tenant);
  if (!view.isOk()) {
    return view.status().withContext(path);
  }
  return view;
}

VerifyReport verifyTenantView(std::span<const std::string> view, std::string_view tenant) {
  VerifyReport report;
  auto fail = [&](uint64_t line, std::optional<uint64_t> seq, std::string message) {
    report.failure = VerifyFailure{line, seq, std::move(message)};
    return report;
  };
  for (size_t i = 0; i < view.size(); ++i) {
    const uint64_t line = i + 1;
    auto parsed = parseRecordLine(view[i]);
    if (!parsed.isOk()) {
      return fail(line, looseSeq(view[i]), parsed.status().message());
    }
    const AuditRecord& rec = parsed.value();
    if (rec.type == "checkpoint" || rec.tenant != tenant) {
      return fail(line, rec.seq, fmt::format("not a record of tenant '{}'", tenant));
    }
    if (report.records > 0) {
      if (rec.seq <= report.last_seq) {
        return fail(line, rec.seq,
                    fmt::format("seq {} does not increase (previous record: seq {})", rec.seq,
                                report.last_seq));
      }
      if (rec.seq == report.last_seq + 1 && rec.prev_hash != report.last_hash) {
        return fail(line, rec.seq, "prev_hash does not match the previous record's hash");
      }
    }
    ++report.records;
    report.last_seq = rec.seq;
    report.last_hash = rec.hash;
  }
  return report;
}

Result<VerifyReport> checkTenantViewAgainstStream(std::span<const std::string> view,
                                                  std::istream& operator_stream,
                                                  std::string_view tenant,
                                                  const VerifyingKey* public_key) {
  if (tenant.empty()) {
    return core::invalidArgument("a tenant view needs a tenant name");
  }
  std::vector<std::pair<uint64_t, std::string>> expected;  // (seq, line) of the tenant's records.
  StreamVerifier verifier(public_key, [&](const AuditRecord& rec, const std::string& line) {
    if (rec.type != "checkpoint" && rec.tenant == tenant) {
      expected.emplace_back(rec.seq, line);
    }
  });
  TESSERA_RETURN_IF_ERROR(feedStream(operator_stream, verifier));
  VerifyReport report = verifier.finish();
  if (!report.intact()) {
    return report;
  }
  auto fail = [&](uint64_t line, std::optional<uint64_t> seq, std::string message) {
    report.failure = VerifyFailure{line, seq, "view: " + std::move(message)};
    return report;
  };
  for (size_t i = 0; i < std::max(view.size(), expected.size()); ++i) {
    if (i >= view.size()) {
      return fail(i + 1, expected[i].first,
                  fmt::format("the view ends here but lacks the tenant's record seq {} and {} more",
                              expected[i].first, expected.size() - i - 1));
    }
    const std::optional<uint64_t> seq = looseSeq(view[i]);
    if (i >= expected.size()) {
      return fail(i + 1, seq, "not one of the tenant's records in the operator stream");
    }
    if (view[i] == expected[i].second) {
      continue;
    }
    if (seq == expected[i].first) {
      return fail(i + 1, seq, "differs from the operator stream's record with this seq");
    }
    if (seq.has_value() && *seq > expected[i].first) {
      return fail(
          i + 1, seq,
          fmt::format("the tenant's record seq {} is missing before this line", expected[i].first));
    }
    return fail(i + 1, seq, "not one of the tenant's records in the operator stream");
  }
  return report;
}

}  // namespace tessera::audit
