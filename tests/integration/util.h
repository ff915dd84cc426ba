// Helpers shared by the integration tests that run the real `tessera` binary.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

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
// that must come back on the same address after a restart.
inline uint16_t freeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) {
    ::close(fd);
  }
  return port;
}

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

}  // namespace tessera::integration
