// What the benchmarks that drive a real `tessera dev` share: starting it as a child process,
// reading its dev.json, and one HTTPS keep-alive connection per client thread.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tessera::bench {

namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Where the server is and the credentials `tessera dev` left in dev.json.
struct DevInfo {
  std::string host;
  uint16_t port = 0;
  std::string ca_pem;
  std::string root_token;
  std::string tenant;
  std::string tenant_token;
  pid_t pid = 0;
};

// Reads dev.json; an error message names what is wrong.
inline std::optional<DevInfo> readDevJson(const fs::path& file, std::string* error) {
  const json j = json::parse(slurp(file), nullptr, false);
  if (!j.is_object() || !j.contains("address") || !j["address"].is_string()) {
    *error = file.string() + ": not a dev.json (no \"address\")";
    return std::nullopt;
  }
  DevInfo d;
  const std::string address = j["address"];
  const std::string prefix = "https://";
  const size_t colon = address.rfind(':');
  if (address.rfind(prefix, 0) != 0 || colon == std::string::npos || colon < prefix.size()) {
    *error = file.string() + ": address '" + address + "' is not https://HOST:PORT";
    return std::nullopt;
  }
  d.host = address.substr(prefix.size(), colon - prefix.size());
  try {
    d.port = static_cast<uint16_t>(std::stoi(address.substr(colon + 1)));
  } catch (const std::exception&) {
    *error = file.string() + ": bad port in '" + address + "'";
    return std::nullopt;
  }
  d.ca_pem = slurp(j.value("ca_cert", ""));
  if (d.ca_pem.empty()) {
    *error = file.string() + ": cannot read the CA certificate '" + j.value("ca_cert", "") + "'";
    return std::nullopt;
  }
  d.root_token = j.value("root_token", "");
  d.tenant = j.value("tenant", "demo");
  d.tenant_token = j.value("tenant_token", "");
  d.pid = static_cast<pid_t>(j.value("pid", 0));
  return d;
}

// `tessera dev` as a child process; SIGTERM and wait when destroyed.
class DevServer {
 public:
  DevServer(const DevServer&) = delete;
  DevServer& operator=(const DevServer&) = delete;
  ~DevServer() { stop(); }

  // Starts `binary dev --data-dir dir --addr 127.0.0.1:0 [--nodes nodes] [--simulated]` and
  // waits until dir/dev.json names the child's pid. Null (and `error`) if it exits or is not
  // ready in time. `simulated`: the server simulates the nodes (no agents, nothing executed).
  static std::unique_ptr<DevServer> start(const std::string& binary, const fs::path& dir,
                                          const std::string& nodes, bool simulated,
                                          std::string* error,
                                          const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {binary,       "dev",    "--data-dir",
                                     dir.string(), "--addr", "127.0.0.1:0"};
    if (!nodes.empty()) {
      args.insert(args.end(), {"--nodes", nodes});
    }
    if (simulated) {
      args.emplace_back("--simulated");
    }
    args.insert(args.end(), extra.begin(), extra.end());
    std::fflush(nullptr);  // What this program printed is not printed again by the child.
    const pid_t pid = fork();
    if (pid < 0) {
      *error = "fork failed";
      return nullptr;
    }
    if (pid == 0) {
      if (freopen((dir / "server.out").c_str(), "w", stdout) == nullptr ||
          freopen((dir / "server.err").c_str(), "w", stderr) == nullptr) {
        _exit(126);
      }
      std::vector<char*> argv;
      for (std::string& a : args) {
        argv.push_back(a.data());
      }
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    std::unique_ptr<DevServer> s(new DevServer(pid));
    const auto deadline = SteadyClock::now() + std::chrono::seconds(60);
    while (SteadyClock::now() < deadline) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        s->pid_ = -1;
        *error = "'" + binary + " dev' exited (" +
                 (WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                                    : "signal " + std::to_string(WTERMSIG(status))) +
                 "): " + slurp(dir / "server.err");
        return nullptr;
      }
      const json j = json::parse(slurp(dir / "dev.json"), nullptr, false);
      if (j.is_object() && j.value("pid", 0) == pid) {
        return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    *error = "'" + binary + " dev' wrote no dev.json within 60 s: " + slurp(dir / "server.err");
    return nullptr;
  }

  pid_t pid() const { return pid_; }

  // SIGTERM, then waits; the exit code, or -signal. Idempotent.
  int stop() {
    if (pid_ <= 0) {
      return exit_code_;
    }
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    return exit_code_;
  }

 private:
  explicit DevServer(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  int exit_code_ = 0;
};

struct Request {
  std::string method;
  std::string target;
  std::string token;
  std::string body;
  std::string workload;              // For submissions: the name, logged when the answer is 202.
  std::string idempotency_key = {};  // Sent as Idempotency-Key when set (as the CLI does).
  std::string accept = {};           // Accept and Content-Type, when set (a Kubernetes client's).
  std::string content_type = {};
};

struct Reply {
  unsigned status = 0;  // 0: no answer (error says why).
  std::string body;
  std::string error;
};

// Connects `stream` to the server `dev` describes and completes the TLS handshake (blocking);
// false, with `error` saying why, if either failed.
inline bool connectTls(beast::ssl_stream<beast::tcp_stream>& stream, const DevInfo& dev,
                       std::string* error) {
  beast::error_code ec;
  const asio::ip::address ip =
      asio::ip::make_address(dev.host == "localhost" ? "127.0.0.1" : dev.host, ec);
  if (!ec) {
    beast::get_lowest_layer(stream).socket().connect(tcp::endpoint(ip, dev.port), ec);
  }
  if (!ec) {
    beast::get_lowest_layer(stream).socket().set_option(tcp::no_delay(true), ec);
  }
  if (!ec) {
    stream.set_verify_callback(ssl::host_name_verification(dev.host));
    stream.handshake(ssl::stream_base::client, ec);
  }
  if (ec) {
    *error = "connecting to " + dev.host + ":" + std::to_string(dev.port) + ": " + ec.message();
    return false;
  }
  return true;
}

// `r` as a keep-alive HTTP/1.1 request to `host`.
inline http::request<http::string_body> toHttp(const Request& r, const std::string& host) {
  http::request<http::string_body> req;
  req.method_string(r.method);
  req.target(r.target);
  req.version(11);
  req.set(http::field::host, host);
  req.keep_alive(true);
  if (!r.token.empty()) {
    req.set("X-Tessera-Token", r.token);
  }
  if (!r.idempotency_key.empty()) {
    req.set("Idempotency-Key", r.idempotency_key);
  }
  if (!r.accept.empty()) {
    req.set(http::field::accept, r.accept);
  }
  if (!r.content_type.empty()) {
    req.set(http::field::content_type, r.content_type);
  }
  req.body() = r.body;
  req.prepare_payload();
  return req;
}

// One HTTPS keep-alive connection, used by one thread. Reconnects when the server closed it.
class Connection {
 public:
  explicit Connection(const DevInfo& dev) : dev_(dev), ctx_(ssl::context::tls_client) {
    ctx_.add_certificate_authority(asio::buffer(dev_.ca_pem));
    ctx_.set_verify_mode(ssl::verify_peer);
  }

  // Connects and completes the TLS handshake now, so the first timed request does not pay it.
  bool connect(std::string* error) {
    close();
    stream_.emplace(io_, ctx_);
    buffer_.clear();
    if (!connectTls(*stream_, dev_, error)) {
      stream_.reset();
      return false;
    }
    ++connects_;
    return true;
  }

  // Sends one request and reads the answer. A request that could not be written is retried once
  // on a new connection (the server closes idle ones); a GET also when the answer was lost.
  Reply call(const Request& r) {
    Reply out;
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!stream_ && !connect(&out.error)) {
        return out;
      }
      const http::request<http::string_body> req = toHttp(r, dev_.host);
      beast::error_code ec;
      http::write(*stream_, req, ec);
      bool may_retry = true;
      if (!ec) {
        http::response<http::string_body> resp;
        http::read(*stream_, buffer_, resp, ec);
        if (!ec) {
          out.status = resp.result_int();
          out.body = std::move(resp.body());
          out.error.clear();
          if (!resp.keep_alive()) {
            close();
          }
          return out;
        }
        may_retry = r.method == "GET";
      }
      out.error = ec.message();
      close();
      if (!may_retry) {
        break;
      }
    }
    return out;
  }

  int connects() const { return connects_; }

 private:
  void close() {
    if (stream_) {
      beast::error_code ec;
      beast::get_lowest_layer(*stream_).socket().close(ec);
      stream_.reset();
    }
  }

  const DevInfo& dev_;
  asio::io_context io_;
  ssl::context ctx_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> stream_;
  beast::flat_buffer buffer_;
  int connects_ = 0;
};

}  // namespace tessera::bench
