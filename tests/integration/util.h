// Helpers shared by the integration tests that run the real `tessera` binary.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/testing/loopback_port.h"

namespace tessera::integration {

// The build tree (CTest sets TESSERA_BINARY_DIR).
inline std::string binaryDir() {
  const char* d = std::getenv("TESSERA_BINARY_DIR");
  return d != nullptr ? d : ".";
}

// The `tessera` binary under test.
inline std::string binary() { return binaryDir() + "/tessera"; }

// The source tree (CTest sets TESSERA_SOURCE_DIR), for test data.
inline std::string sourceDir() {
  const char* d = std::getenv("TESSERA_SOURCE_DIR");
  return d != nullptr ? d : ".";
}

// A TCP port on 127.0.0.1 that was free a moment ago (0 if none could be found), for a server
// that must come back on the same address after a restart. It lies outside the range outgoing
// connections draw from, so no client of a test running beside this one is given it meanwhile.
inline uint16_t freeLoopbackPort() { return core::testing::loopbackPortOutsideEphemeralRange(); }

// A file's whole content ("" if it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct CmdResult {
  int rc = -1;  // The exit status; -1 if it did not exit normally.
  std::string out;
  std::string err;
};

// Waits for child `pid` to end, at most `limit`; then kills it (SIGKILL) and says so on standard
// error, so that a process that hangs fails its test instead of stalling the whole suite. Returns
// its wait status.
inline int reap(pid_t pid, std::chrono::milliseconds limit, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto pause = std::chrono::microseconds(200);
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) {
      return status;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20'000));
  }
  std::fprintf(
      stderr, "%s (pid %d) did not end within %lld s; killing it\n", what.c_str(),
      static_cast<int>(pid),
      static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(limit).count()));
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return status;
}

// Runs `tessera ARGS` through the shell (ARGS may add redirections such as "<file"), with its
// standard error in `err_path`; `env` ("NAME=value ...") is set for it alone.
inline CmdResult runTessera(const std::string& args, const std::filesystem::path& err_path,
                            const std::string& env = "") {
  const std::string cmd =
      (env.empty() ? "" : "env " + env + " ") + binary() + " " + args + " 2>" + err_path.string();
  CmdResult r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) {
    r.out.append(buf, n);
  }
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = slurp(err_path);
  return r;
}

struct Outcome {
  int rc = -1;  // The exit status; minus the signal if a signal ended it.
  std::string out;
  std::string err;
};

inline std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  return os << "rc=" << o.rc << "\nstdout:\n" << o.out << "\nstderr:\n" << o.err;
}

// Runs `argv` (argv[0] found on PATH) with no TESSERA_* variable of this process's but those in
// `env`, standard input from /dev/null and its output in files under `scratch`; waits for it,
// or with `stop_after` lets it run that long and stops it with SIGTERM.
inline Outcome runArgv(std::vector<std::string> argv_s,
                       const std::map<std::string, std::string>& env,
                       const std::filesystem::path& scratch,
                       std::chrono::milliseconds stop_after = std::chrono::milliseconds(0)) {
  static std::atomic<int> counter{0};  // Commands may run from several threads.
  const std::string base = (scratch / ("cmd-" + std::to_string(counter++))).string();
  const pid_t pid = fork();
  if (pid == 0) {
    for (const char* v : {"TESSERA_ADDR", "TESSERA_TOKEN", "TESSERA_CACERT", "TESSERA_TENANT",
                          "TESSERA_CLIENT_CERT", "TESSERA_CLIENT_KEY"}) {
      unsetenv(v);
    }
    for (const auto& [k, v] : env) {
      setenv(k.c_str(), v.c_str(), 1);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // Gone with a test that crashes.
    const int in = open("/dev/null", O_RDONLY);
    dup2(in, STDIN_FILENO);
    if (freopen((base + ".out").c_str(), "w", stdout) == nullptr ||
        freopen((base + ".err").c_str(), "w", stderr) == nullptr) {
      _exit(126);
    }
    std::vector<char*> argv;
    for (std::string& a : argv_s) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    execvp(argv_s[0].c_str(), argv.data());
    _exit(127);
  }
  if (stop_after.count() > 0) {
    std::this_thread::sleep_for(stop_after);
    kill(pid, SIGTERM);
  }
  const int status = reap(pid, std::chrono::minutes(5), argv_s[0]);
  Outcome o;
  o.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  o.out = slurp(base + ".out");
  o.err = slurp(base + ".err");
  return o;
}

// Polls `done` every 50 ms until it holds (true) or `limit` has passed (false).
inline bool waitFor(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// Whether process `pid` has ended (gone, or a zombie nobody has waited for).
inline bool gone(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return stat.empty() ||
         (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z');
}

// The PID namespace process `pid` runs in ("" when it is gone).
inline std::string pidNamespaceOf(pid_t pid) {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/ns/pid", ec).string();
}

// The pid, as this process sees it, of the process that a task started by an agent knows as
// `pid` (`echo $$` in the task): `pid` itself where the task shares this PID namespace; else
// (an agent running as root gives each task a PID namespace of its own) the process in the
// task's namespace, found through the task's first process (the agent's `shim` record in
// `task_dir`: "<shim> <first process> ...") and /proc/<pid>/status's NSpid. 0 when no such
// process runs.
inline pid_t hostPidOf(const std::filesystem::path& task_dir, pid_t pid) {
  std::istringstream record(slurp(task_dir / "shim"));
  pid_t shim = 0;
  pid_t first = 0;
  record >> shim >> first;
  const std::string theirs = first > 0 ? pidNamespaceOf(first) : "";
  if (theirs.empty() || theirs == pidNamespaceOf(::getpid())) {
    return pid;
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos ||
        pidNamespaceOf(std::stoi(name)) != theirs) {
      continue;
    }
    std::istringstream status(slurp(e.path() / "status"));
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("NSpid:", 0) == 0) {
        const size_t last = line.find_last_of(" \t");
        if (std::stoi(line.substr(last + 1)) == pid) {
          return std::stoi(name);
        }
      }
    }
  }
  return 0;
}

// A `tessera dev` of its own, started by the test and stopped when it goes.
struct Dev {
  std::filesystem::path dir;
  pid_t pid = -1;
  nlohmann::json info;

  Dev(const std::filesystem::path& d, const std::vector<std::string>& extra) : dir(d) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      freopen((dir / "server.out").c_str(), "w", stdout);
      freopen((dir / "server.err").c_str(), "w", stderr);
      std::string bin = binary();
      std::vector<std::string> args = {bin,          "dev",    "--data-dir",
                                       dir.string(), "--addr", "127.0.0.1:0"};
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (std::string& a : args) {
        argv.push_back(a.data());
      }
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    waitFor(
        [&] {
          info = nlohmann::json::parse(slurp(dir / "dev.json"), nullptr, false);
          return info.is_object() && info.value("pid", 0) == pid;
        },
        std::chrono::seconds(30));
  }
  ~Dev() {
    kill(pid, SIGTERM);
    // A server that does not stop when an operator asks it to is a failure, not just slow.
    const int status = reap(pid, std::chrono::seconds(30), "tessera dev after SIGTERM");
    EXPECT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "tessera dev did not stop within 30 s of SIGTERM";
    std::filesystem::remove_all(dir);
  }
  bool up() const { return info.is_object() && info.value("pid", 0) == pid; }
  std::string logs() const { return slurp(dir / "server.out") + slurp(dir / "server.err"); }
};

}  // namespace tessera::integration
