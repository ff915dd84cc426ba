#include "secrets/testing/pg_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "core/strings.h"
#include "core/testing/loopback_port.h"
#include "secrets/postgres.h"

namespace tessera::secrets {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kStartTimeout = 30s;
constexpr auto kInitdbTimeout = 60s;
constexpr auto kStopTimeout = 10s;
constexpr auto kPollEvery = 20ms;
constexpr int kPortAttempts = 3;

void note(std::string* log, const std::string& line) {
  if (log != nullptr) {
    *log += line;
    *log += '\n';
  }
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The last `lines` lines of `text`.
std::string tail(const std::string& text, int lines) {
  size_t at = text.size();
  while (at > 0 && lines >= 0) {
    at = text.rfind('\n', at - 1);
    if (at == std::string::npos) {
      return text;
    }
    --lines;
  }
  return text.substr(at + 1);
}

// The output of `command` (through the shell), trimmed; empty if it fails.
std::string commandOutput(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return "";
  }
  std::string out;
  std::array<char, 256> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) {
    out.append(buf.data(), n);
  }
  if (pclose(pipe) != 0) {
    return "";
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) {
    out.pop_back();
  }
  return out;
}

bool hasServerBinaries(const fs::path& dir) {
  return access((dir / "initdb").c_str(), X_OK) == 0 &&
         access((dir / "postgres").c_str(), X_OK) == 0;
}

// "15" < "16", "9.6" < "10": the dotted numbers of a version folder name.
std::vector<int> versionOf(const std::string& name) {
  std::vector<int> parts;
  std::istringstream in(name);
  for (std::string part; std::getline(in, part, '.');) {
    parts.push_back(std::atoi(part.c_str()));
  }
  return parts;
}

core::Result<fs::path> findBindir(std::string* log) {
  std::vector<fs::path> candidates;
  const std::string from_pg_config = commandOutput("pg_config --bindir 2>/dev/null");
  if (!from_pg_config.empty()) {
    candidates.emplace_back(from_pg_config);
  }
  std::error_code ec;
  std::vector<std::string> versions;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    versions.push_back(entry.path().filename().string());
  }
  std::sort(versions.begin(), versions.end(),
            [](const std::string& a, const std::string& b) { return versionOf(a) > versionOf(b); });
  for (const std::string& v : versions) {
    candidates.push_back(fs::path("/usr/lib/postgresql") / v / "bin");
  }
  for (const fs::path& dir : candidates) {
    if (hasServerBinaries(dir)) {
      note(log, "PgTestServer: binaries in " + dir.string());
      return dir;
    }
  }
  return core::failedPrecondition(
      "PgTestServer: no PostgreSQL server binaries (initdb, postgres) in `pg_config --bindir` (" +
      (from_pg_config.empty() ? std::string("no pg_config") : from_pg_config) +
      ") or /usr/lib/postgresql/*/bin: run scripts/bootstrap to install the postgresql package");
}

std::string randomPassword() {
  std::array<unsigned char, 18> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    return "";
  }
  return core::hexEncode(bytes.data(), bytes.size());
}

// A port free on 127.0.0.1 right now, outside the range outgoing connections draw from; postgres
// may still lose it to another process before it binds, which start retries.
core::Result<uint16_t> freePort() {
  const uint16_t port = core::testing::loopbackPortOutsideEphemeralRange();
  if (port == 0) {
    return core::unavailable("PgTestServer: no free port on 127.0.0.1");
  }
  return port;
}

struct Spawn {
  std::vector<std::string> argv;
  fs::path output;  // stdout and stderr go here (appended).
  fs::path cwd;
  bool drop_privileges = false;
  uid_t uid = 0;
  gid_t gid = 0;
  int parent_death_signal = SIGKILL;
};

// Starts the program; everything the child needs is made before fork, so that the child only
// makes system calls (the test process may have threads).
core::Result<pid_t> spawn(const Spawn& s) {
  const int out = open(s.output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (out < 0) {
    return core::unavailable("PgTestServer: cannot open " + s.output.string() + ": " +
                             std::strerror(errno));
  }
  if (s.drop_privileges && fchown(out, s.uid, s.gid) != 0) {
    const std::string why = std::strerror(errno);
    close(out);
    return core::unavailable("PgTestServer: cannot chown " + s.output.string() + ": " + why);
  }
  std::vector<std::string> strings = s.argv;
  std::vector<char*> argv;
  argv.reserve(strings.size() + 1);
  for (std::string& a : strings) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  // A small fixed environment: no PG* variables of the caller, the same locale and time zone
  // everywhere (initdb writes TZ into postgresql.conf).
  std::vector<std::string> env_strings = {"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C", "LANG=C",
                                          "TZ=UTC"};
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (std::string& e : env_strings) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  const std::string cwd = s.cwd.string();
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    close(out);
    return core::unavailable("PgTestServer: fork: " + why);
  }
  if (pid == 0) {
    const int null_in = open("/dev/null", O_RDONLY);
    if (null_in < 0 || dup2(null_in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 ||
        dup2(out, STDERR_FILENO) < 0) {
      _exit(126);
    }
    if (s.drop_privileges) {
      const gid_t gid = s.gid;
      if (setgroups(1, &gid) != 0 || setgid(s.gid) != 0 || setuid(s.uid) != 0) {
        constexpr std::string_view kMsg = "PgTestServer: cannot drop privileges\n";
        [[maybe_unused]] ssize_t n = write(STDERR_FILENO, kMsg.data(), kMsg.size());
        _exit(126);
      }
    }
    // After setuid, which clears it: the server goes when the test process does.
    prctl(PR_SET_PDEATHSIG, s.parent_death_signal);
    if (getppid() != parent || chdir(cwd.c_str()) != 0) {
      _exit(126);
    }
    execve(argv[0], argv.data(), envp.data());
    constexpr std::string_view kMsg = "PgTestServer: execve failed\n";
    [[maybe_unused]] ssize_t n = write(STDERR_FILENO, kMsg.data(), kMsg.size());
    _exit(127);
  }
  close(out);
  return pid;
}

// Whether `pid` has exited (reaping it), with its status.
std::optional<int> exited(pid_t pid) {
  int status = 0;
  const pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == pid || (r < 0 && errno == ECHILD)) {
    return status;
  }
  return std::nullopt;
}

std::string describeExit(int status) {
  if (WIFEXITED(status)) {
    return "exit code " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    return "signal " + std::to_string(WTERMSIG(status));
  }
  return "status " + std::to_string(status);
}

// Runs the program to its end, within `timeout`.
core::Status run(const Spawn& s, std::chrono::seconds timeout, std::string* log) {
  TESSERA_ASSIGN_OR_RETURN(const pid_t pid, spawn(s));
  const Clock::time_point deadline = Clock::now() + timeout;
  std::optional<int> status;
  while (!(status = exited(pid))) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(kPollEvery);
  }
  if (status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) {
    return core::Status::ok();
  }
  const std::string output = readFile(s.output);
  note(log, output);
  return core::unavailable(
      "PgTestServer: " + fs::path(s.argv[0]).filename().string() + " failed (" +
      (status ? describeExit(*status) : "no end within " + std::to_string(timeout.count()) + " s") +
      "); its output ends:\n" + tail(output, 20));
}

// `value` for a libpq key=value string: as it is if plain, else in single quotes with quotes
// and backslashes escaped by a backslash.
std::string conninfoValue(const std::string& value) {
  const bool plain = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
  });
  if (plain) {
    return value;
  }
  std::string out = "'";
  for (char c : value) {
    if (c == '\'' || c == '\\') {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

core::Status writeFile(const fs::path& path, const std::string& text, bool chown_to, uid_t uid,
                       gid_t gid) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      return core::unavailable("PgTestServer: cannot write " + path.string());
    }
  }
  if (chmod(path.c_str(), 0600) != 0 || (chown_to && chown(path.c_str(), uid, gid) != 0)) {
    return core::unavailable("PgTestServer: cannot set the owner and mode of " + path.string() +
                             ": " + std::strerror(errno));
  }
  return core::Status::ok();
}

}  // namespace

core::Result<std::unique_ptr<PgTestServer>> PgTestServer::start(std::string* log) {
  std::unique_ptr<PgTestServer> server(new PgTestServer());
  TESSERA_ASSIGN_OR_RETURN(server->bindir_, findBindir(log));

  if (geteuid() == 0) {
    // PostgreSQL refuses to run as root.
    for (const char* name : {"postgres", "nobody"}) {
      if (const passwd* pw = getpwnam(name)) {
        server->drop_privileges_ = true;
        server->uid_ = pw->pw_uid;
        server->gid_ = pw->pw_gid;
        note(log, std::string("PgTestServer: running as root, so the server runs as ") + name);
        break;
      }
    }
    if (!server->drop_privileges_) {
      return core::failedPrecondition(
          "PgTestServer: running as root and there is neither a 'postgres' nor a 'nobody' user "
          "to run PostgreSQL as (it refuses root)");
    }
  }

  std::error_code ec;
  std::string pattern = (fs::temp_directory_path(ec) / "tessera-pg-XXXXXX").string();
  if (ec || mkdtemp(pattern.data()) == nullptr) {
    return core::unavailable("PgTestServer: cannot make a temp dir like " + pattern + ": " +
                             (ec ? ec.message() : std::strerror(errno)));
  }
  server->dir_ = pattern;
  note(log, "PgTestServer: directory " + pattern);
  if (server->drop_privileges_ && chown(pattern.c_str(), server->uid_, server->gid_) != 0) {
    return core::unavailable("PgTestServer: cannot chown " + pattern + ": " + std::strerror(errno));
  }

  server->password_ = randomPassword();
  if (server->password_.empty()) {
    return core::unavailable("PgTestServer: no randomness for the admin password");
  }
  const fs::path pwfile = server->dir_ / "pwfile";
  TESSERA_RETURN_IF_ERROR(writeFile(pwfile, server->password_ + "\n", server->drop_privileges_,
                                    server->uid_, server->gid_));
  Spawn initdb;
  initdb.argv = {(server->bindir_ / "initdb").string(),
                 "--pgdata=" + (server->dir_ / "data").string(),
                 std::string("--username=") + kAdminUser,
                 "--pwfile=" + pwfile.string(),
                 "--auth-local=scram-sha-256",
                 "--auth-host=scram-sha-256",
                 "--encoding=UTF8",
                 "--locale=C",
                 "--no-sync"};
  initdb.output = server->dir_ / "initdb.log";
  initdb.cwd = server->dir_;
  initdb.drop_privileges = server->drop_privileges_;
  initdb.uid = server->uid_;
  initdb.gid = server->gid_;
  const core::Status made = run(initdb, kInitdbTimeout, log);
  fs::remove(pwfile, ec);
  TESSERA_RETURN_IF_ERROR(made);
  // Written out rather than left to initdb's defaults: passwords for every connection, TCP only
  // from 127.0.0.1 (the only address the server listens on).
  TESSERA_RETURN_IF_ERROR(writeFile(server->dir_ / "data" / "pg_hba.conf",
                                    "# PgTestServer: SCRAM passwords everywhere, nothing trusted.\n"
                                    "local all all scram-sha-256\n"
                                    "host all all 127.0.0.1/32 scram-sha-256\n",
                                    server->drop_privileges_, server->uid_, server->gid_));

  TESSERA_RETURN_IF_ERROR(server->startPostgres(log));
  TESSERA_ASSIGN_OR_RETURN(auto admin, PgConnection::connect(server->superuserConninfo(), 5s));
  TESSERA_RETURN_IF_ERROR(admin->exec("SELECT 1").status());
  return server;
}

core::Status PgTestServer::startPostgres(std::string* log) {
  const fs::path server_log = dir_ / "server.log";
  for (int attempt = 1;; ++attempt) {
    TESSERA_ASSIGN_OR_RETURN(port_, freePort());
    note(log, "PgTestServer: starting postgres on 127.0.0.1:" + std::to_string(port_));
    Spawn postgres;
    postgres.argv = {(bindir_ / "postgres").string(),
                     "-D",
                     (dir_ / "data").string(),
                     "-c",
                     "listen_addresses=127.0.0.1",
                     "-c",
                     "port=" + std::to_string(port_),
                     "-c",
                     "unix_socket_directories=" + dir_.string(),
                     "-c",
                     "fsync=off",
                     "-c",
                     "synchronous_commit=off",
                     "-c",
                     "full_page_writes=off",
                     "-c",
                     "password_encryption=scram-sha-256",
                     "-c",
                     "max_connections=40",
                     "-c",
                     "shared_buffers=16MB"};
    postgres.output = server_log;
    postgres.cwd = dir_;
    postgres.drop_privileges = drop_privileges_;
    postgres.uid = uid_;
    postgres.gid = gid_;
    postgres.parent_death_signal = SIGINT;  // A fast shutdown: it removes its shared memory.
    TESSERA_ASSIGN_OR_RETURN(pid_, spawn(postgres));

    const std::string port = std::to_string(port_);
    const char* const keywords[] = {"host", "port", "dbname", "connect_timeout", nullptr};
    const char* const values[] = {"127.0.0.1", port.c_str(), "postgres", "2", nullptr};
    const Clock::time_point deadline = Clock::now() + kStartTimeout;
    while (true) {
      if (const std::optional<int> status = exited(pid_)) {
        pid_ = -1;
        const std::string output = readFile(server_log);
        if (attempt < kPortAttempts && output.find("could not bind") != std::string::npos) {
          note(log, "PgTestServer: port " + port + " was taken meanwhile; another");
          break;
        }
        note(log, output);
        return core::unavailable("PgTestServer: postgres stopped at startup (" +
                                 describeExit(*status) + "); its log ends:\n" + tail(output, 20));
      }
      if (PQpingParams(keywords, values, 0) == PQPING_OK) {
        note(log, "PgTestServer: accepting connections on port " + port);
        return core::Status::ok();
      }
      if (Clock::now() > deadline) {
        const std::string output = readFile(server_log);
        note(log, output);
        stop();
        return core::unavailable(
            "PgTestServer: postgres did not accept connections on 127.0.0.1:" + port + " within " +
            std::to_string(kStartTimeout.count()) + " s; its log ends:\n" + tail(output, 20));
      }
      std::this_thread::sleep_for(kPollEvery);
    }
  }
}

void PgTestServer::stop() {
  if (pid_ <= 0) {
    return;
  }
  kill(pid_, SIGINT);
  const Clock::time_point deadline = Clock::now() + kStopTimeout;
  while (!exited(pid_)) {
    if (Clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(kPollEvery / 4);
  }
  pid_ = -1;
}

PgTestServer* PgTestServer::shared(std::string* error) {
  static std::unique_ptr<PgTestServer> server;
  static std::string failure;
  if (server == nullptr && failure.empty()) {
    std::string log;
    auto started = start(&log);
    if (started.isOk()) {
      server = std::move(started).value();
    } else {
      failure = started.status().message() + "\n" + log;
    }
  }
  *error = failure;
  return server.get();
}

PgTestServer::~PgTestServer() {
  stop();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::string PgTestServer::superuserConninfo() const { return conninfo(kAdminUser, password_); }

std::string PgTestServer::conninfo(const std::string& user, const std::string& password,
                                   const std::string& dbname) const {
  return "host=127.0.0.1 port=" + std::to_string(port_) + " user=" + conninfoValue(user) +
         " password=" + conninfoValue(password) + " dbname=" + conninfoValue(dbname) +
         " sslmode=disable";
}

std::string PgTestServer::serverLog() const { return readFile(dir_ / "server.log"); }

uint16_t PgTestServer::closedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (fd >= 0) {
    ::close(fd);
  }
  return ok ? ntohs(addr.sin_port) : 1;  // Port 1: nothing listens there either, in practice.
}

}  // namespace tessera::secrets
