// Thin RAII wrappers over the SQLite C API for the SQLite store: a connection (`Db`) and a
// prepared statement (`Stmt`). Every failure becomes a Status whose message says what was being
// done, on which file, and SQLite's own words:
//   "sqlite store /var/lib/tessera/store.db: committing 12 writes: disk I/O error"
//
// Neither class is thread-safe: a connection and its statements are used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace tessera::store::internal {

class Db {
 public:
  // Opens (creating if `create`) the database at `path` with a busy timeout, in multi-thread
  // mode (the caller serialises use of the connection).
  static core::Result<std::unique_ptr<Db>> open(const std::string& path, bool create,
                                                int busy_timeout_ms);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs one or more statements that return no rows (PRAGMA, BEGIN, COMMIT, DDL).
  core::Status exec(const char* sql, std::string_view doing);

  // The Status for SQLite result `rc` while `doing` something.
  core::Status error(int rc, std::string_view doing) const;

  sqlite3* handle() { return db_; }
  const std::string& path() const { return path_; }

 private:
  Db(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
};

// A prepared statement, reset and unbound after every use by `Stmt::Use`.
class Stmt {
 public:
  static core::Result<std::unique_ptr<Stmt>> prepare(Db& db, std::string_view sql);
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  // One execution: bind, step through the rows, and on destruction reset the statement.
  //
  //   Stmt::Use q(*get_kv_);
  //   q.bind(1, key);
  //   TESSERA_ASSIGN_OR_RETURN(bool row, q.step("reading a key"));
  class Use {
   public:
    explicit Use(Stmt& stmt) : stmt_(stmt) {}
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

    // Parameters are 1-based; byte strings are bound as BLOBs (compared bytewise).
    void bind(int index, int64_t value);
    void bind(int index, std::string_view bytes);
    void bindText(int index, std::string_view text);
    void bindNull(int index);

    // Advances to the next row: true if there is one, false when done.
    core::Result<bool> step(std::string_view doing);
    // Runs a statement that returns no rows.
    core::Status run(std::string_view doing);

    // Columns are 0-based.
    int64_t integer(int column) const;
    std::string bytes(int column) const;
    bool isNull(int column) const;

   private:
    Stmt& stmt_;
  };

 private:
  Stmt(Db& db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}

  Db& db_;
  sqlite3_stmt* stmt_;
};

}  // namespace tessera::store::internal
