// The real `tessera` binary as a process, and a small HTTPS client for its API, for the
// integration tests that start servers and agents.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "util.h"

namespace tessera::integration {

namespace process_fs = std::filesystem;

// A running `tessera` process with its output in files.
class Process {
 public:
  // `netns`: the network namespace (`ip netns add` NAME) it runs in; "": this process's.
  Process(std::vector<std::string> args, const process_fs::path& out, const std::string& netns = "")
      : name_(args.empty() ? "" : args[0]), out_(out) {
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // A test that crashes leaves no server behind.
      freopen(out.string().c_str(), "w", stdout);
      freopen((out.string() + ".err").c_str(), "w", stderr);
      if (!netns.empty()) {
        const int fd = open(("/var/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
          perror(("setns " + netns).c_str());
          _exit(126);
        }
      }
      std::vector<char*> argv;
      std::string bin = binary();
      argv.push_back(bin.data());
      for (std::string& a : args) {
        argv.push_back(a.data());
      }
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
  }
  // Stops it as an operator would (SIGTERM: servers and agents clean up what they made, such
  // as an agent's credentials folder in /dev/shm), and with SIGKILL if it has not stopped
  // within 10 s. A test that wants a crash says so: stop(SIGKILL).
  ~Process() {
    if (pid_ <= 0) {
      return;
    }
    kill(pid_, SIGTERM);
    for (int i = 0; i < 1000; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      usleep(10000);
    }
    stop(SIGKILL);
  }
  pid_t pid() const { return pid_; }
  int stop(int sig) {
    if (pid_ <= 0) {
      return -1;
    }
    kill(pid_, sig);
    // Stopped with a signal: it has 60 s to clean up. Waited for (wait()): 10 minutes.
    const int status = reap(pid_, sig == 0 ? std::chrono::minutes(10) : std::chrono::minutes(1),
                            "tessera " + name_);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  // Waits for the process to end by itself (signal 0 only checks it exists); as stop.
  int wait() { return stop(0); }
  std::string output() const { return slurp(out_); }
  std::string errors() const { return slurp(out_.string() + ".err"); }

 private:
  pid_t pid_ = -1;
  std::string name_;  // Its command (server, agent, ...), for messages.
  process_fs::path out_;
};

struct Response {
  unsigned status = 0;
  nlohmann::json body;
  std::string raw;
  std::string retry_after;                          // The Retry-After header, if any.
  std::map<std::string, std::string> headers = {};  // Every header, names lower-cased.
};

// An HTTPS client for one server; a connection per request keeps it simple.
class Client {
 public:
  Client(std::string address, std::string ca_pem) : ca_pem_(std::move(ca_pem)) {
    const std::smatch m = [&] {
      std::smatch mm;
      std::regex_match(address, mm, std::regex(R"(https://([^:]+):(\d+))"));
      return mm;
    }();
    host_ = m[1];
    port_ = static_cast<uint16_t>(std::stoi(m[2]));
  }
  // Sends the token in `header` instead of X-Tessera-Token (e.g. Vault's X-Vault-Token).
  void setTokenHeader(std::string header) { token_header_ = std::move(header); }
  // Sent with every request from now on (Idempotency-Key, say); "" removes it.
  void setHeader(const std::string& name, const std::string& value) {
    if (value.empty()) {
      headers_.erase(name);
    } else {
      headers_[name] = value;
    }
  }

  Response call(const std::string& method, const std::string& target, const std::string& token,
                const nlohmann::json& body = nullptr) const {
    boost::asio::io_context io;
    boost::asio::ssl::context ctx(boost::asio::ssl::context::tls_client);
    ctx.add_certificate_authority(boost::asio::buffer(ca_pem_));
    ctx.set_verify_mode(boost::asio::ssl::verify_peer);
    boost::beast::ssl_stream<boost::beast::tcp_stream> stream(io, ctx);
    boost::beast::get_lowest_layer(stream).connect(boost::asio::ip::tcp::endpoint(
        boost::asio::ip::make_address(host_ == "localhost" ? "127.0.0.1" : host_), port_));
    {
      // A server that never answers fails the test in 30 s rather than hang it.
      timeval tv{30, 0};
      const int fd = boost::beast::get_lowest_layer(stream).socket().native_handle();
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    stream.handshake(boost::asio::ssl::stream_base::client);
    boost::beast::http::request<boost::beast::http::string_body> req;
    req.method_string(method);
    req.target(target);
    req.version(11);
    req.set(boost::beast::http::field::host, host_);
    if (!token.empty()) {
      req.set(token_header_, token);
    }
    for (const auto& [name, value] : headers_) {
      req.set(name, value);
    }
    if (!body.is_null()) {
      req.body() = body.dump();
    }
    req.prepare_payload();
    boost::beast::http::write(stream, req);
    boost::beast::flat_buffer buf;
    boost::beast::http::response<boost::beast::http::string_body> resp;
    boost::beast::http::read(stream, buf, resp);
    Response r;
    r.status = resp.result_int();
    r.raw = resp.body();
    r.retry_after = std::string(resp[boost::beast::http::field::retry_after]);
    for (const auto& field : resp) {
      std::string name(field.name_string());
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      r.headers[name] = std::string(field.value());
    }
    if (!r.raw.empty() && r.raw[0] == '{') {
      r.body = nlohmann::json::parse(r.raw, nullptr, false);
    }
    boost::beast::error_code ec;
    stream.shutdown(ec);
    return r;
  }

 private:
  std::string host_;
  uint16_t port_ = 0;
  std::string ca_pem_;
  std::string token_header_ = "X-Tessera-Token";
  std::map<std::string, std::string> headers_;
};

// The storage, TLS listener and audit blocks of a test server's config, all in `dir` (with the
// cert.pem and key.pem of writeTestCertificates); a test appends its own blocks.
inline std::string baseServerConfig(const process_fs::path& dir,
                                    const std::string& listen = "127.0.0.1:0") {
  const std::string d = dir.string();
  return "storage \"sqlite\" { path = \"" + d + "/t.db\" }\n" +
         "listener \"tcp\" {\n  address = \"" + listen + "\"\n  tls_cert_file = \"" + d +
         "/cert.pem\"\n  tls_key_file = \"" + d + "/key.pem\"\n}\n" + "audit \"file\" { path = \"" +
         d + "/audit.log\" }\n";
}

// Creates `tenant` with `config` (its quota, ...) as `root` and returns a tenant-admin token of
// it for an hour; "" when either call failed.
inline std::string tenantWithAdmin(const Client& c, const std::string& root,
                                   const std::string& tenant, const nlohmann::json& config) {
  if (c.call("POST", "/v1/tenants/" + tenant, root, config).status != 204) {
    return "";
  }
  Response r = c.call("POST", "/v1/auth/token/create", root,
                      {{"tenant", tenant}, {"policies", {"tenant-admin"}}, {"ttl", "1h"}});
  return r.status == 200 ? r.body["auth"].value("client_token", "") : "";
}

// Writes `token` to `dir`/`name` (mode 0600, as `tessera agent run --token-file` asks) and
// returns its path: agents never take a credential on their command line.
inline std::string tokenFile(const process_fs::path& dir, const std::string& name,
                             const std::string& token) {
  const process_fs::path file = dir / name;
  process_fs::remove(file);
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    if (f != nullptr) {
      std::fputs(token.c_str(), f);
      std::fclose(f);
    }
  }
  process_fs::permissions(file, process_fs::perms::owner_read | process_fs::perms::owner_write);
  return file.string();
}

// What a starting server prints: the address it listens on and, on its first start, the root
// token ("" when it printed none).
struct ServerBanner {
  std::string address;
  std::string root;
};

// Waits up to `limit` for `server` to print "listening on https://..."; nullopt if it did not.
inline std::optional<ServerBanner> waitForServer(
    const Process& server, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  std::string out;
  std::smatch m;
  if (!waitFor(
          [&] {
            out = server.output();
            return std::regex_search(out, m, std::regex(R"(listening on (https://[0-9.]+:\d+))"));
          },
          limit)) {
    return std::nullopt;
  }
  ServerBanner b{m[1], ""};
  if (std::regex_search(out, m, std::regex(R"((tsr\.[A-Za-z0-9]{24}))"))) {
    b.root = m[1];
  }
  return b;
}

}  // namespace tessera::integration
