#include "store/etcd_test_cluster.h"

#include <etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/testing/loopback_port.h"

namespace tessera::store {
namespace {

namespace fs = std::filesystem;
namespace pb = etcdserverpb;
using namespace std::chrono_literals;

// A port on 127.0.0.1 for a member to listen on, outside the range outgoing connections draw from.
core::Result<int> freePort() {
  const uint16_t port = core::testing::loopbackPortOutsideEphemeralRange();
  if (port == 0) {
    return core::unavailable("EtcdTestCluster: cannot find a free port on 127.0.0.1");
  }
  return static_cast<int>(port);
}

std::string findInPath(const std::string& name) {
  const char* path = getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (access(candidate.c_str(), X_OK) == 0) {
      return candidate.string();
    }
  }
  return {};
}

std::unique_ptr<pb::Maintenance::Stub> maintenance(const std::string& url) {
  return pb::Maintenance::NewStub(
      grpc::CreateChannel(url.substr(std::strlen("http://")), grpc::InsecureChannelCredentials()));
}

// The cluster of the test binary, stopped by the Environment when the tests end.
struct Shared {
  std::unique_ptr<EtcdTestCluster> cluster;
  core::Status error;
  bool tried = false;
};

Shared& sharedState() {
  static Shared s;
  return s;
}

class StopSharedCluster : public ::testing::Environment {
 public:
  void TearDown() override { sharedState().cluster.reset(); }
};

[[maybe_unused]] const ::testing::Environment* const stop_shared_cluster =
    ::testing::AddGlobalTestEnvironment(new StopSharedCluster);

}  // namespace

core::Result<EtcdTestCluster*> EtcdTestCluster::shared() {
  Shared& s = sharedState();
  if (!s.tried) {
    s.tried = true;
    auto started = start(3);
    if (started.isOk()) {
      s.cluster = std::move(started).value();
    } else {
      s.error = started.status();
    }
  }
  if (s.cluster == nullptr) {
    return s.error;
  }
  return s.cluster.get();
}

core::Result<std::unique_ptr<EtcdTestCluster>> EtcdTestCluster::start(int members) {
  // A member can lose its port to another process between the pick and its bind: start again
  // on fresh ports then (the failed try's members are stopped and its directory removed).
  constexpr int kAttempts = 4;
  for (int attempt = 1;; ++attempt) {
    auto started = startOnce(members);
    if (started.isOk() || attempt == kAttempts ||
        started.status().message().find("address already in use") == std::string::npos) {
      return started;
    }
  }
}

core::Result<std::unique_ptr<EtcdTestCluster>> EtcdTestCluster::startOnce(int members) {
  std::unique_ptr<EtcdTestCluster> c(new EtcdTestCluster());
  c->binary_ = findInPath("etcd");
  if (c->binary_.empty()) {
    return core::failedPrecondition(
        "EtcdTestCluster: no etcd binary on the PATH: the etcd store tests need a real etcd; "
        "install the etcd-server package (scripts/bootstrap)");
  }
  // etcd fsyncs every write; on tmpfs that costs nothing.
  std::error_code ec;
  const fs::path base = fs::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0
                            ? fs::path("/dev/shm")
                            : fs::temp_directory_path(ec);
  std::string pattern = (base / "tessera-etcd-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return core::unavailable("EtcdTestCluster: cannot make a temp dir like " + pattern + ": " +
                             std::strerror(errno));
  }
  c->dir_ = pattern;

  std::vector<std::string> peer_urls;
  for (int i = 0; i < members; ++i) {
    TESSERA_ASSIGN_OR_RETURN(int client_port, freePort());
    TESSERA_ASSIGN_OR_RETURN(int peer_port, freePort());
    c->client_urls_.push_back("http://127.0.0.1:" + std::to_string(client_port));
    peer_urls.push_back("http://127.0.0.1:" + std::to_string(peer_port));
  }
  std::string initial_cluster;
  for (int i = 0; i < members; ++i) {
    if (i > 0) {
      initial_cluster += ',';
    }
    initial_cluster += fmt::format("m{}={}", i + 1, peer_urls[i]);
  }
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = fmt::format("m{}", i + 1);
    m.data_dir = c->dir_ + "/" + m.name;
    m.log_file = c->dir_ + "/" + m.name + ".log";
    m.args = {c->binary_, "--name=" + m.name, "--data-dir=" + m.data_dir,
              "--listen-client-urls=" + c->client_urls_[i],
              "--advertise-client-urls=" + c->client_urls_[i], "--listen-peer-urls=" + peer_urls[i],
              "--initial-advertise-peer-urls=" + peer_urls[i],
              "--initial-cluster=" + initial_cluster, "--initial-cluster-state=new",
              "--initial-cluster-token=tessera-test-" + std::to_string(getpid()),
              // What etcd_store.h asks of a cluster.
              "--max-request-bytes=" + std::to_string(4 << 20), "--max-txn-ops=1024",
              "--logger=zap", "--log-level=warn"};
    c->members_.push_back(std::move(m));
  }
  for (Member& m : c->members_) {
    TESSERA_RETURN_IF_ERROR(c->spawn(m, true));
  }
  TESSERA_RETURN_IF_ERROR(c->waitHealthy(30s));
  return c;
}

EtcdTestCluster::~EtcdTestCluster() {
  for (size_t i = 0; i < members_.size(); ++i) {
    kill(i);
  }
  std::error_code ignored;
  if (!dir_.empty()) {
    fs::remove_all(dir_, ignored);
  }
}

EtcdStoreOptions EtcdTestCluster::options(const std::string& prefix, size_t first) const {
  EtcdStoreOptions o;
  o.endpoints.push_back(client_urls_[first]);
  for (size_t i = 0; i < client_urls_.size(); ++i) {
    if (i != first) {
      o.endpoints.push_back(client_urls_[i]);
    }
  }
  o.prefix = prefix;
  o.dial_timeout = 2s;
  o.request_timeout = 10s;
  return o;
}

core::Result<size_t> EtcdTestCluster::leader() const {
  for (size_t i = 0; i < members_.size(); ++i) {
    if (!running(i)) {
      continue;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 2s);
    pb::StatusResponse resp;
    if (maintenance(client_urls_[i])->Status(&ctx, pb::StatusRequest(), &resp).ok() &&
        resp.leader() != 0 && resp.leader() == resp.header().member_id()) {
      return i;
    }
  }
  return core::unavailable("EtcdTestCluster: no member is leader");
}

core::Result<std::vector<std::pair<std::string, std::string>>> EtcdTestCluster::rawRange(
    const std::string& prefix) const {
  for (size_t i = 0; i < members_.size(); ++i) {
    if (!running(i)) {
      continue;
    }
    auto kv = pb::KV::NewStub(grpc::CreateChannel(client_urls_[i].substr(std::strlen("http://")),
                                                  grpc::InsecureChannelCredentials()));
    pb::RangeRequest req;
    req.set_key(prefix);
    req.set_range_end(prefixEnd(prefix));
    pb::RangeResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    const grpc::Status s = kv->Range(&ctx, req, &resp);
    if (!s.ok()) {
      return core::unavailable("EtcdTestCluster: range at " + client_urls_[i] + ": " +
                               s.error_message());
    }
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& kv : resp.kvs()) {
      out.emplace_back(kv.key(), kv.value());
    }
    return out;
  }
  return core::unavailable("EtcdTestCluster: no member is running");
}

void EtcdTestCluster::kill(size_t i) {
  Member& m = members_[i];
  if (m.pid <= 0) {
    return;
  }
  ::kill(m.pid, SIGKILL);
  int status = 0;
  waitpid(m.pid, &status, 0);
  m.pid = -1;
  m.paused = false;
}

void EtcdTestCluster::pause(size_t i) {
  Member& m = members_[i];
  if (m.pid > 0 && !m.paused) {
    ::kill(m.pid, SIGSTOP);
    m.paused = true;
  }
}

void EtcdTestCluster::resume(size_t i) {
  Member& m = members_[i];
  if (m.pid > 0 && m.paused) {
    ::kill(m.pid, SIGCONT);
    m.paused = false;
  }
}

core::Status EtcdTestCluster::restart(size_t i) {
  TESSERA_RETURN_IF_ERROR(spawn(members_[i], false));
  return waitHealthy(30s);
}

core::Status EtcdTestCluster::spawn(Member& m, bool first_start) {
  std::vector<std::string> strings;
  for (const std::string& a : m.args) {
    // On a restart the member's data directory already knows the cluster.
    if (first_start || !a.starts_with("--initial-")) {
      strings.push_back(a);
    }
  }
  std::vector<char*> argv;
  argv.reserve(strings.size() + 1);
  for (std::string& a : strings) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  const int out = open(m.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (out < 0) {
    return core::unavailable("EtcdTestCluster: cannot open " + m.log_file + ": " +
                             std::strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    close(out);
    return core::unavailable("EtcdTestCluster: fork: " + why);
  }
  if (pid == 0) {
    // Only system calls here: the test process may have threads.
    const int null_in = open("/dev/null", O_RDONLY);
    if (null_in < 0 || dup2(null_in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 ||
        dup2(out, STDERR_FILENO) < 0) {
      _exit(126);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) {
      _exit(126);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out);
  m.pid = pid;
  return core::Status::ok();
}

core::Status EtcdTestCluster::waitHealthy(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    size_t ready = 0;
    size_t running_members = 0;
    for (size_t i = 0; i < members_.size(); ++i) {
      Member& m = members_[i];
      if (m.pid <= 0) {
        continue;
      }
      ++running_members;
      int status = 0;
      if (waitpid(m.pid, &status, WNOHANG) == m.pid) {
        m.pid = -1;
        return core::unavailable("EtcdTestCluster: etcd member " + m.name +
                                 " exited while starting; its log ends:\n" + logTail(m));
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 500ms);
      pb::StatusResponse resp;
      if (maintenance(client_urls_[i])->Status(&ctx, pb::StatusRequest(), &resp).ok() &&
          resp.leader() != 0) {
        ++ready;
      }
    }
    if (ready == running_members) {
      return core::Status::ok();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return core::unavailable("EtcdTestCluster: the etcd cluster in " + dir_ +
                               " did not become healthy within " + std::to_string(timeout.count()) +
                               " ms; m1's log ends:\n" + logTail(members_[0]));
    }
    std::this_thread::sleep_for(50ms);
  }
}

std::string EtcdTestCluster::logTail(const Member& m) const {
  std::ifstream in(m.log_file);
  std::stringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
}

}  // namespace tessera::store
