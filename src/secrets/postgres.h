// A small PostgreSQL client over libpq, for dynamic database credentials (issue #6): create a
// role with a password and VALID UNTIL, later DROP ROLE.
//
//   TESSERA_ASSIGN_OR_RETURN(auto db, PgConnection::connect(conninfo, 5s));
//   TESSERA_ASSIGN_OR_RETURN(std::string role, quoteIdent("v-team-1-x7f"));
//   TESSERA_ASSIGN_OR_RETURN(std::string verifier, db->encryptPassword(password, "v-team-1-x7f"));
//   TESSERA_ASSIGN_OR_RETURN(std::string pw, quoteLiteral(verifier));
//   TESSERA_RETURN_IF_ERROR(db->exec("CREATE ROLE " + role + " LOGIN PASSWORD " + pw +
//                                    " VALID UNTIL '2030-01-01 00:00:00+00'").status());
//   TESSERA_ASSIGN_OR_RETURN(PgResult r, db->exec("SELECT $1::int + 1", {"41"}));  // "42"
//
// Errors: connection failures are unavailable with libpq's message; SQL errors carry the
// SQLSTATE and the server's primary message ("postgres: 42710 role \"x\" already exists") with a
// code mapped from the SQLSTATE: already exists (42710, 42P04, 23505, ...), not found (42704,
// 42P01, 3D000, ...), permission denied (42501), unauthenticated (class 28), failed precondition
// (2BP01, classes 23, 25, 55), invalid argument (classes 22, 42), resource exhausted (class 53),
// unavailable (class 08, 57P01-57P03, 57014, 40001, 40P01: worth retrying), else internal. A lost
// connection is unavailable: callers `reconnect()` and retry. Server NOTICEs are dropped. No
// error message ever holds the password of a connection string.
//
// Thread-safety: a PgConnection is used by one thread at a time (one connection per thread);
// separate connections may be used from separate threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

// libpq's PGconn and PGresult, kept out of this header.
struct pg_conn;
struct pg_result;

namespace tessera::secrets {

// What a statement returned, all in text format (as psql shows it; bytea comes hex-encoded).
struct PgResult {
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> rows;  // nullopt for SQL NULL.
  // Rows inserted, updated, deleted, selected, ... (PQcmdTuples); 0 for statements that report
  // none, such as CREATE ROLE.
  int64_t affected_rows = 0;
  std::string command_tag;  // "CREATE ROLE", "SELECT 1", ...
};

class PgConnection {
 public:
  // Connects with a libpq connection string ("host=... port=... user=... password=...
  // dbname=...") or URL ("postgresql://user:pass@host:port/db"). The whole connection attempt,
  // all hosts of a multi-host string together, is bounded by `timeout` (a connect_timeout in the
  // string is ignored). The session uses client_encoding UTF8, which quoteLiteral relies on.
  // Unavailable when the server cannot be reached, refuses the login or the timeout passes;
  // invalid argument for a malformed string. Messages name host, port, user and database but
  // never the password. Host name lookup happens outside the timeout (libpq resolves
  // synchronously): give addresses where that matters. Statements have no timeout of their own;
  // put one in the string if needed ("options='-c statement_timeout=5000'").
  static core::Result<std::unique_ptr<PgConnection>> connect(const std::string& conninfo,
                                                             std::chrono::milliseconds timeout);
  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // Runs ONE statement with PQexecParams (the extended protocol): `params` bind to $1, $2, ...
  // as text, with types inferred by the server ("$1::int"). Utility statements such as CREATE
  // ROLE take no parameters: build them with quoteIdent/quoteLiteral. Invalid argument if the
  // SQL or a parameter holds a NUL byte.
  core::Result<PgResult> exec(const std::string& sql, const std::vector<std::string>& params = {});
  // Runs one or more `;`-separated statements with PQexec (the simple protocol, no parameters),
  // as one implicit transaction unless they contain BEGIN/COMMIT. Returns what the last
  // statement returned; stops at the first error.
  core::Result<PgResult> execScript(const std::string& sql);

  // A SCRAM-SHA-256 verifier of `password` for `role`, computed here (PQencryptPasswordConn), to
  // give to CREATE/ALTER ROLE ... PASSWORD so the plaintext never reaches the server or its
  // statement log.
  core::Result<std::string> encryptPassword(const std::string& password, const std::string& role);

  // Whether the connection is up as far as libpq knows (it notices a loss on the next exec).
  bool ok() const;
  // Replaces the connection with a fresh one to the same server, with the same timeout.
  core::Status reconnect();

 private:
  PgConnection(pg_conn* conn, std::string conninfo, std::chrono::milliseconds timeout);
  // Turns what PQexec/PQexecParams returned into a PgResult or a Status; takes ownership.
  core::Result<PgResult> finish(pg_result* result);

  pg_conn* conn_;
  std::string conninfo_;  // Holds the password: never put it in a message.
  std::chrono::milliseconds timeout_;
};

// `name` as a PostgreSQL identifier: in double quotes, with each " doubled
// (quoteIdent("a\"b") == "\"a\"\"b\""). Invalid argument if it holds a NUL byte.
core::Result<std::string> quoteIdent(std::string_view name);

// `text` as a PostgreSQL string literal: in single quotes with each ' doubled; if it holds a
// backslash, the E'...' form with each backslash doubled too (as PQescapeLiteral), so it reads
// the same whatever standard_conforming_strings is. Invalid argument if it holds a NUL byte.
// Byte-wise, which is safe for UTF-8 text (what PgConnection sessions use) but not for client
// encodings such as SJIS or GBK, where a ' or \ byte can be part of a character.
core::Result<std::string> quoteLiteral(std::string_view text);

// `conninfo` with the password masked, in key=value strings (password=..., quoted or not) and
// URLs ("postgresql://user:***@host", "?password=***"), sslpassword too; for messages and logs.
std::string redactConninfo(std::string_view conninfo);

}  // namespace tessera::secrets
