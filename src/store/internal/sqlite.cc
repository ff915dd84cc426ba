#include "store/internal/sqlite.h"

#include <sqlite3.h>

#include <string>

namespace tessera::store::internal {
namespace {

core::StatusCode codeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PROTOCOL:
    case SQLITE_FULL:  // The disk: the server's trouble (503), not the caller's.
      return core::StatusCode::kUnavailable;
    case SQLITE_NOMEM:
      return core::StatusCode::kResourceExhausted;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return core::StatusCode::kFailedPrecondition;
    default:
      return core::StatusCode::kInternal;
  }
}

}  // namespace

core::Result<std::unique_ptr<Db>> Db::open(const std::string& path, bool create,
                                           int busy_timeout_ms) {
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return core::Status(codeFor(rc), "sqlite store " + path + ": opening the database: " + message);
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_timeout_ms);
  return std::unique_ptr<Db>(new Db(db, path));
}

Db::~Db() { sqlite3_close_v2(db_); }

core::Status Db::exec(const char* sql, std::string_view doing) {
  char* message = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &message);
  if (rc == SQLITE_OK) {
    return core::Status::ok();
  }
  std::string text = message != nullptr ? message : sqlite3_errstr(rc);
  sqlite3_free(message);
  return core::Status(codeFor(rc),
                      "sqlite store " + path_ + ": " + std::string(doing) + ": " + text);
}

core::Status Db::error(int rc, std::string_view doing) const {
  std::string text = sqlite3_errmsg(db_);
  std::string code = sqlite3_errstr(rc);
  if (text != code) {
    text += " (" + code + ")";
  }
  return core::Status(codeFor(rc),
                      "sqlite store " + path_ + ": " + std::string(doing) + ": " + text);
}

core::Result<std::unique_ptr<Stmt>> Stmt::prepare(Db& db, std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db.handle(), sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    return db.error(rc, "preparing '" + std::string(sql) + "'");
  }
  return std::unique_ptr<Stmt>(new Stmt(db, stmt));
}

Stmt::~Stmt() { sqlite3_finalize(stmt_); }

Stmt::Use::~Use() {
  sqlite3_reset(stmt_.stmt_);
  sqlite3_clear_bindings(stmt_.stmt_);
}

void Stmt::Use::bind(int index, int64_t value) { sqlite3_bind_int64(stmt_.stmt_, index, value); }

void Stmt::Use::bind(int index, std::string_view bytes) {
  // SQLITE_STATIC: the caller keeps `bytes` alive until the statement is reset. A zero-length
  // blob still binds as a BLOB (not NULL) given a non-null pointer.
  static constexpr char kEmpty = 0;
  sqlite3_bind_blob64(stmt_.stmt_, index, bytes.empty() ? &kEmpty : bytes.data(), bytes.size(),
                      SQLITE_STATIC);
}

void Stmt::Use::bindText(int index, std::string_view text) {
  sqlite3_bind_text64(stmt_.stmt_, index, text.data(), text.size(), SQLITE_STATIC, SQLITE_UTF8);
}

void Stmt::Use::bindNull(int index) { sqlite3_bind_null(stmt_.stmt_, index); }

core::Result<bool> Stmt::Use::step(std::string_view doing) {
  int rc = sqlite3_step(stmt_.stmt_);
  if (rc == SQLITE_ROW) {
    return true;
  }
  if (rc == SQLITE_DONE) {
    return false;
  }
  return stmt_.db_.error(rc, doing);
}

core::Status Stmt::Use::run(std::string_view doing) {
  int rc = sqlite3_step(stmt_.stmt_);
  if (rc == SQLITE_DONE || rc == SQLITE_ROW) {
    return core::Status::ok();
  }
  return stmt_.db_.error(rc, doing);
}

int64_t Stmt::Use::integer(int column) const { return sqlite3_column_int64(stmt_.stmt_, column); }

std::string Stmt::Use::bytes(int column) const {
  const void* data = sqlite3_column_blob(stmt_.stmt_, column);
  int size = sqlite3_column_bytes(stmt_.stmt_, column);
  return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), size);
}

bool Stmt::Use::isNull(int column) const {
  return sqlite3_column_type(stmt_.stmt_, column) == SQLITE_NULL;
}

}  // namespace tessera::store::internal
