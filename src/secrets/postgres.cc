#include "secrets/postgres.h"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <utility>

namespace tessera::secrets {
namespace {

using ResultPtr = std::unique_ptr<PGresult, decltype(&PQclear)>;
using Clock = std::chrono::steady_clock;

// libpq messages span lines ("...failed: Connection refused\n\tIs the server running...?\n"):
// one line, without the trailing newline.
std::string oneLine(const char* text) {
  std::string out;
  for (const char* p = text; p != nullptr && *p != '\0'; ++p) {
    if (*p == '\n' || *p == '\t') {
      if (!out.empty() && out.back() != ' ') {
        out.push_back(' ');
      }
    } else {
      out.push_back(*p);
    }
  }
  while (!out.empty() && out.back() == ' ') {
    out.pop_back();
  }
  return out;
}

bool startsWithNoCase(std::string_view text, size_t at, std::string_view word) {
  if (text.size() - at < word.size()) {
    return false;
  }
  for (size_t i = 0; i < word.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[at + i])) != word[i]) {
      return false;
    }
  }
  return true;
}

bool isSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// Where passwords are in a connection string or in a message quoting one, as [begin, end)
// spans: the value of each password=... or sslpassword=... (single-quoted with \-escapes, or up
// to a space; in a URL query, up to '&'), and the part after ':' in a URL's user info
// ("scheme://user:pw@host").
std::vector<std::pair<size_t, size_t>> secretSpans(std::string_view text) {
  std::vector<std::pair<size_t, size_t>> spans;
  constexpr std::string_view kKey = "password";
  for (size_t at = 0; at < text.size(); ++at) {
    if (!startsWithNoCase(text, at, kKey)) {
      continue;
    }
    const size_t key_begin = at >= 3 && startsWithNoCase(text, at - 3, "ssl") ? at - 3 : at;
    const char before = key_begin == 0 ? ' ' : text[key_begin - 1];
    const bool in_query = before == '?' || before == '&';
    if (!in_query && !isSpace(before) && before != '"' && before != '\'') {
      continue;
    }
    size_t p = at + kKey.size();
    while (p < text.size() && isSpace(text[p])) {
      ++p;
    }
    if (p == text.size() || text[p] != '=') {
      continue;
    }
    ++p;
    while (p < text.size() && isSpace(text[p])) {
      ++p;
    }
    const size_t begin = p;
    if (p < text.size() && text[p] == '\'' && !in_query) {
      for (++p; p < text.size() && text[p] != '\''; ++p) {
        if (text[p] == '\\' && p + 1 < text.size()) {
          ++p;
        }
      }
      p = std::min(p + 1, text.size());
    } else {
      while (p < text.size() && !isSpace(text[p]) && !(in_query && text[p] == '&')) {
        ++p;
      }
    }
    if (p > begin) {
      spans.emplace_back(begin, p);
    }
    at = p - 1;
  }
  for (size_t at = text.find("://"); at != std::string_view::npos; at = text.find("://", at + 3)) {
    const size_t start = at + 3;
    size_t end = start;
    while (end < text.size() &&
           std::string_view("/?#\"' \t\n").find(text[end]) == std::string_view::npos) {
      ++end;
    }
    const size_t user_end = text.substr(start, end - start).rfind('@');
    if (user_end == std::string_view::npos) {
      continue;
    }
    const size_t colon = text.substr(start, user_end).find(':');
    if (colon != std::string_view::npos && colon + 1 < user_end) {
      spans.emplace_back(start + colon + 1, start + user_end);
    }
  }
  return spans;
}

// `message` with every occurrence of each secret replaced by "***".
std::string scrub(std::string message, const std::vector<std::string>& secrets) {
  for (const std::string& secret : secrets) {
    if (secret.empty()) {
      continue;
    }
    for (size_t at = message.find(secret); at != std::string::npos;
         at = message.find(secret, at + 3)) {
      message.replace(at, secret.size(), "***");
    }
  }
  return message;
}

// The passwords `conninfo` holds, as written and (when libpq can parse it) as libpq reads them,
// to scrub from libpq's messages whatever their form.
std::vector<std::string> secretsOf(const std::string& conninfo) {
  std::vector<std::string> secrets;
  for (const auto& [begin, end] : secretSpans(conninfo)) {
    secrets.push_back(conninfo.substr(begin, end - begin));
  }
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
  PQfreemem(error);
  if (options != nullptr) {
    for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
      if (o->val != nullptr && (std::strcmp(o->keyword, "password") == 0 ||
                                std::strcmp(o->keyword, "sslpassword") == 0)) {
        secrets.emplace_back(o->val);
      }
    }
    PQconninfoFree(options);
  }
  // Longest first, so a password holding another is replaced whole.
  std::sort(secrets.begin(), secrets.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return secrets;
}

// "host=... port=... user=... dbname=..." of a connection (what libpq used, defaults included).
std::string describe(const PGconn* conn) {
  auto field = [](const char* value) {
    return std::string(value == nullptr || *value == '\0' ? "(default)" : value);
  };
  return "host=" + field(PQhost(conn)) + " port=" + field(PQport(conn)) +
         " user=" + field(PQuser(conn)) + " dbname=" + field(PQdb(conn));
}

core::StatusCode codeForSqlState(std::string_view state) {
  using core::StatusCode;
  if (state.size() != 5) {
    return StatusCode::kInternal;
  }
  const std::string_view cls = state.substr(0, 2);
  for (std::string_view s : {"42710", "42P04", "42P06", "42P07", "42723", "23505"}) {
    if (state == s) {
      return StatusCode::kAlreadyExists;
    }
  }
  for (std::string_view s : {"42704", "42P01", "42883", "3D000", "3F000"}) {
    if (state == s) {
      return StatusCode::kNotFound;
    }
  }
  for (std::string_view s : {"57P01", "57P02", "57P03", "57014", "40001", "40P01"}) {
    if (state == s) {
      return StatusCode::kUnavailable;
    }
  }
  if (state == "42501") {
    return StatusCode::kPermissionDenied;
  }
  if (state == "2BP01" || cls == "23" || cls == "25" || cls == "55") {
    return StatusCode::kFailedPrecondition;
  }
  if (cls == "28") {
    return StatusCode::kUnauthenticated;
  }
  if (cls == "08") {
    return StatusCode::kUnavailable;
  }
  if (cls == "53") {
    return StatusCode::kResourceExhausted;
  }
  if (cls == "22" || cls == "42") {
    return StatusCode::kInvalidArgument;
  }
  return StatusCode::kInternal;
}

void dropNotice(void* /*arg*/, const char* /*message*/) {}

core::Status rejectNul(std::string_view text, std::string_view what) {
  if (text.find('\0') != std::string_view::npos) {
    return core::invalidArgument("postgres: " + std::string(what) + " holds a NUL byte");
  }
  return core::Status::ok();
}

}  // namespace

core::Result<std::unique_ptr<PgConnection>> PgConnection::connect(
    const std::string& conninfo, std::chrono::milliseconds timeout) {
  TESSERA_RETURN_IF_ERROR(rejectNul(conninfo, "the connection string"));
  const std::vector<std::string> secrets = secretsOf(conninfo);
  {
    char* error = nullptr;
    PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
    if (options == nullptr) {
      std::string message = error == nullptr ? "out of memory" : oneLine(error);
      PQfreemem(error);
      return core::invalidArgument("postgres: malformed connection string '" +
                                   redactConninfo(conninfo) +
                                   "': " + redactConninfo(scrub(message, secrets)));
    }
    PQconninfoFree(options);
  }

  // The string goes in as an expanded dbname; the keywords after it override what it says.
  const char* const keywords[] = {"dbname", "client_encoding", nullptr};
  const char* const values[] = {conninfo.c_str(), "UTF8", nullptr};
  PGconn* conn = PQconnectStartParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) {
    return core::internalError("postgres: out of memory starting a connection");
  }
  auto fail = [&](const std::string& why) -> core::Status {
    std::string message = "postgres: cannot connect to " + describe(conn) + ": " + why;
    PQfinish(conn);
    return core::unavailable(redactConninfo(scrub(std::move(message), secrets)));
  };
  if (PQstatus(conn) == CONNECTION_BAD) {
    return fail(oneLine(PQerrorMessage(conn)));
  }
  // PQconnectPoll's protocol: start as if it had asked to write, wait for what it asks next.
  const Clock::time_point deadline = Clock::now() + timeout;
  PostgresPollingStatusType state = PGRES_POLLING_WRITING;
  while (state != PGRES_POLLING_OK) {
    if (state == PGRES_POLLING_FAILED) {
      return fail(oneLine(PQerrorMessage(conn)));
    }
    // Rounded up: poll's milliseconds must not end the wait before the deadline.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      return fail("no answer within " + std::to_string(timeout.count()) + " ms");
    }
    pollfd fd{};
    fd.fd = PQsocket(conn);
    fd.events = state == PGRES_POLLING_READING ? POLLIN : POLLOUT;
    const int ready = poll(&fd, 1, static_cast<int>(left));
    if (ready < 0 && errno != EINTR) {
      return fail(std::string("poll: ") + std::strerror(errno));
    }
    if (ready > 0) {
      state = PQconnectPoll(conn);
    }
  }
  PQsetNoticeProcessor(conn, dropNotice, nullptr);
  return std::unique_ptr<PgConnection>(new PgConnection(conn, conninfo, timeout));
}

PgConnection::PgConnection(PGconn* conn, std::string conninfo, std::chrono::milliseconds timeout)
    : conn_(conn), conninfo_(std::move(conninfo)), timeout_(timeout) {}

PgConnection::~PgConnection() { PQfinish(conn_); }

bool PgConnection::ok() const { return PQstatus(conn_) == CONNECTION_OK; }

core::Status PgConnection::reconnect() {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<PgConnection> fresh, connect(conninfo_, timeout_));
  std::swap(conn_, fresh->conn_);
  return core::Status::ok();
}

core::Result<PgResult> PgConnection::exec(const std::string& sql,
                                          const std::vector<std::string>& params) {
  TESSERA_RETURN_IF_ERROR(rejectNul(sql, "the SQL"));
  std::vector<const char*> values;
  values.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(rejectNul(params[i], "parameter $" + std::to_string(i + 1)));
    values.push_back(params[i].c_str());
  }
  if (!ok()) {
    return core::unavailable("postgres: the connection to " + describe(conn_) +
                             " is down; reconnect");
  }
  return finish(PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()),
                             /*paramTypes=*/nullptr, values.data(), /*paramLengths=*/nullptr,
                             /*paramFormats=*/nullptr, /*resultFormat=*/0));
}

core::Result<PgResult> PgConnection::execScript(const std::string& sql) {
  TESSERA_RETURN_IF_ERROR(rejectNul(sql, "the SQL"));
  if (!ok()) {
    return core::unavailable("postgres: the connection to " + describe(conn_) +
                             " is down; reconnect");
  }
  return finish(PQexec(conn_, sql.c_str()));
}

core::Result<PgResult> PgConnection::finish(PGresult* raw) {
  const ResultPtr result(raw, &PQclear);
  auto lost = [&](const std::string& why) {
    return core::unavailable("postgres: connection to " + describe(conn_) + " lost: " + why);
  };
  if (result == nullptr) {
    const std::string why = oneLine(PQerrorMessage(conn_));
    if (!ok()) {
      return lost(why);
    }
    return core::internalError("postgres: " + why);
  }
  switch (PQresultStatus(result.get())) {
    case PGRES_COMMAND_OK:
    case PGRES_TUPLES_OK:
    case PGRES_EMPTY_QUERY:
      break;
    case PGRES_COPY_IN:
      // Ends the COPY so the connection is usable again.
      PQputCopyEnd(conn_, "COPY is not supported by tessera::secrets::PgConnection");
      while (PGresult* rest = PQgetResult(conn_)) {
        PQclear(rest);
      }
      return core::invalidArgument("postgres: COPY is not supported");
    case PGRES_COPY_OUT:
      for (char* row = nullptr; PQgetCopyData(conn_, &row, 0) > 0; row = nullptr) {
        PQfreemem(row);
      }
      while (PGresult* rest = PQgetResult(conn_)) {
        PQclear(rest);
      }
      return core::invalidArgument("postgres: COPY is not supported");
    default: {
      const char* state = PQresultErrorField(result.get(), PG_DIAG_SQLSTATE);
      const char* primary = PQresultErrorField(result.get(), PG_DIAG_MESSAGE_PRIMARY);
      const std::string why =
          oneLine(primary != nullptr ? primary : PQresultErrorMessage(result.get()));
      if (!ok()) {
        return lost(state != nullptr ? std::string(state) + " " + why : why);
      }
      if (state == nullptr) {
        return core::internalError("postgres: " + why);
      }
      return core::Status(codeForSqlState(state), "postgres: " + std::string(state) + " " + why);
    }
  }
  PgResult out;
  const int columns = PQnfields(result.get());
  const int rows = PQntuples(result.get());
  out.columns.reserve(columns);
  for (int c = 0; c < columns; ++c) {
    out.columns.emplace_back(PQfname(result.get(), c));
  }
  out.rows.reserve(rows);
  for (int r = 0; r < rows; ++r) {
    std::vector<std::optional<std::string>>& row = out.rows.emplace_back();
    row.reserve(columns);
    for (int c = 0; c < columns; ++c) {
      if (PQgetisnull(result.get(), r, c) != 0) {
        row.emplace_back(std::nullopt);
      } else {
        row.emplace_back(std::string(PQgetvalue(result.get(), r, c),
                                     static_cast<size_t>(PQgetlength(result.get(), r, c))));
      }
    }
  }
  const std::string_view affected = PQcmdTuples(result.get());
  std::from_chars(affected.data(), affected.data() + affected.size(), out.affected_rows);
  out.command_tag = PQcmdStatus(result.get());
  return out;
}

core::Result<std::string> PgConnection::encryptPassword(const std::string& password,
                                                        const std::string& role) {
  TESSERA_RETURN_IF_ERROR(rejectNul(password, "the password"));
  TESSERA_RETURN_IF_ERROR(rejectNul(role, "the role name"));
  char* verifier = PQencryptPasswordConn(conn_, password.c_str(), role.c_str(), "scram-sha-256");
  if (verifier == nullptr) {
    return core::internalError("postgres: cannot hash a password for role '" + role +
                               "': " + oneLine(PQerrorMessage(conn_)));
  }
  std::string out = verifier;
  PQfreemem(verifier);
  return out;
}

core::Result<std::string> quoteIdent(std::string_view name) {
  TESSERA_RETURN_IF_ERROR(rejectNul(name, "identifier"));
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') {
      out.push_back('"');
    }
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

core::Result<std::string> quoteLiteral(std::string_view text) {
  TESSERA_RETURN_IF_ERROR(rejectNul(text, "string literal"));
  std::string out;
  if (text.find('\\') != std::string_view::npos) {
    out.push_back('E');
  }
  out.push_back('\'');
  for (char c : text) {
    if (c == '\'' || c == '\\') {
      out.push_back(c);
    }
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

std::string redactConninfo(std::string_view conninfo) {
  std::vector<std::pair<size_t, size_t>> spans = secretSpans(conninfo);
  std::sort(spans.begin(), spans.end());
  std::string out;
  size_t at = 0;
  for (const auto& [begin, end] : spans) {
    if (begin < at) {
      continue;  // Inside one already masked.
    }
    out.append(conninfo.substr(at, begin - at));
    out += "***";
    at = end;
  }
  out.append(conninfo.substr(at));
  return out;
}

}  // namespace tessera::secrets
