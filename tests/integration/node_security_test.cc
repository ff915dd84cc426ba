// Issue #36, items 1, 3 and 9, tried as an attacker on a shared node would: a tenant's task
// must never become its node or another tenant.
//
// NodeCredentialsTest: `tessera dev --external-agents` as root, its agent started exactly as dev
// prints it, two tenants. Tenant B's task scans /proc/*/cmdline and /proc/*/environ, reads
// /etc/passwd and /etc/group, lists /tmp, /dev/shm and the cgroup hierarchies (where the agent
// runs in a group of its own beside another named as A's task would be), tries the node's token
// file, and makes a heartbeat as its node with every token it could find. It finds no token, sees
// no process but its own tree and no name of tenant A's. The same look from outside the sandbox (as
// B's user on the node) sees the node's processes, so the probe can find what is there. When the
// agent is killed with SIGKILL, A's task is fenced by its shim and its credentials go with it.
//
// NodeLimitsTest: a task that asks for no CPU or memory is held to its node share or the
// defaults; one that tries 1,000 processes is refused past the pids limit; its /dev/shm is
// charged to its memory and gone when it ends.
//
// Needs root (tenants' users, namespaces, cgroups); skipped otherwise, saying why.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "process.h"
#include "test_certs.h"
#include "util.h"

namespace tessera::integration {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr char kSecretA[] = "a-only-secret-51d0e2";

// Why these tests cannot run here ("" : they can).
std::string cannotRun() {
  if (::geteuid() != 0) {
    return "needs root: the agent runs each tenant's tasks as its own Unix user, in namespaces";
  }
  if (!fs::exists("/usr/sbin/useradd")) {
    return "needs /usr/sbin/useradd to create the tenants' users";
  }
  if (!fs::exists("/usr/bin/python3")) {
    return "needs /usr/bin/python3 for the probe's heartbeat";
  }
  // What the agent's own probe (agent::probeSandbox) tries: a machine or container that does
  // not let root make PID and mount namespaces runs tasks without a view of their own.
  if (std::system("unshare --pid --fork --mount --mount-proc true >/dev/null 2>&1") != 0) {
    return "needs a machine that lets root make PID and mount namespaces (unshare failed)";
  }
  return "";
}

// The groups a machine's other agents and services have beside the agent's own, in each cgroup
// v1 hierarchy a task has a group in: the agent in a group of its own ("node-agent.service", as
// a service would be), and beside it a group named as tenant A's task would be, which no task's
// view may show. The agent joins its groups in its own process before it starts (`join()`);
// the groups go when this does. On v2 only the neighbour is made (the test's group may hold
// processes, so the agent cannot go below it).
class NeighbourGroups {
 public:
  static constexpr char kName[] = "nsec-a.neighbour";

  NeighbourGroups() {
    std::map<std::string, std::string> self;  // Controller ("" for v2) -> the test's group.
    std::ifstream in("/proc/self/cgroup");
    for (std::string line; std::getline(in, line);) {
      const size_t a = line.find(':');
      const size_t b = line.find(':', a + 1);
      std::stringstream ctrls(line.substr(a + 1, b - a - 1));
      const std::string path = line.substr(b + 1);
      if (b == a + 1) {
        self[""] = path;
      }
      for (std::string c; std::getline(ctrls, c, ',');) {
        self[c] = path;
      }
    }
    const fs::path root = "/sys/fs/cgroup";
    if (fs::exists(root / "cgroup.controllers")) {
      make(root / fs::path(self[""]).relative_path() / kName);
      return;
    }
    for (const char* controller : {"cpu", "memory", "pids", "devices"}) {
      const fs::path own = root / controller / fs::path(self[controller]).relative_path();
      if (self.contains(controller) && fs::is_directory(own)) {
        make(own / kName);
        if (make(own / "node-agent.service")) {
          procs_.push_back((own / "node-agent.service" / "cgroup.procs").string());
        }
      }
    }
  }
  ~NeighbourGroups() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
      removeTree(*it);
    }
  }
  // In a forked child: joins the agent's groups (plain writes).
  void join() const {
    for (const std::string& p : procs_) {
      std::ofstream(p) << ::getpid();
    }
  }
  // Where the neighbours are (each must exist on the node for the check to mean anything).
  std::vector<fs::path> neighbours() const {
    std::vector<fs::path> out;
    for (const fs::path& m : made_) {
      if (m.filename() == kName) {
        out.push_back(m);
      }
    }
    return out;
  }

 private:
  bool make(const fs::path& dir) {
    std::error_code ec;
    if (!fs::create_directory(dir, ec) || ec) {
      return false;
    }
    made_.push_back(dir);
    return true;
  }
  // Groups are removed deepest first (rmdir: their files are the kernel's); what the agent
  // left below its own group goes too, once its processes are gone.
  static void removeTree(const fs::path& dir) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.is_directory(ec) && !e.is_symlink(ec)) {
        removeTree(e.path());
      }
    }
    for (int i = 0; i < 50 && ::rmdir(dir.c_str()) != 0 && errno == EBUSY; ++i) {
      std::this_thread::sleep_for(100ms);
    }
  }

  std::vector<fs::path> made_;
  std::vector<std::string> procs_;
};

// A shell command line run as is (`sh -c`), with the build tree first in PATH: how a person
// runs what `tessera dev` prints. `exec` keeps the pid the command's.
class Shell {
 public:
  Shell(const std::string& line, const fs::path& out, const NeighbourGroups* groups = nullptr)
      : out_(out) {
    pid_ = ::fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (groups != nullptr) {
        groups->join();
      }
      std::freopen(out.c_str(), "w", stdout);
      std::freopen((out.string() + ".err").c_str(), "w", stderr);
      const std::string path = binaryDir() + ":/usr/sbin:/usr/bin:/sbin:/bin";
      ::setenv("PATH", path.c_str(), 1);
      ::unsetenv("TESSERA_TOKEN");
      ::execl("/bin/sh", "sh", "-c", ("exec " + line).c_str(), nullptr);
      ::_exit(127);
    }
  }
  ~Shell() { stop(SIGKILL); }
  pid_t pid() const { return pid_; }
  int stop(int sig) {
    if (pid_ <= 0) {
      return -1;
    }
    ::kill(pid_, sig);
    const int status = reap(pid_, std::chrono::minutes(1), "the agent");
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  std::string errors() const { return slurp(out_.string() + ".err"); }

 private:
  pid_t pid_ = -1;
  fs::path out_;
};

// Tenant A's task: reads its identity token and secrets and holds them while it runs.
json holder() {
  return {{"command",
           {"sh", "-c",
            "cat \"$TESSERA_IDENTITY_TOKEN_FILE\" >/dev/null && cat \"$TESSERA_SECRETS_FILE\" "
            ">/dev/null && echo \"ready $TESSERA_CREDENTIALS_DIR\"; exec sleep 300"}},
          {"secrets", {{"kv", {"app/db"}}}},
          {"gracePeriod", 1}};
}

// What tenant B's probe looks at, section by section; run in its task and, as the control, on
// the node as its user.
constexpr char kLook[] =
    "echo '== procs'\n"
    "for p in /proc/[0-9]*; do printf '%s ' \"${p#/proc/}\"; tr '\\0\\n' '  ' < $p/cmdline "
    "2>/dev/null; echo; done\n"
    "echo '== environ'\n"
    "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; done\n"
    "echo '== passwd'\ncat /etc/passwd\n"
    "echo '== group'\ncat /etc/group\n"
    "echo '== names'\n"
    "ls -aR /tmp /dev/shm /sys/fs/cgroup 2>/dev/null | head -5000\n";

// The heartbeat the probe makes as its node with every token it could read anywhere: in /proc,
// in the node's token file, in its own credentials. Prints "heartbeat <status>" for each.
constexpr char kHeartbeat[] = R"(
import glob, os, re, ssl, urllib.error, urllib.request
text = ''
for p in glob.glob('/proc/[0-9]*'):
    for f in ('cmdline', 'environ'):
        try:
            text += open(p + '/' + f, 'rb').read().decode('latin1') + '\n'
        except Exception:
            pass
for f in (os.environ.get('NODE_TOKEN_FILE', ''), os.environ.get('TESSERA_IDENTITY_TOKEN_FILE', ''),
          os.environ.get('TESSERA_SECRETS_FILE', '')):
    try:
        text += open(f).read() + '\n'
    except Exception:
        pass
tokens = set(re.findall(r'tsr\.[A-Za-z0-9]{24}', text))
try:
    tokens.add(open(os.environ['TESSERA_IDENTITY_TOKEN_FILE']).read().strip())
except Exception:
    pass
print('candidates', len(tokens))
ctx = ssl.create_default_context(cafile=os.environ['CA'])
for t in sorted(tokens):
    req = urllib.request.Request(os.environ['ADDR'] + '/v1/sys/nodes/' + os.environ['NODE'] +
                                 '/heartbeat', data=b'{}', method='PUT',
                                 headers={'X-Tessera-Token': t})
    try:
        code = urllib.request.urlopen(req, context=ctx).status
    except urllib.error.HTTPError as e:
        code = e.code
    print('heartbeat', code)
)";

// The probe's sections, by their "== name" headers.
std::map<std::string, std::string> sections(const std::string& out) {
  std::map<std::string, std::string> by;
  std::string current;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("== ", 0) == 0) {
      current = line.substr(3);
      continue;
    }
    by[current] += line + "\n";
  }
  return by;
}

// The first field of each line (a user's or group's name).
std::set<std::string> names(const std::string& table) {
  std::set<std::string> out;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) {
      out.insert(line.substr(0, line.find(':')));
    }
  }
  return out;
}

// The node's processes' command lines and environments, read as root.
std::string everyCommandLineAndEnvironment() {
  std::string all;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") == std::string::npos) {
      all += slurp(e.path() / "cmdline") + "\n" + slurp(e.path() / "environ") + "\n";
    }
  }
  return all;
}

TEST(NodeCredentialsTest, ATaskFindsNoTokenNoOtherProcessAndNoOtherTenant) {
  if (const std::string why = cannotRun(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const fs::path dir = fs::temp_directory_path() / ("tessera-nsec-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  std::string credentials_root;
  // Beside the agent's group, a group named as A's task would be: on a node, another agent's or
  // service's. The probe must not see it either.
  const NeighbourGroups neighbours;
  for (const fs::path& n : neighbours.neighbours()) {
    ASSERT_TRUE(fs::is_directory(n)) << n;
  }
  ASSERT_FALSE(neighbours.neighbours().empty()) << "no cgroup hierarchy to plant a neighbour in";
  {
    Process dev({"dev", "--data-dir", dir.string(), "--addr", "127.0.0.1:0", "--nodes", "t4-2x:1",
                 "--external-agents"},
                dir / "dev.out");
    json info;
    std::smatch m;
    std::string printed;
    ASSERT_TRUE(waitFor(
        [&] {
          info = json::parse(slurp(dir / "dev.json"), nullptr, false);
          printed = dev.output();
          return info.is_object() && info.value("pid", 0) == dev.pid() &&
                 std::regex_search(printed, m, std::regex(R"(  (tessera agent run [^\n]+)\n)"));
        },
        30s))
        << printed << dev.errors();
    const std::string root = info["root_token"];
    const std::string line = m[1];
    // The printed command carries no token at all: the node's own credential, in a file of
    // root's that nobody else may read.
    EXPECT_EQ(line.find("tsr."), std::string::npos) << line;
    EXPECT_EQ(line.find(root), std::string::npos) << line;
    std::smatch f;
    ASSERT_TRUE(std::regex_search(line, f, std::regex(R"(--token-file (\S+))"))) << line;
    const std::string token_file = f[1];
    struct stat st {};
    ASSERT_EQ(::stat(token_file.c_str(), &st), 0) << token_file;
    EXPECT_EQ(st.st_mode & 0777, 0600U);
    EXPECT_EQ(st.st_uid, 0U);
    const std::string node_token = slurp(token_file);
    ASSERT_EQ(node_token.rfind("tsr.", 0), 0U) << node_token;
    ASSERT_NE(node_token, root);
    const Client c(info["address"], slurp(info["ca_cert"].get<std::string>()));
    Response self = c.call("GET", "/v1/auth/token/lookup-self", node_token);
    ASSERT_EQ(self.status, 200U) << self.raw;
    EXPECT_EQ(self.body["data"]["policies"], json::array({"node-t4-2x-0"})) << self.raw;

    Shell agent(line, dir / "agent.out", &neighbours);
    ASSERT_TRUE(waitFor(
        [&] {
          return agent.errors().find("registered") != std::string::npos &&
                 agent.errors().find("each task runs in namespaces of its own") !=
                     std::string::npos;
        },
        30s))
        << agent.errors();
    std::map<std::string, std::string> tokens;
    for (const std::string tenant : {"nsec-a", "nsec-b"}) {
      tokens[tenant] = tenantWithAdmin(c, root, tenant, {{"quota", {{"gpu", 1}}}});
      ASSERT_FALSE(tokens[tenant].empty()) << tenant;
    }
    ASSERT_EQ(c.call("POST", "/v1/tenants/nsec-a/secrets/kv/data/app/db", tokens["nsec-a"],
                     {{"data", {{"password", kSecretA}}}})
                  .status,
              200U);
    ASSERT_EQ(
        c.call("POST", "/v1/tenants/nsec-a/workloads/holder", tokens["nsec-a"], holder()).status,
        202U);
    const fs::path node = dir / "nodes" / "t4-2x-0";
    std::string ready;
    ASSERT_TRUE(waitFor(
        [&] {
          ready = slurp(node / "nsec-a.holder.0" / "stdout.log");
          return ready.rfind("ready ", 0) == 0 && ready.back() == '\n';
        },
        30s))
        << c.call("GET", "/v1/tenants/nsec-a/workloads/holder", tokens["nsec-a"]).raw
        << agent.errors();
    const std::string folder = ready.substr(6, ready.size() - 7);
    credentials_root = fs::path(folder).parent_path().string();
    const std::string a_identity = slurp(fs::path(folder) / "identity-token");
    ASSERT_FALSE(a_identity.empty());
    // No token is on any command line or in any environment of the node's, read as root.
    const std::string everything = everyCommandLineAndEnvironment();
    EXPECT_EQ(everything.find(root), std::string::npos);
    EXPECT_EQ(everything.find(node_token), std::string::npos);

    // Tenant B's probe.
    const std::string script = std::string(kLook) + "echo '== token-file'\ncat " + token_file +
                               " 2>&1\necho '== heartbeat'\n/usr/bin/python3 -c \"$PROBE\"\n" +
                               "echo '== end'\n";
    const json probe = {{"command", {"sh", "-c", script}},
                        {"env",
                         {{"PROBE", kHeartbeat},
                          {"NODE_TOKEN_FILE", token_file},
                          {"CA", info["ca_cert"]},
                          {"ADDR", info["address"]},
                          {"NODE", "t4-2x-0"}}},
                        {"gracePeriod", 1}};
    ASSERT_EQ(c.call("POST", "/v1/tenants/nsec-b/workloads/probe", tokens["nsec-b"], probe).status,
              202U);
    std::string out;
    ASSERT_TRUE(waitFor(
        [&] {
          out = slurp(node / "nsec-b.probe.0" / "stdout.log");
          return out.find("== end\n") != std::string::npos;
        },
        60s))
        << out << slurp(node / "nsec-b.probe.0" / "stderr.log")
        << c.call("GET", "/v1/tenants/nsec-b/workloads/probe", tokens["nsec-b"]).raw;
    std::cout << "tenant B's probe printed " << out.size() << " bytes\n";
    // No token of anyone's, no secret, no name of tenant A's.
    for (const std::string& found :
         {root, node_token, a_identity, std::string(kSecretA), std::string("nsec-a")}) {
      EXPECT_EQ(out.find(found), std::string::npos) << found.substr(0, 12) << " in:\n" << out;
    }
    const auto got = sections(out);
    // Its own processes only: the shell that runs the probe and what it ran.
    std::istringstream procs(got.at("procs"));
    int seen = 0;
    for (std::string p; std::getline(procs, p);) {
      ++seen;
      for (const char* other : {"tessera dev", "tessera agent", "tessera-shim", "sleep 300"}) {
        EXPECT_EQ(p.find(other), std::string::npos) << p;
      }
      EXPECT_NE(p.find("sh -c"), std::string::npos) << p;
    }
    EXPECT_GE(seen, 1);
    EXPECT_LE(seen, 3) << got.at("procs");
    const passwd* b_user = ::getpwnam("tessera-nsec-b");
    ASSERT_NE(b_user, nullptr);
    EXPECT_EQ(names(got.at("passwd")), (std::set<std::string>{"root", "tessera-nsec-b", "nobody"}))
        << got.at("passwd");
    EXPECT_EQ(names(got.at("group")).count("tessera-nsec-a"), 0U) << got.at("group");
    // Not there at all in its view (its /tmp is its own), and not readable where it is.
    EXPECT_TRUE(got.at("token-file").find("No such file") != std::string::npos ||
                got.at("token-file").find("Permission denied") != std::string::npos)
        << got.at("token-file");
    // Every token it found is refused as its node (its own identity token is a JWT for others,
    // never a token of this API).
    const std::string& beats = got.at("heartbeat");
    EXPECT_NE(beats.find("candidates "), std::string::npos) << beats;
    EXPECT_EQ(std::regex_replace(beats, std::regex("heartbeat 403\n|candidates \\d+\n"), ""), "")
        << beats;
    // The control for the heartbeat: the node's token, which the probe never got, is taken.
    EXPECT_NE(c.call("PUT", "/v1/sys/nodes/t4-2x-0/heartbeat", node_token, json::object()).status,
              403U);

    // The control for the look: on the node, outside a task's namespaces, as B's own user, the
    // same look sees the node's processes (the dev server, the agent).
    const fs::path control = dir / "control.out";
    std::cout << std::flush;
    std::fflush(stdout);
    const pid_t look = ::fork();
    if (look == 0) {
      std::freopen(control.c_str(), "w", stdout);
      std::freopen("/dev/null", "w", stderr);
      if (::setgid(b_user->pw_gid) != 0 || ::setuid(b_user->pw_uid) != 0) {
        ::_exit(126);
      }
      ::execl("/bin/sh", "sh", "-c", kLook, nullptr);
      ::_exit(127);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(look, &status, 0), look);
    const auto outside = sections(slurp(control));
    EXPECT_NE(outside.at("procs").find("tessera dev"), std::string::npos) << outside.at("procs");
    EXPECT_NE(outside.at("procs").find("tessera agent run"), std::string::npos);
    EXPECT_NE(outside.at("passwd").find("tessera-nsec-a"), std::string::npos);

    // Item 9: the agent dies (kill -9). A's task runs on until the lease the agent left runs
    // out; then its shim stops it and takes its credentials, though no agent came back.
    const std::string holder_dir = (node / "nsec-a.holder.0").string();
    EXPECT_EQ(agent.stop(SIGKILL), -SIGKILL);
    EXPECT_TRUE(fs::exists(fs::path(folder) / "identity-token"));
    EXPECT_TRUE(waitFor([&] { return fs::exists(holder_dir + "/exit"); }, 30s));
    EXPECT_EQ(slurp(holder_dir + "/exit"), "15 1\n");  // SIGTERM, fenced.
    EXPECT_TRUE(waitFor([&] { return !fs::exists(folder); }, 5s)) << folder;
    EXPECT_EQ(dev.stop(SIGTERM), 0) << dev.errors();
  }
  if (!credentials_root.empty()) {
    fs::remove_all(credentials_root);  // Only when a check above failed.
  }
  fs::remove_all(dir);
}

// A server and one agent node ("lim-node", two T4s, 32 cores and 128 GiB as declared) with a
// pids limit of 200 per task; one tenant.
class NodeLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = cannotRun(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    dir_ = fs::temp_directory_path() / ("tessera-limits-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
    auto ca = writeTestCertificates(dir_);
    ASSERT_TRUE(ca.isOk()) << ca.status().toString();
    std::ofstream(dir_ / "server.hcl")
        << baseServerConfig(dir_) << "scheduler { pass_interval_ms = 50 }\n"
        << "nodes {\n  agents = \"lim-node=t4-2x\"\n  lease_ttl_ms = 4000\n}\n";
    server_ = std::make_unique<Process>(
        std::vector<std::string>{"server", "-config=" + (dir_ / "server.hcl").string()},
        dir_ / "server.out");
    const std::optional<ServerBanner> banner = waitForServer(*server_);
    ASSERT_TRUE(banner) << server_->output() << server_->errors();
    root_ = banner->root;
    client_ = std::make_unique<Client>(banner->address, *ca);
    const json policy = {
        {"path", {{"sys/nodes/lim-node/*", {{"capabilities", {"read", "update"}}}}}}};
    ASSERT_EQ(client_->call("POST", "/v1/sys/policies/node-lim", root_, policy).status, 204U);
    // A node token of 4 s: the agent must renew it (at half its life) to keep its node.
    Response t = client_->call("POST", "/v1/auth/token/create", root_,
                               {{"policies", {"node-lim"}}, {"ttl", "4s"}});
    ASSERT_EQ(t.status, 200U) << t.raw;
    node_token_ = t.body["auth"]["client_token"];
    tenant_ = tenantWithAdmin(*client_, root_, "lim", {{"quota", {{"gpu", 2}}}});
    ASSERT_FALSE(tenant_.empty());
    agent_ = std::make_unique<Process>(
        std::vector<std::string>{"agent", "run", "--node", "lim-node", "--backend", "sim",
                                 "--profile", "t4-2x", "--address", banner->address, "--ca-cert",
                                 (dir_ / "ca.pem").string(), "--token-file",
                                 tokenFile(dir_, "lim-node.token", node_token_), "--work-dir",
                                 (dir_ / "lim-node").string(), "--task-pids-max", "200"},
        dir_ / "agent.out");
    ASSERT_TRUE(
        waitFor([&] { return agent_->errors().find("registered") != std::string::npos; }, 20s))
        << agent_->errors();
  }
  void TearDown() override {
    agent_.reset();
    server_.reset();
    if (!dir_.empty()) {
      fs::remove_all(dir_);
    }
  }
  void submit(const std::string& name, const json& body) {
    Response r = client_->call("POST", "/v1/tenants/lim/workloads/" + name, tenant_, body);
    ASSERT_EQ(r.status, 202U) << r.raw;
  }
  fs::path taskDir(const std::string& name) { return dir_ / "lim-node" / ("lim." + name + ".0"); }
  // Waits for `text` in the task's stdout; returns the stdout.
  std::string waitForOutput(const std::string& name, const std::string& text) {
    std::string out;
    EXPECT_TRUE(waitFor(
        [&] {
          out = slurp(taskDir(name) / "stdout.log");
          return out.find(text) != std::string::npos;
        },
        30s))
        << out << slurp(taskDir(name) / "stderr.log")
        << client_->call("GET", "/v1/tenants/lim/workloads/" + name, tenant_).raw
        << agent_->errors();
    return out;
  }
  // The task's cgroup folders on the node (one per hierarchy), found by its name.
  std::vector<fs::path> cgroupsOf(const std::string& name) {
    std::vector<fs::path> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator("/sys/fs/cgroup", ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_directory(ec) && it->path().filename() == "lim." + name + ".0") {
        out.push_back(it->path());
        it.disable_recursion_pending();
      }
    }
    return out;
  }
  // The first of `files` found in the task's cgroups, as text ("" : none).
  std::string cgroupValue(const std::string& name, const std::vector<std::string>& files) {
    for (const fs::path& d : cgroupsOf(name)) {
      for (const std::string& f : files) {
        if (fs::exists(d / f)) {
          std::string v = slurp(d / f);
          return v.substr(0, v.find('\n'));
        }
      }
    }
    return "";
  }
  void cancel(const std::string& name) {
    ASSERT_EQ(client_->call("DELETE", "/v1/tenants/lim/workloads/" + name, tenant_).status, 204U);
  }

  fs::path dir_;
  std::string root_;
  std::string node_token_;
  std::string tenant_;
  std::unique_ptr<Process> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Process> agent_;
};

TEST_F(NodeLimitsTest, ATaskWithoutLimitsIsHeldToItsDefaults) {
  // No GPU, no CPU, no memory asked: the server's defaults (1 core, 2 GiB).
  submit("plain", {{"command", {"sh", "-c", "echo up; exec sleep 300"}}, {"gracePeriod", 1}});
  // One of the node's two GPUs: half its 32 cores and 128 GiB.
  submit("half", {{"gpu", {{"count", 1}}},
                  {"command", {"sh", "-c", "echo up; exec sleep 300"}},
                  {"gracePeriod", 1}});
  waitForOutput("plain", "up");
  waitForOutput("half", "up");
  const std::vector<std::string> memory = {"memory.limit_in_bytes", "memory.max"};
  const std::vector<std::string> cpu = {"cpu.cfs_quota_us", "cpu.max"};
  EXPECT_EQ(cgroupValue("plain", memory), std::to_string(int64_t{2048} << 20));
  EXPECT_EQ(cgroupValue("half", memory), std::to_string(int64_t{64 * 1024} << 20));
  const std::string plain_cpu = cgroupValue("plain", cpu);
  const std::string half_cpu = cgroupValue("half", cpu);
  EXPECT_EQ(plain_cpu.substr(0, plain_cpu.find(' ')), "100000");  // 1 core per 100 ms.
  EXPECT_EQ(half_cpu.substr(0, half_cpu.find(' ')), "1600000");   // 16 cores.
  EXPECT_EQ(cgroupValue("plain", {"pids.max"}), "200");
}

// The agent's token, given in a file, lives 4 s; the agent renews it and keeps its node.
TEST_F(NodeLimitsTest, TheAgentRenewsTheNodesTokenWhileItRuns) {
  std::this_thread::sleep_for(6s);
  Response self = client_->call("GET", "/v1/auth/token/lookup-self", node_token_);
  ASSERT_EQ(self.status, 200U) << self.raw << agent_->errors();
  EXPECT_GT(self.body["data"]["ttl"].get<int64_t>(), 0);
  submit("later", {{"command", {"sh", "-c", "echo up"}}});
  waitForOutput("later", "up");
  EXPECT_EQ(agent_->errors().find("cannot renew"), std::string::npos) << agent_->errors();
}

TEST_F(NodeLimitsTest, AThousandProcessesAreRefusedPastThePidsLimit) {
  const std::string script = R"(
import os, time
made = refused = 0
for _ in range(1000):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        made += 1
    except OSError:
        refused += 1
print('made', made, 'refused', refused, flush=True)
)";
  submit("forks", {{"command", {"/usr/bin/python3", "-c", script}}, {"gracePeriod", 1}});
  const std::string out = waitForOutput("forks", "refused");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(made (\d+) refused (\d+))"))) << out;
  const int made = std::stoi(m[1]);
  const int refused = std::stoi(m[2]);
  EXPECT_LT(made, 200) << out;
  EXPECT_EQ(made + refused, 1000);
  EXPECT_GT(refused, 800) << out;
}

TEST_F(NodeLimitsTest, ATasksDevShmIsChargedToItsMemoryAndGoneWhenItEnds) {
  struct statvfs before {};
  ASSERT_EQ(::statvfs("/dev/shm", &before), 0);
  submit("shm", {{"memoryMiB", 256},
                 {"command",
                  {"sh", "-c",
                   "dd if=/dev/zero of=/dev/shm/big bs=1M count=100 2>/dev/null && "
                   "echo written; exec sleep 300"}},
                 {"gracePeriod", 1}});
  waitForOutput("shm", "written");
  // Charged to the task: its memory cgroup holds the 100 MiB.
  const std::string usage = cgroupValue("shm", {"memory.usage_in_bytes", "memory.current"});
  ASSERT_FALSE(usage.empty());
  EXPECT_GE(std::stoll(usage), int64_t{100} << 20);
  // Not in the node's /dev/shm.
  struct statvfs during {};
  ASSERT_EQ(::statvfs("/dev/shm", &during), 0);
  const int64_t grown =
      (static_cast<int64_t>(before.f_bfree) - static_cast<int64_t>(during.f_bfree)) *
      static_cast<int64_t>(before.f_frsize);
  EXPECT_LT(grown, int64_t{50} << 20);
  const std::vector<fs::path> groups = cgroupsOf("shm");
  ASSERT_FALSE(groups.empty());
  cancel("shm");
  // Gone with it: nothing of the task is left to hold its namespace (and so its tmpfs).
  EXPECT_TRUE(waitFor(
      [&] {
        for (const fs::path& g : groups) {
          if (fs::exists(g)) {
            return false;
          }
        }
        return !fs::exists(dir_ / "lim-node" / ".tmp" / "lim.shm.0");
      },
      20s));
  // More than its memory does not fit: writing 100 MiB with 64 is refused, or the task is
  // killed for its memory.
  submit("over", {{"memoryMiB", 64},
                  {"command",
                   {"sh", "-c",
                    "dd if=/dev/zero of=/dev/shm/big bs=1M count=100 2>&1; "
                    "echo dd-exit $?"}}});
  json status;
  ASSERT_TRUE(waitFor(
      [&] {
        status = client_->call("GET", "/v1/tenants/lim/workloads/over", tenant_).body;
        const std::string phase = status["data"]["status"].value("phase", "");
        return phase == "failed" || phase == "succeeded";
      },
      30s))
      << status.dump();
  const std::string out = slurp(taskDir("over") / "stdout.log");
  EXPECT_TRUE(
      status["data"]["status"].value("reason", "").find("out of memory") != std::string::npos ||
      (out.find("dd-exit") != std::string::npos && out.find("dd-exit 0") == std::string::npos))
      << status.dump() << out;
}

}  // namespace
}  // namespace tessera::integration
