// Images from a registry (issue #38, must show 3), through the real binary: Debian's
// docker-registry (the distribution registry) on loopback with TLS and htpasswd auth, the test
// image pushed into it with skopeo, a server, and an agent as root running containers with runc.
// Tenant A pulls with its pull secret (a KV secret); tenant B, without one, is refused by the
// registry for the tag and for the digest, though the layers are in the node's cache; a wrong
// password, a missing tag and a stopped registry each fail the task saying so; the password is
// in no file of the node, and the audit log holds only its HMAC.
//
// Needs root, runc, docker-registry, skopeo and htpasswd (scripts/bootstrap installs them); a
// machine without them fails saying which is missing.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "process.h"
#include "test_certs.h"
#include "util.h"

namespace tessera::integration {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kPassword = "Pull-Secret-Pw-7c1e";

// A program that is not tessera, with its output in `log`; SIGTERM at the end.
class External {
 public:
  External(const std::vector<std::string>& args, const fs::path& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      (void)!std::freopen(log.c_str(), "w", stdout);
      (void)!std::freopen(log.c_str(), "a", stderr);
      std::vector<char*> argv;
      for (const std::string& a : args) {
        argv.push_back(const_cast<char*>(a.c_str()));
      }
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      _exit(127);
    }
  }
  ~External() { stop(); }
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      reap(pid_, std::chrono::seconds(30), "a registry helper after SIGTERM");
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
};

// A TCP relay on loopback that passes what the registry sends at `bytes_per_s` (TLS goes
// through it untouched): a registry far away, so that a pull takes seconds.
class SlowRelay {
 public:
  SlowRelay(uint16_t to, int64_t bytes_per_s) : to_(to), rate_(bytes_per_s) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_, 16) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    accepter_ = std::thread([this] {
      while (true) {
        const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (client < 0) {
          return;
        }
        const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in r{};
        r.sin_family = AF_INET;
        r.sin_port = htons(to_);
        r.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(server, reinterpret_cast<sockaddr*>(&r), sizeof r) != 0) {
          ::close(client);
          ::close(server);
          continue;
        }
        std::lock_guard lock(mu_);
        fds_.push_back(client);
        fds_.push_back(server);
        pumps_.emplace_back([=, this] { pump(client, server, 0); });
        pumps_.emplace_back([=, this] { pump(server, client, rate_); });
      }
    });
  }
  ~SlowRelay() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    accepter_.join();
    {
      std::lock_guard lock(mu_);
      for (int fd : fds_) {
        ::shutdown(fd, SHUT_RDWR);
      }
    }
    for (std::thread& t : pumps_) {
      t.join();
    }
    for (int fd : fds_) {
      ::close(fd);
    }
  }
  uint16_t port() const { return port_; }

 private:
  static void pump(int from, int to, int64_t rate) {
    char buf[8192];
    while (true) {
      const ssize_t n = ::read(from, buf, sizeof buf);
      if (n <= 0 || ::write(to, buf, static_cast<size_t>(n)) != n) {
        ::shutdown(to, SHUT_WR);
        return;
      }
      if (rate > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(n * 1'000'000 / rate));
      }
    }
  }
  uint16_t to_;
  int64_t rate_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::thread accepter_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
};

bool have(const std::string& command) {
  return std::system(("command -v " + command + " >/dev/null 2>&1").c_str()) == 0;
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0U) << "registry tests need root (runc runs bundles as root here)";
    for (const char* tool : {"runc", "docker-registry", "skopeo", "htpasswd"}) {
      ASSERT_TRUE(have(tool)) << "registry tests need " << tool
                              << " (scripts/bootstrap installs runc, docker-registry, skopeo, "
                                 "apache2-utils)";
    }
    dir_ = fs::temp_directory_path() / ("tessera-registry-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const fs::path image = dir_ / "busybox.tar";
    ASSERT_EQ(std::system((sourceDir() + "/scripts/make-busybox-image " + image.string() +
                           " >/dev/null 2>&1")
                              .c_str()),
              0)
        << "cannot build the test image (apt-get install busybox-static)";
    auto ca = writeTestCertificates(dir_);
    ASSERT_TRUE(ca.isOk()) << ca.status().toString();
    ca_pem_ = *ca;

    // The registry: TLS with the test CA's certificate for 127.0.0.1, and basic auth. The
    // password goes to the tools by file, never on a command line.
    port_ = freeLoopbackPort();
    ASSERT_NE(port_, 0);
    registry_ = "127.0.0.1:" + std::to_string(port_);
    writePrivate(dir_ / "password", kPassword);
    writePrivate(dir_ / "auth.json", dockerConfig(kPassword));
    ASSERT_EQ(std::system(("htpasswd -iBn team-a < " + (dir_ / "password").string() + " > " +
                           (dir_ / "htpasswd").string() + " 2>/dev/null")
                              .c_str()),
              0);
    std::ofstream(dir_ / "registry.yml")
        << "version: 0.1\n"
        << "log:\n  level: warn\n"
        << "storage:\n  filesystem:\n    rootdirectory: " << (dir_ / "registry-data").string()
        << "\n"
        << "http:\n  addr: " << registry_
        << "\n  secret: tessera-test-only\n  tls:\n    certificate: "
        << (dir_ / "cert.pem").string() << "\n    key: " << (dir_ / "key.pem").string() << "\n"
        << "auth:\n  htpasswd:\n    realm: tessera-test\n    path: " << (dir_ / "htpasswd").string()
        << "\n";
    startRegistry();
    // The image, pushed as a team would; its manifest's digest as the registry has it.
    const std::string push =
        "skopeo --insecure-policy copy -q --dest-tls-verify=false --dest-authfile " +
        (dir_ / "auth.json").string() + " --digestfile " + (dir_ / "digest").string() +
        " oci-archive:" + image.string() + " docker://" + registry_ + "/team-a/busybox:1 > " +
        (dir_ / "skopeo.log").string() + " 2>&1";
    ASSERT_EQ(std::system(push.c_str()), 0) << slurp(dir_ / "skopeo.log");
    digest_ = slurp(dir_ / "digest");
    while (!digest_.empty() && std::isspace(static_cast<unsigned char>(digest_.back()))) {
      digest_.pop_back();
    }
    ASSERT_TRUE(digest_.starts_with("sha256:")) << digest_;

    std::ofstream(dir_ / "server.hcl")
        << baseServerConfig(dir_) << "scheduler { pass_interval_ms = 50 }\n"
        << "nodes {\n  agents = \"gpu-a=t4-2x\"\n}\n";
    server_ = std::make_unique<Process>(
        std::vector<std::string>{"server", "-config=" + (dir_ / "server.hcl").string()},
        dir_ / "server.out");
    const std::optional<ServerBanner> banner = waitForServer(*server_);
    ASSERT_TRUE(banner) << server_->output() << server_->errors();
    client_ = std::make_unique<Client>(banner->address, ca_pem_);
    root_ = banner->root;
    const json policy = {{"path", {{"sys/nodes/gpu-a/*", {{"capabilities", {"read", "update"}}}}}}};
    ASSERT_EQ(client_->call("POST", "/v1/sys/policies/node-gpu-a", root_, policy).status, 204U);
    Response t = client_->call("POST", "/v1/auth/token/create", root_,
                               {{"policies", {"node-gpu-a"}}, {"ttl", "1h"}});
    ASSERT_EQ(t.status, 200U) << t.raw;
    const std::string node_token = t.body["auth"]["client_token"];
    for (const std::string tenant : {"team-a", "team-b"}) {
      tokens_[tenant] = tenantWithAdmin(*client_, root_, tenant, {{"quota", {{"gpu", 2}}}});
      ASSERT_FALSE(tokens_[tenant].empty()) << tenant;
    }
    // The agent trusts the registry's CA for that registry only (and for the slow way to it).
    relay_ = std::make_unique<SlowRelay>(port_, 150'000);
    ASSERT_NE(relay_->port(), 0);
    slow_registry_ = "127.0.0.1:" + std::to_string(relay_->port());
    // A registry that cannot be reached is tried again twice, 1 s then 2 s later.
    std::ofstream(dir_ / "agent.hcl") << "container {\n  pull_retries = 2\n"
                                      << "  pull_backoff_seconds = 1\n}\n"
                                      << "registry \"" << registry_ << "\" {\n  ca_file = \""
                                      << (dir_ / "ca.pem").string() << "\"\n}\n"
                                      << "registry \"" << slow_registry_ << "\" {\n  ca_file = \""
                                      << (dir_ / "ca.pem").string() << "\"\n}\n";
    address_ = banner->address;
    agent_ = std::make_unique<Process>(
        std::vector<std::string>{"agent",        "run",
                                 "--node",       "gpu-a",
                                 "--config",     (dir_ / "agent.hcl").string(),
                                 "--backend",    "sim",
                                 "--profile",    "t4-2x",
                                 "--address",    banner->address,
                                 "--ca-cert",    (dir_ / "ca.pem").string(),
                                 "--work-dir",   (dir_ / "gpu-a").string(),
                                 "--run-as",     "tenant",
                                 "--node-mode",  "development",
                                 "--token-file", tokenFile(dir_, "gpu-a.token", node_token)},
        dir_ / "agent.out");
    ASSERT_TRUE(waitFor(
        [&] {
          const Response r = client_->call("GET", "/v1/nodes", root_);
          return r.raw.find("\"ready\"") != std::string::npos;
        },
        20s))
        << agent_->errors();
  }

  void TearDown() override {
    agent_.reset();
    server_.reset();
    relay_.reset();
    registry_process_.reset();
    const fs::path c = dir_ / "gpu-a" / "containers";
    std::error_code ec;
    for (const fs::directory_entry& b : fs::directory_iterator(c / "bundles", ec)) {
      (void)!std::system(("runc --root " + (c / "state").string() + " delete --force " +
                          b.path().filename().string() + " >/dev/null 2>&1")
                             .c_str());
      ::umount2((b.path() / "rootfs").c_str(), MNT_DETACH);
    }
    fs::remove_all(dir_, ec);
  }

  void startRegistry() {
    registry_process_ = std::make_unique<External>(
        std::vector<std::string>{"docker-registry", "serve", (dir_ / "registry.yml").string()},
        dir_ / "registry.log");
    ASSERT_TRUE(waitFor(
        [&] {
          const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
          sockaddr_in a{};
          a.sin_family = AF_INET;
          a.sin_port = htons(port_);
          a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          const bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
          ::close(fd);
          return up;
        },
        10s))
        << slurp(dir_ / "registry.log");
  }

  Response submit(const std::string& tenant, const std::string& name, const json& body) {
    return client_->call("POST", "/v1/tenants/" + tenant + "/workloads/" + name, tokens_[tenant],
                         body);
  }
  json workload(const std::string& tenant, const std::string& name) {
    return client_->call("GET", "/v1/tenants/" + tenant + "/workloads/" + name, tokens_[tenant])
        .body["data"];
  }
  // Waits for the workload to succeed or fail; returns its phase.
  std::string finish(const std::string& tenant, const std::string& name) {
    std::string phase;
    waitFor(
        [&] {
          phase = workload(tenant, name)["status"].value("phase", "");
          return phase == "succeeded" || phase == "failed";
        },
        60s);
    return phase;
  }
  void putSecret(const std::string& tenant, const std::string& path, const json& data) {
    const Response r = client_->call("POST", "/v1/tenants/" + tenant + "/secrets/kv/data/" + path,
                                     tokens_[tenant], {{"data", data}});
    ASSERT_EQ(r.status / 100, 2U) << r.raw;
  }
  // Docker's config.json for team-a at the registry, as `docker login` writes it.
  std::string dockerConfig(const std::string& password) {
    const std::string plain = "team-a:" + password;
    std::string b64(4 * ((plain.size() + 2) / 3) + 1, '\0');
    b64.resize(static_cast<size_t>(EVP_EncodeBlock(
        reinterpret_cast<unsigned char*>(b64.data()),
        reinterpret_cast<const unsigned char*>(plain.data()), static_cast<int>(plain.size()))));
    return json{{"auths", {{registry_, {{"auth", b64}}}}}}.dump();
  }
  // A file only its owner reads (a password, a token).
  static void writePrivate(const fs::path& path, const std::string& content) {
    std::ofstream(path) << content;
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  }
  size_t cachedLayers() {
    size_t n = 0;
    std::error_code ec;
    for (const auto& e :
         fs::directory_iterator(dir_ / "gpu-a" / "containers" / "images" / "layers", ec)) {
      n += e.is_directory() && e.path().filename().string().find('.') == std::string::npos;
    }
    return n;
  }
  // The files under `root` that hold `text` (their paths).
  std::vector<std::string> filesHolding(const fs::path& root, const std::string& text) {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(
             root, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec) && !it->is_symlink(ec) &&
          slurp(it->path()).find(text) != std::string::npos) {
        out.push_back(it->path().string());
      }
    }
    return out;
  }

  fs::path dir_;
  std::string ca_pem_;
  uint16_t port_ = 0;
  std::string registry_;
  std::string digest_;
  std::string root_;
  std::map<std::string, std::string> tokens_;
  std::unique_ptr<External> registry_process_;
  std::unique_ptr<SlowRelay> relay_;
  std::string slow_registry_;  // The same registry, through the relay.
  std::string address_;
  std::unique_ptr<Process> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Process> agent_;
};

TEST_F(RegistryTest, TenantsPullWithTheirOwnCredentialsAndNobodyElses) {
  const std::string tag = registry_ + "/team-a/busybox:1";
  const json cat = {"sh", "-c", "cat /etc/image-marker"};
  // Tenant A, with its pull secret (Docker's config.json shape, as `docker login` writes it).
  putSecret("team-a", "reg", {{".dockerconfigjson", dockerConfig(kPassword)}});
  ASSERT_EQ(
      submit("team-a", "pulled", {{"image", tag}, {"pullSecret", "reg"}, {"command", cat}}).status,
      202U);
  ASSERT_EQ(finish("team-a", "pulled"), "succeeded")
      << workload("team-a", "pulled").dump() << slurp(dir_ / "agent.out.err");
  EXPECT_NE(slurp(dir_ / "gpu-a" / "team-a.pulled.0" / "stdout.log").find("tessera busybox image"),
            std::string::npos);
  ASSERT_EQ(cachedLayers(), 2U);

  // Tenant B, without a pull secret: the tag, then the digest. The layers are on the node, yet
  // the registry is asked, and refuses.
  for (const auto& [name, image] :
       {std::pair{"by-tag", tag},
        std::pair{"by-digest", registry_ + "/team-a/busybox@" + digest_}}) {
    ASSERT_EQ(submit("team-b", name, {{"image", image}, {"command", cat}}).status, 202U);
    ASSERT_EQ(finish("team-b", name), "failed") << workload("team-b", name).dump();
    const std::string status = workload("team-b", name)["status"].dump();
    EXPECT_NE(status.find("unauthorized"), std::string::npos) << status;
    EXPECT_NE(status.find("no pull secret"), std::string::npos) << status;
    EXPECT_FALSE(
        fs::exists(dir_ / "gpu-a" / ("team-b." + std::string(name) + ".0") / "stdout.log") &&
        slurp(dir_ / "gpu-a" / ("team-b." + std::string(name) + ".0") / "stdout.log")
                .find("tessera busybox image") != std::string::npos);
  }
  // Tenant B naming tenant A's secret gets its own KV's, which has none.
  ASSERT_EQ(
      submit("team-b", "stolen", {{"image", tag}, {"pullSecret", "reg"}, {"command", cat}}).status,
      202U);
  ASSERT_EQ(finish("team-b", "stolen"), "failed");
  EXPECT_NE(workload("team-b", "stolen").dump().find("pull secret 'reg'"), std::string::npos)
      << workload("team-b", "stolen").dump();

  // A wrong password; a tag that is not there.
  putSecret("team-a", "wrong", {{"username", "team-a"}, {"password", "not-the-password"}});
  ASSERT_EQ(
      submit("team-a", "wrong", {{"image", tag}, {"pullSecret", "wrong"}, {"command", cat}}).status,
      202U);
  ASSERT_EQ(finish("team-a", "wrong"), "failed");
  EXPECT_NE(workload("team-a", "wrong").dump().find("unauthorized"), std::string::npos)
      << workload("team-a", "wrong").dump();
  EXPECT_NE(workload("team-a", "wrong").dump().find("refused the pull secret"), std::string::npos)
      << workload("team-a", "wrong").dump();
  ASSERT_EQ(
      submit(
          "team-a", "missing",
          {{"image", registry_ + "/team-a/busybox:nope"}, {"pullSecret", "reg"}, {"command", cat}})
          .status,
      202U);
  ASSERT_EQ(finish("team-a", "missing"), "failed");
  EXPECT_NE(workload("team-a", "missing").dump().find("not found"), std::string::npos)
      << workload("team-a", "missing").dump();
  EXPECT_NE(workload("team-a", "missing").dump().find("MANIFEST_UNKNOWN"), std::string::npos)
      << workload("team-a", "missing").dump();

  // The registry stopped: the task waits in ImagePullBackOff, its pull tried again after 1 s
  // and 2 s (the agent's container { pull_retries = 2 }), then fails saying it cannot be
  // reached and how often it was tried.
  registry_process_->stop();
  ASSERT_EQ(
      submit("team-a", "offline", {{"image", tag}, {"pullSecret", "reg"}, {"command", cat}}).status,
      202U);
  std::string waiting;
  for (int i = 0; i < 300 && waiting.empty(); ++i) {
    const json task = workload("team-a", "offline")["status"]["tasks"][0];
    if (task.value("progress", "").starts_with("ImagePullBackOff (retry ")) {
      waiting = task.dump();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(waiting.empty()) << workload("team-a", "offline").dump();
  EXPECT_NE(waiting.find("cannot reach the registry"), std::string::npos) << waiting;
  ASSERT_EQ(finish("team-a", "offline"), "failed");
  EXPECT_NE(workload("team-a", "offline")
                .dump()
                .find("cannot reach the registry at https://" + registry_),
            std::string::npos)
      << workload("team-a", "offline").dump();
  EXPECT_NE(workload("team-a", "offline").dump().find("(the pull was tried 3 times)"),
            std::string::npos)
      << workload("team-a", "offline").dump();

  // The password: in no file of the node (its work dir, its credentials tmpfs, its logs), and in
  // the audit log only as the HMAC the audit sink writes for it.
  EXPECT_TRUE(filesHolding(dir_ / "gpu-a", kPassword).empty());
  for (const fs::directory_entry& e : fs::directory_iterator("/dev/shm")) {
    if (e.path().filename().string().starts_with("tessera-gpu-a")) {
      EXPECT_TRUE(filesHolding(e.path(), kPassword).empty()) << e.path();
    }
  }
  EXPECT_EQ(slurp(dir_ / "agent.out").find(kPassword), std::string::npos);
  EXPECT_EQ(slurp(dir_ / "agent.out.err").find(kPassword), std::string::npos);
  const std::string audit = slurp(dir_ / "audit.log");
  EXPECT_EQ(audit.find(kPassword), std::string::npos);
  const CmdResult hmac = runTessera("audit hash --salt-file " + (dir_ / "audit.log.salt").string() +
                                        " - < " + (dir_ / "password").string(),
                                    dir_ / "hash.err");
  ASSERT_EQ(hmac.rc, 0) << hmac.err;
  std::string h = hmac.out;
  while (!h.empty() && std::isspace(static_cast<unsigned char>(h.back()))) {
    h.pop_back();
  }
  ASSERT_TRUE(h.starts_with("hmac-sha256:")) << h;
  EXPECT_NE(audit.find(h), std::string::npos) << "no audit record of the pull secret's read";
  EXPECT_NE(audit.find("pull secret read"), std::string::npos);
}

// A pull that takes a while says how far it got, in `tessera show` (the registry is reached at
// 150 kB/s: its 1 MB of layers take about 7 s), then the task runs.
TEST_F(RegistryTest, ASlowPullSaysHowFarItGot) {
  putSecret("team-a", "login", {{"username", "team-a"}, {"password", kPassword}});
  ASSERT_EQ(submit("team-a", "slow",
                   {{"image", slow_registry_ + "/team-a/busybox:1"},
                    {"pullSecret", "login"},
                    {"command", {"sh", "-c", "cat /etc/image-marker"}}})
                .status,
            202U);
  // The tenant's token where `tessera login` keeps it (not on a command line).
  writePrivate(dir_ / ".tessera-token", tokens_["team-a"]);
  const std::string env = "TESSERA_ADDR=" + address_ +
                          " TESSERA_CACERT=" + (dir_ / "ca.pem").string() +
                          " TESSERA_TENANT=team-a HOME=" + dir_.string();
  std::string shown;
  std::vector<std::string> states;
  const std::regex progress(R"(starting: pulling image \(([0-9]+) (kB|MB) of 1\.[0-9] MB\))");
  std::smatch m;
  ASSERT_TRUE(waitFor(
      [&] {
        shown = runTessera("show slow", dir_ / "show.err", env).out;
        const size_t at = shown.find("  0     ");
        states.push_back(at == std::string::npos ? "?"
                                                 : shown.substr(at, shown.find('\n', at) - at));
        return std::regex_search(shown, m, progress) && m[2] == "kB" && m[1] != "0";
      },
      30s))
      << shown << slurp(dir_ / "show.err") << ::testing::PrintToString(states);
  ASSERT_EQ(finish("team-a", "slow"), "succeeded") << workload("team-a", "slow").dump();
  EXPECT_NE(slurp(dir_ / "gpu-a" / "team-a.slow.0" / "stdout.log").find("tessera busybox image"),
            std::string::npos);
  // Once running, no progress is left in its status.
  EXPECT_EQ(workload("team-a", "slow").dump().find("pulling image"), std::string::npos);
}

}  // namespace
}  // namespace tessera::integration
