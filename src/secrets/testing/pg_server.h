// A throwaway PostgreSQL server for tests: a fresh cluster in a temp dir, listening on
// 127.0.0.1 only, on a free port, with SCRAM passwords for every connection (no trust), gone
// with the object. Test-only: compile testing/pg_server.cc into the test target.
//
//   std::string log;
//   auto server = PgTestServer::start(&log);
//   ASSERT_TRUE(server.isOk()) << server.status().message() << "\n" << log;
//   auto db = PgConnection::connect((*server)->superuserConninfo(), 5s);
//
// Binaries: the directory `pg_config --bindir` names, else the newest
// /usr/lib/postgresql/<version>/bin, that has initdb and postgres. With none, start fails
// saying to run scripts/bootstrap: a test that needs the server fails rather than skips.
// As root (PostgreSQL refuses to run as root), initdb and postgres run as the user `postgres`,
// or `nobody` when there is none, dropped to in the forked child; the temp dir is chowned to it
// and must be reachable by it ($TMPDIR, else /tmp).
// The server is fsync=off, synchronous_commit=off: fast, and lost on a crash, which is fine
// here. If the test process dies, the server gets SIGINT (fast shutdown) from the kernel; the
// temp dir then stays behind.
//
// Thread-safety: start and destroy from one thread (the server is stopped when the thread that
// started it exits); connect to it from any.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "core/status.h"

namespace tessera::secrets {

class PgTestServer {
 public:
  // A port with nothing listening on 127.0.0.1 (the kernel's pick, released again), for tests
  // of connection failures.
  static uint16_t closedPort();
  static constexpr const char* kAdminUser = "tessera_admin";

  // Creates the cluster and starts the server, waiting (up to about 30 s) until it accepts
  // connections and the superuser can log in. If `log` is not null, appends what was done
  // (binaries, user, directory, port) and, on failure, the output of the step that failed; the
  // returned error also ends with the tail of the server's log.
  static core::Result<std::unique_ptr<PgTestServer>> start(std::string* log);
  // One server for the whole test binary, started on first use (a start takes about two seconds)
  // and stopped at exit. Null if it could not start; *error then says why, with the start's log.
  static PgTestServer* shared(std::string* error);
  // Stops the server (SIGINT, a fast shutdown; SIGKILL if it is not gone within 10 s) and
  // removes the temp dir.
  ~PgTestServer();
  PgTestServer(const PgTestServer&) = delete;
  PgTestServer& operator=(const PgTestServer&) = delete;

  uint16_t port() const { return port_; }
  const std::string& adminPassword() const { return password_; }
  // "host=127.0.0.1 port=... user=tessera_admin password=... dbname=postgres sslmode=disable".
  std::string superuserConninfo() const;
  // The same for another role; values are quoted as needed, so they may hold spaces and quotes.
  std::string conninfo(const std::string& user, const std::string& password,
                       const std::string& dbname = "postgres") const;
  // The server's log so far (startup messages, errors, statements that failed).
  std::string serverLog() const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  PgTestServer() = default;
  core::Status startPostgres(std::string* log);
  void stop();

  std::filesystem::path bindir_;
  std::filesystem::path dir_;  // The temp dir: data/, the Unix socket, server.log.
  bool drop_privileges_ = false;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  std::string password_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace tessera::secrets
