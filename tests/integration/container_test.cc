// Issue 25's must-shows: workloads as OCI containers, through the real server and real agents
// (`tessera agent run`, simulated GPUs, each tenant's own Unix user), run by `runc`. The image
// is built at test time from Debian's busybox-static by scripts/make-busybox-image (two layers,
// the second with a whiteout); nothing is downloaded. These tests need root, runc and
// busybox-static (scripts/bootstrap installs them): without them they fail, saying so.
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "process.h"
#include "test_certs.h"
#include "util.h"

namespace tessera::integration {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

// The pids of processes whose command line holds `marker` and whose cgroups are those of
// `node`'s agent's tasks (an agent's task groups are tessera/<node>-<work dir hash>).
std::vector<pid_t> processesOf(const std::string& node, const std::string& marker) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    std::string cmdline = slurp(e.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) != std::string::npos &&
        slurp(e.path() / "cgroup").find("/tessera/" + node + "-") != std::string::npos) {
      out.push_back(std::stoi(name));
    }
  }
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

class ContainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // What the must-shows need of the machine: a failure that says what is missing, never a
    // silent skip.
    ASSERT_EQ(::geteuid(), 0U) << "container tests need root (runc runs bundles as root here)";
    ASSERT_EQ(std::system("command -v runc >/dev/null"), 0)
        << "container tests need runc: apt-get install runc (scripts/bootstrap)";
    dir_ = fs::temp_directory_path() /
           ("tessera-containers-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    image_ = (dir_ / "busybox.tar").string();
    const std::string make = sourceDir() + "/scripts/make-busybox-image " + image_ +
                             " >/dev/null 2>" + (dir_ / "make-image.err").string();
    ASSERT_EQ(std::system(make.c_str()), 0)
        << "cannot build the test image (apt-get install busybox-static): "
        << slurp(dir_ / "make-image.err");
    auto ca = writeTestCertificates(dir_);
    ASSERT_TRUE(ca.isOk()) << ca.status().toString();
    ca_pem_ = *ca;
    std::ofstream(dir_ / "server.hcl")
        << baseServerConfig(dir_)
        << "scheduler { pass_interval_ms = 50 }\n"
        // A lease longer than the agents' fencing (2.5 s) and the shims' grace (2 s) together:
        // a container whose first process ignores SIGTERM stops only after that grace.
        << "nodes {\n  agents = \"gpu-a=t4-2x,gpu-b=t4-2x\"\n  lease_ttl_ms = 6000\n}\n";
    server_ = std::make_unique<Process>(
        std::vector<std::string>{"server", "-config=" + (dir_ / "server.hcl").string()},
        dir_ / "server.out");
    const std::optional<ServerBanner> banner = waitForServer(*server_);
    ASSERT_TRUE(banner) << server_->output() << server_->errors();
    address_ = banner->address;
    client_ = std::make_unique<Client>(address_, ca_pem_);
    root_ = banner->root;
    ASSERT_FALSE(root_.empty()) << server_->output();
    for (const std::string node : {"gpu-a", "gpu-b"}) {
      const json policy = {
          {"path", {{"sys/nodes/" + node + "/*", {{"capabilities", {"read", "update"}}}}}}};
      ASSERT_EQ(call("POST", "/v1/sys/policies/node-" + node, root_, policy).status, 204U);
      Response t = call("POST", "/v1/auth/token/create", root_,
                        {{"policies", {"node-" + node}}, {"ttl", "1h"}});
      ASSERT_EQ(t.status, 200U) << t.raw;
      node_tokens_[node] = t.body["auth"]["client_token"];
    }
    ASSERT_EQ(call("POST", "/v1/tenants/team-1", root_, {{"quota", {{"gpu", 4}}}}).status, 204U);
    Response t = call("POST", "/v1/auth/token/create", root_,
                      {{"tenant", "team-1"}, {"policies", {"tenant-admin"}}, {"ttl", "1h"}});
    ASSERT_EQ(t.status, 200U) << t.raw;
    tenant_ = t.body["auth"]["client_token"];
  }
  void TearDown() override {
    agents_.clear();
    server_.reset();
    // Containers a stopped agent left to its shims (they would stop at its lease's end): gone
    // now, with their root filesystems' mounts, so that the folder can go.
    for (const std::string node : {"gpu-a", "gpu-b"}) {
      const fs::path c = dir_ / node / "containers";
      std::error_code ec;
      for (const fs::directory_entry& b : fs::directory_iterator(c / "bundles", ec)) {
        (void)!std::system(("runc --root " + (c / "state").string() + " delete --force " +
                            b.path().filename().string() + " >/dev/null 2>&1")
                               .c_str());
        ::umount2((b.path() / "rootfs").c_str(), MNT_DETACH);
      }
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Response call(const std::string& method, const std::string& target, const std::string& token,
                const json& body = nullptr) {
    return client_->call(method, target, token, body);
  }
  // The agent of `node`: simulated GPUs, each tenant's tasks as its own Unix user.
  void startAgent(const std::string& node, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"agent",
                                  "run",
                                  "--node",
                                  node,
                                  "--backend",
                                  "sim",
                                  "--profile",
                                  "t4-2x",
                                  "--address",
                                  address_,
                                  "--ca-cert",
                                  (dir_ / "ca.pem").string(),
                                  "--work-dir",
                                  (dir_ / node).string(),
                                  "--run-as",
                                  "tenant",
                                  "--node-mode",
                                  "development",
                                  "--fence-after-ms",
                                  "2500",
                                  "--token-file",
                                  tokenFile(dir_, node + ".token", node_tokens_[node])};
    args.insert(args.end(), extra.begin(), extra.end());
    agents_[node] = std::make_unique<Process>(args, dir_ / (node + ".out"));
  }
  std::string nodeState(const std::string& node) {
    const Response r = call("GET", "/v1/nodes", root_);
    for (const json& n : r.body["data"]["nodes"]) {
      if (n["name"] == node) {
        return n["state"];
      }
    }
    return "?";
  }
  void startAgents(const std::vector<std::string>& nodes,
                   const std::vector<std::string>& extra = {}) {
    for (const std::string& n : nodes) {
      startAgent(n, extra);
    }
    ASSERT_TRUE(waitFor(
        [&] {
          for (const std::string& n : nodes) {
            if (nodeState(n) != "ready") {
              return false;
            }
          }
          return true;
        },
        20s))
        << call("GET", "/v1/nodes", root_).raw << agents_[nodes[0]]->errors();
  }
  Response submit(const std::string& name, json body) {
    return call("POST", "/v1/tenants/team-1/workloads/" + name, tenant_, body);
  }
  json workload(const std::string& name) {
    return call("GET", "/v1/tenants/team-1/workloads/" + name, tenant_).body["data"];
  }
  std::string phase(const std::string& name) { return workload(name)["status"].value("phase", ""); }
  bool waitPhase(const std::string& name, const std::string& want, std::chrono::seconds s = 30s) {
    return waitFor([&] { return phase(name) == want; }, s);
  }
  // `tessera logs NAME` as the tenant runs it.
  CmdResult logs(const std::string& name) {
    return runTessera("logs " + name, dir_ / "cli.err",
                      "TESSERA_ADDR=" + address_ + " TESSERA_CACERT=" + (dir_ / "ca.pem").string() +
                          " TESSERA_TENANT= HOME=" + dir_.string() + " TESSERA_TOKEN=" + tenant_);
  }
  fs::path taskDir(const std::string& node, const std::string& name) {
    return dir_ / node / ("team-1." + name + ".0");
  }
  // The node whose task folder of `name` has `text` in its stdout.log ("" : none within 20 s).
  std::string nodeLogging(const std::string& name, const std::string& text) {
    std::string found;
    waitFor(
        [&] {
          for (const std::string n : {"gpu-a", "gpu-b"}) {
            if (slurp(taskDir(n, name) / "stdout.log").find(text) != std::string::npos) {
              found = n;
              return true;
            }
          }
          return false;
        },
        20s);
    return found;
  }
  std::string agentLog(const std::string& node) { return slurp(dir_ / (node + ".out.err")); }

  fs::path dir_;
  std::string image_;
  std::string ca_pem_;
  std::string address_;
  std::string root_;
  std::string tenant_;
  std::map<std::string, std::string> node_tokens_;
  std::unique_ptr<Process> server_;
  std::unique_ptr<Client> client_;
  std::map<std::string, std::unique_ptr<Process>> agents_;
};

// Must show 1: the task runs in its image's filesystem (layer 2's marker there, layer 1's file
// whited out, the host's files absent), as its tenant's user, with its one GPU's device entry
// and CUDA_VISIBLE_DEVICES, and what it prints reaches `tessera logs`.
TEST_F(ContainerTest, RunsInItsImageAsItsTenantWithOnlyItsGpu) {
  ASSERT_NO_FATAL_FAILURE(startAgents({"gpu-a"}));
  const std::string host_only = (dir_ / "server.hcl").string();
  const std::string script =
      "cat /etc/image-marker; "
      "test -e /etc/removed-by-layer-2 && echo whiteout-ignored; "
      "test -e " +
      host_only +
      " && echo host-visible; "
      "test -e /usr/bin/cmake && echo host-visible; "
      "echo uid=$(id -u); "
      "for d in /dev/nvidia*; do echo dev=$d:$(cat $d); done; "
      "echo cvd=$CUDA_VISIBLE_DEVICES; "
      "test -s \"$TESSERA_IDENTITY_TOKEN_FILE\" && echo token-readable; "
      "touch \"$TESSERA_CREDENTIALS_DIR/new\" 2>/dev/null || echo credentials-read-only";
  Response r = submit("inside", {{"gpu", {{"count", 1}}},
                                 {"image", "oci-archive:" + image_},
                                 {"command", {"sh", "-c", script}}});
  ASSERT_EQ(r.status, 202U) << r.raw;
  ASSERT_TRUE(waitPhase("inside", "succeeded")) << workload("inside").dump() << agentLog("gpu-a");
  const CmdResult out = logs("inside");
  ASSERT_EQ(out.rc, 0) << out.err;
  EXPECT_NE(out.out.find("tessera busybox image\n"), std::string::npos) << out.out;
  EXPECT_EQ(out.out.find("whiteout-ignored"), std::string::npos) << out.out;
  EXPECT_EQ(out.out.find("host-visible"), std::string::npos) << out.out;
  const passwd* pw = ::getpwnam("tessera-team-1");
  ASSERT_NE(pw, nullptr) << "the agent made no user for team-1";
  ASSERT_NE(pw->pw_uid, 0U);
  EXPECT_NE(out.out.find("uid=" + std::to_string(pw->pw_uid) + "\n"), std::string::npos) << out.out;
  // Exactly one device entry, its GPU's, and the same GPU in CUDA_VISIBLE_DEVICES.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out.out, m, std::regex(R"(dev=/dev/nvidia[01]:(GPU-[0-9a-f-]{36})\ncvd=(GPU-[0-9a-f-]+)\n)")))
      << out.out;
  EXPECT_EQ(m[1], m[2]) << out.out;
  EXPECT_EQ(count(out.out, "dev="), 1U) << out.out;
  // Its credentials folder, read-only, where its variables say.
  EXPECT_NE(out.out.find("token-readable\ncredentials-read-only\n"), std::string::npos) << out.out;

  // The same image as a layout folder, by tag: its layers come from the node's cache (the same
  // two, unpacked once), and the task's root filesystem can be made read-only.
  const std::string layout = (dir_ / "layout").string();
  ASSERT_EQ(
      std::system((sourceDir() + "/scripts/make-busybox-image " + layout + " >/dev/null").c_str()),
      0);
  r = submit("layout", {{"image", "oci:" + layout + ":latest"},
                        {"readOnlyRootfs", true},
                        {"shmMiB", 16},
                        {"command",
                         {"sh", "-c",
                          "cat /etc/image-marker; touch /new-file || echo read-only; "
                          "df -m /dev/shm | tail -1"}}});
  ASSERT_EQ(r.status, 202U) << r.raw;
  ASSERT_TRUE(waitPhase("layout", "succeeded")) << workload("layout").dump() << agentLog("gpu-a");
  const CmdResult out2 = logs("layout");
  EXPECT_NE(out2.out.find("tessera busybox image\nread-only\n"), std::string::npos) << out2.out;
  EXPECT_TRUE(std::regex_search(out2.out, std::regex(R"(shm\s+16\s)"))) << out2.out;
  size_t layers = 0;
  for (const auto& e :
       fs::directory_iterator(dir_ / "gpu-a" / "containers" / "images" / "layers")) {
    layers += e.is_directory() ? 1 : 0;
  }
  EXPECT_EQ(layers, 2U);
  // Nothing of the finished containers is left: no bundle, no runtime state.
  EXPECT_TRUE(fs::is_empty(dir_ / "gpu-a" / "containers" / "bundles"));
}

// #41 item 4 in a container: a time-sliced task's /etc/ld.so.preload names the CUDA interposer
// (so every dynamically linked program in it loads it, whatever LD_PRELOAD says) and its caps
// are in a read-only file the interposer reads instead of the variables; the task, its tenant's
// user, can write neither. The image has a third layer with a dynamically linked CUDA program
// (the interposer's probe) and the same program linked statically, the fake libcuda.so.1 as the
// image's driver and the C and C++ libraries they need, copied from this machine. The agent
// binds libtessera-cuda-driver.so over the image's libcuda.so.1 and the driver where that needs
// it. Run with LD_PRELOAD unset, or set empty, and a cap of its own choosing in the environment,
// the dynamic probe is still held to the 64 MiB granted (the fake device has 1 GiB); so is the
// static one, which no preload reaches: its dlopen("libcuda.so.1") finds only the interposer.
TEST_F(ContainerTest, ATimeSlicedContainerGetsTheInterposerAndItsCapsReadOnly) {
  const std::string bin = binaryDir();
  const fs::path layer = dir_ / "cuda-layer";
  const std::string probe = bin + "/src/cuda/tessera_cuda_probe";
  const std::string fake = bin + "/tests/fake_cuda/lib/libcuda.so.1";
  const std::string interposer = bin + "/src/cuda/libtessera-cuda.so";
  const std::string copy =
      "set -e; x=" + layer.string() + "; mkdir -p $x/opt/cuda $x/usr/lib/x86_64-linux-gnu; cp " +
      probe + " " + probe + "_static $x/opt/cuda/; cp -L " + fake +
      " $x/usr/lib/x86_64-linux-gnu/; for l in $(ldd " + probe + " " + fake + " " + interposer +
      " | awk '$2 == \"=>\" && $3 ~ /^\\// {print $3} $1 ~ /^\\// && $2 ~ /^\\(/ {print $1}' | "
      "sort -u); do "
      // Where the library really is too (/lib64's loader is a link into the multiarch folder,
      // where a static program's dlopen looks for it).
      "for p in $l $(readlink -f $l); do mkdir -p $x$(dirname $p); cp -L $l $x$p; done; done";
  ASSERT_EQ(std::system(copy.c_str()), 0) << copy;
  const std::string image = (dir_ / "cuda.tar").string();
  ASSERT_EQ(std::system((sourceDir() + "/scripts/make-busybox-image " + image + " " +
                         layer.string() + " >/dev/null")
                            .c_str()),
            0);
  ASSERT_NO_FATAL_FAILURE(startAgents({"gpu-a"}));
  const std::string run = "/opt/cuda/tessera_cuda_probe threads --threads 4 --chunk 1048576";
  const std::string run_static =
      "/opt/cuda/tessera_cuda_probe_static threads --threads 4 --chunk 1048576";
  const std::string script =
      "echo preload=$(cat /etc/ld.so.preload); cat /etc/tessera/cuda/caps; "
      "test -w /etc/ld.so.preload && echo preload-writable; "
      "test -w /etc/tessera/cuda/caps && echo caps-writable; "
      "test -w /usr/lib/x86_64-linux-gnu/libcuda.so.1 && echo libcuda-writable; "
      "test -r \"$(cat /etc/ld.so.preload)\" && echo interposer-there; "
      "cmp -s /usr/lib/x86_64-linux-gnu/libcuda.so.1 \"$(cat /etc/ld.so.preload)\" && "
      "echo libcuda-is-the-interposer; "
      "env -u LD_PRELOAD TESSERA_CUDA_MEMORY_LIMIT=1T " +
      run + " 2>&1 | sed s/^/unset:/; LD_PRELOAD= TESSERA_CUDA_MEMORY_LIMIT=1T " + run +
      " 2>&1 | sed s/^/empty:/; env -u LD_PRELOAD TESSERA_CUDA_MEMORY_LIMIT=1T " + run_static +
      " 2>&1 | sed s/^/static:/";
  Response r = submit(
      "sliced", {{"gpu", {{"count", 1}, {"milli", 300}, {"memoryMiB", 64}, {"isolation", "none"}}},
                 {"image", "oci-archive:" + image},
                 {"env", {{"TESSERA_CUDA_MEMORY_LIMIT", "1T"}}},
                 {"command", {"sh", "-c", script}}});
  ASSERT_EQ(r.status, 202U) << r.raw;
  ASSERT_TRUE(waitPhase("sliced", "succeeded")) << workload("sliced").dump() << agentLog("gpu-a");
  const CmdResult out = logs("sliced");
  ASSERT_EQ(out.rc, 0) << out.err;
  EXPECT_TRUE(
      std::regex_search(out.out, std::regex(R"(preload=/\S+/libtessera-cuda-driver\.so\n)")))
      << out.out;
  EXPECT_NE(out.out.find("libcuda-is-the-interposer\n"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("TESSERA_CUDA_COMPUTE_SHARE=30\nTESSERA_CUDA_MEMORY_LIMIT=64M\n"),
            std::string::npos)
      << out.out;
  EXPECT_NE(out.out.find("interposer-there\n"), std::string::npos) << out.out;
  EXPECT_EQ(out.out.find("writable"), std::string::npos) << out.out;
  for (const std::string how : {"unset:", "empty:", "static:"}) {
    EXPECT_NE(out.out.find(how + "allocated=67108864\n"), std::string::npos) << out.out;
    EXPECT_NE(out.out.find(how + "refused_out_of_memory=4\n"), std::string::npos) << out.out;
    EXPECT_NE(out.out.find(how + "fake_peak=67108864\n"), std::string::npos) << out.out;
  }
}

// Volumes (docs/agent.md "Volumes"): a KV secret's keys as read-only files at a path of the
// container, as its tenant's user reads them; a tmpfs at /dev/shm of the size asked. Asked for
// wrongly, they are refused at admission naming the field; a secret that is gone by the time the
// task starts keeps it from starting, saying why.
TEST_F(ContainerTest, VolumesAreSecretsAsFilesAndTmpfsFolders) {
  Response put = call("POST", "/v1/tenants/team-1/secrets/kv/data/app/db", tenant_,
                      {{"data", {{"password", "hunter2"}, {"user", "alice"}}}});
  ASSERT_EQ(put.status / 100, 2U) << put.raw;
  for (const auto& [body, field] : std::vector<std::pair<json, std::string>>{
           {{{"command", {"true"}}, {"volumes", {{{"path", "/etc/db"}, {"kv", "app/db"}}}}},
            "volumes: volumes are mounted in containers"},
           {{{"image", "oci-archive:" + image_},
             {"volumes", {{{"path", "/proc/x"}, {"kv", "app/db"}}}}},
            "volumes[0].path"},
           {{{"image", "oci-archive:" + image_},
             {"volumes", {{{"path", "/etc/db"}, {"kv", "app/db"}, {"items", {{"user", "../u"}}}}}}},
            "volumes[0].items.user"},
           {{{"image", "oci-archive:" + image_},
             {"volumes",
              {{{"path", "/x"}, {"tmpfs", json::object()}}, {{"path", "/x"}, {"kv", "a"}}}}},
            "volumes[1].path: mounted twice"}}) {
    Response r = submit("bad", body);
    EXPECT_EQ(r.status, 400U) << r.raw;
    EXPECT_NE(r.raw.find(field), std::string::npos) << r.raw;
  }
  ASSERT_NO_FATAL_FAILURE(startAgents({"gpu-a"}));
  const std::string script =
      "cat /etc/db/password; echo; cat /etc/app/u; echo; ls /etc/app; "
      "touch /etc/db/new 2>/dev/null || echo db-read-only; "
      "df -m /dev/shm | tail -1; echo x > /dev/shm/x && echo shm-writable";
  Response r =
      submit("vols", {{"image", "oci-archive:" + image_},
                      {"volumes",
                       {{{"path", "/etc/db"}, {"kv", "app/db"}},
                        {{"path", "/etc/app"}, {"kv", "app/db"}, {"items", {{"user", "u"}}}},
                        {{"path", "/dev/shm"}, {"tmpfs", {{"sizeMiB", 32}}}}}},
                      {"command", {"sh", "-c", script}}});
  ASSERT_EQ(r.status, 202U) << r.raw;
  ASSERT_TRUE(waitPhase("vols", "succeeded")) << workload("vols").dump() << agentLog("gpu-a");
  const CmdResult out = logs("vols");
  EXPECT_NE(out.out.find("hunter2\nalice\nu\ndb-read-only\n"), std::string::npos) << out.out;
  EXPECT_TRUE(std::regex_search(out.out, std::regex(R"(tmpfs\s+32\s.*\nshm-writable\n)")))
      << out.out;
  // The secret is gone before the next task starts: it fails to start, saying which.
  ASSERT_EQ(call("DELETE", "/v1/tenants/team-1/secrets/kv/metadata/app/db", tenant_).status / 100,
            2U);
  r = submit("gone", {{"image", "oci-archive:" + image_},
                      {"volumes", {{{"path", "/etc/db"}, {"kv", "app/db"}}}},
                      {"command", {"true"}}});
  ASSERT_EQ(r.status, 202U) << r.raw;
  ASSERT_TRUE(waitPhase("gone", "failed")) << workload("gone").dump();
  EXPECT_NE(workload("gone").dump().find("volumes[0]: secret 'app/db'"), std::string::npos)
      << workload("gone").dump();
}

// Bad references are refused at admission with a 400 naming the field; an image that is not
// there, or a registry that cannot be reached, fails its task with the reason.
TEST_F(ContainerTest, ImagesThatCannotBeRunSayWhy) {
  for (const std::string bad :
       {"oci:relative/path", "oci-archive:/a/../etc/shadow", "oci:/x:b@d", "HTTP://bad host/x"}) {
    Response r = submit("bad", {{"image", bad}, {"command", {"true"}}});
    EXPECT_EQ(r.status, 400U) << bad << ": " << r.raw;
    EXPECT_NE(r.raw.find("image"), std::string::npos) << r.raw;
  }
  Response r = submit("shm", {{"shmMiB", 64}, {"command", {"true"}}});
  EXPECT_EQ(r.status, 400U) << r.raw;
  // No pull retries: an unreachable registry fails the task at once (registry_test covers the
  // back-off).
  std::ofstream(dir_ / "agent.hcl") << "container {\n  pull_retries = 0\n}\n";
  ASSERT_NO_FATAL_FAILURE(startAgents({"gpu-a"}, {"--config", (dir_ / "agent.hcl").string()}));
  ASSERT_EQ(submit("missing", {{"image", "oci-archive:/no/such/image.tar"}, {"command", {"true"}}})
                .status,
            202U);
  // A registry nobody answers at (a closed loopback port).
  ASSERT_EQ(submit("registry", {{"image", "127.0.0.1:1/team/pytorch:24.01"}, {"command", {"true"}}})
                .status,
            202U);
  // An image on the node that the tenant's user may not read (another tenant's, say): the agent,
  // which reads images as root, does not run it for them.
  const fs::path private_image = dir_ / "private.tar";
  fs::copy_file(image_, private_image);
  fs::permissions(private_image, fs::perms::owner_read | fs::perms::owner_write);
  ASSERT_EQ(
      submit("private", {{"image", "oci-archive:" + private_image.string()}, {"command", {"true"}}})
          .status,
      202U);
  ASSERT_TRUE(waitPhase("private", "failed")) << workload("private").dump();
  EXPECT_NE(workload("private").dump().find("may not read " + private_image.string()),
            std::string::npos)
      << workload("private").dump();
  ASSERT_TRUE(waitPhase("missing", "failed")) << workload("missing").dump();
  ASSERT_TRUE(waitPhase("registry", "failed")) << workload("registry").dump();
  EXPECT_NE(workload("missing").dump().find("oci-archive:/no/such/image.tar: no such file"),
            std::string::npos)
      << workload("missing").dump();
  EXPECT_NE(workload("registry")
                .dump()
                .find("image 127.0.0.1:1/team/pytorch:24.01: cannot reach the registry at "
                      "https://127.0.0.1:1"),
            std::string::npos)
      << workload("registry").dump();
}

// Issue #38, must show 4: with `container { user_namespace = true }`, root in the container is
// the tenant's user outside (the node's root is not mapped); and a CDI spec the operator wrote in
// YAML (as nvidia-ctk does) gives the task its GPU's device node, a mount and a variable, and its
// hook runs.
TEST_F(ContainerTest, RootInAUserNamespaceIsTheTenantOutsideAndCdiSpecsApply) {
  const CmdResult found = runTessera(
      "agent discover --backend sim --profile t4-2x --node gpu-a --format json", dir_ / "d.err");
  ASSERT_EQ(found.rc, 0) << found.err;
  fs::create_directories(dir_ / "cdi");
  fs::create_directories(dir_ / "driver");
  std::ofstream(dir_ / "driver" / "libcuda.so.1") << "fake driver library\n";
  std::ofstream spec(dir_ / "cdi" / "nvidia.yaml");
  spec << "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n";
  const json discovered = json::parse(found.out);
  for (const json& g : discovered["gpus"]) {
    spec << "- name: " << g["uuid"].get<std::string>() << "\n  containerEdits:\n"
         << "    deviceNodes:\n    - path: /dev/nvidia-fake" << g["index"] << "\n"
         << "      hostPath: /dev/null\n";
  }
  spec << "containerEdits:\n  env:\n  - FAKE_CDI=applied\n  mounts:\n"
       << "  - hostPath: " << (dir_ / "driver").string() << "\n"
       << "    containerPath: /usr/local/nvidia-fake\n    options: [ro, nosuid, nodev, bind]\n"
       << "  hooks:\n  - hookName: createRuntime\n    path: /bin/sh\n"
       << "    args: [sh, -c, 'echo ran > " << (dir_ / "hook-ran").string() << "']\n";
  spec.close();
  fs::permissions(dir_ / "cdi" / "nvidia.yaml", fs::perms::owner_read | fs::perms::owner_write |
                                                    fs::perms::group_read | fs::perms::others_read);
  std::ofstream(dir_ / "agent.hcl") << "container {\n  user_namespace = true\n  cdi_dir = \""
                                    << (dir_ / "cdi").string() << "\"\n}\n";
  ASSERT_NO_FATAL_FAILURE(startAgents({"gpu-a"}, {"--config", (dir_ / "agent.hcl").string()}));
  const std::string script =
      "echo uid=$(id -u); for d in /dev/nvidia-fake*; do echo dev=$d; done; "
      "cat /usr/local/nvidia-fake/libcuda.so.1; echo cdi=$FAKE_CDI; "
      "touch /usr/local/nvidia-fake/x 2>/dev/null || echo mount-read-only; "
      "ls -ln /etc/image-marker | awk '{print \"owner=\" $3}'; "
      "exec sleep 77778";
  ASSERT_EQ(submit("userns", {{"gpu", {{"count", 1}}},
                              {"gracePeriod", 1},
                              {"image", "oci-archive:" + image_},
                              {"command", {"sh", "-c", script}}})
                .status,
            202U);
  ASSERT_TRUE(waitFor(
      [&] {
        return slurp(taskDir("gpu-a", "userns") / "stdout.log").find("owner=") !=
                   std::string::npos &&
               !processesOf("gpu-a", "sleep 77778").empty();
      },
      30s))
      << workload("userns").dump() << slurp(taskDir("gpu-a", "userns") / "stderr.log");
  // Outside, the container's root is the tenant's user.
  const passwd* pw = ::getpwnam("tessera-team-1");
  ASSERT_NE(pw, nullptr);
  for (pid_t pid : processesOf("gpu-a", "sleep 77778")) {
    const std::string status = slurp("/proc/" + std::to_string(pid) + "/status");
    EXPECT_NE(status.find("\nUid:\t" + std::to_string(pw->pw_uid) + "\t"), std::string::npos)
        << status;
  }
  const std::string out = slurp(taskDir("gpu-a", "userns") / "stdout.log");
  EXPECT_NE(out.find("uid=0\n"), std::string::npos) << out;
  // Its one GPU's node only.
  EXPECT_TRUE(std::regex_search(out, std::regex("dev=/dev/nvidia-fake[01]\n")))
      << out << agentLog("gpu-a") << slurp(dir_ / "cdi" / "nvidia.yaml");
  EXPECT_EQ(count(out, "dev="), 1U) << out;
  EXPECT_NE(out.find("fake driver library\ncdi=applied\nmount-read-only\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("owner=65534"), std::string::npos) << out;  // The node's root: unmapped.
  EXPECT_EQ(slurp(dir_ / "hook-ran"), "ran\n");
  ASSERT_EQ(call("DELETE", "/v1/tenants/team-1/workloads/userns", tenant_).status / 100, 2U);
  EXPECT_TRUE(waitFor([&] { return processesOf("gpu-a", "sleep 77778").empty(); }, 20s));
}

// Must show 2, cancel: SIGTERM reaches the container's process (its handler runs), and one that
// ignores SIGTERM is killed after its grace period, leaving nothing behind.
TEST_F(ContainerTest, CancelSendsSigtermThenSigkillAfterTheGrace) {
  ASSERT_NO_FATAL_FAILURE(startAgents({"gpu-a"}));
  ASSERT_EQ(submit("polite", {{"image", "oci-archive:" + image_},
                              {"gracePeriod", 10},
                              {"command",
                               {"sh", "-c",
                                "trap 'echo got-term; exit 3' TERM; echo up; "
                                "while :; do sleep 0.1; done"}}})
                .status,
            202U);
  ASSERT_EQ(
      submit("stubborn",
             {{"image", "oci-archive:" + image_},
              {"gracePeriod", 1},
              {"command", {"sh", "-c", "trap '' TERM; echo up; while :; do sleep 77777; done"}}})
          .status,
      202U);
  ASSERT_EQ(nodeLogging("polite", "up"), "gpu-a") << agentLog("gpu-a");
  ASSERT_EQ(nodeLogging("stubborn", "up"), "gpu-a") << agentLog("gpu-a");
  ASSERT_FALSE(processesOf("gpu-a", "sleep 77777").empty());
  const auto cancelled_at = std::chrono::steady_clock::now();
  ASSERT_EQ(call("DELETE", "/v1/tenants/team-1/workloads/polite", tenant_).status, 204U);
  ASSERT_EQ(call("DELETE", "/v1/tenants/team-1/workloads/stubborn", tenant_).status, 204U);
  ASSERT_TRUE(waitFor([&] { return processesOf("gpu-a", "sleep 77777").empty(); }, 15s));
  // Not before its grace: it ignored SIGTERM.
  EXPECT_GE(std::chrono::steady_clock::now() - cancelled_at, 900ms);
  ASSERT_TRUE(waitPhase("polite", "cancelled")) << workload("polite").dump();
  ASSERT_TRUE(waitPhase("stubborn", "cancelled")) << workload("stubborn").dump();
  EXPECT_NE(slurp(taskDir("gpu-a", "polite") / "stdout.log").find("got-term"), std::string::npos);
  EXPECT_EQ(slurp(taskDir("gpu-a", "stubborn") / "stdout.log"), "up\n");
  ASSERT_TRUE(
      waitFor([&] { return fs::is_empty(dir_ / "gpu-a" / "containers" / "bundles"); }, 10s));
}

// Must show 2, preemption: a workload of higher priority takes the GPUs; the container gets
// SIGTERM (its handler runs, and it goes on), then SIGKILL after its grace, before the other
// one starts.
TEST_F(ContainerTest, PreemptionStopsTheContainerWithSigtermThenSigkill) {
  ASSERT_NO_FATAL_FAILURE(startAgents({"gpu-a"}));
  ASSERT_EQ(submit("low", {{"gpu", {{"count", 2}}},
                           {"image", "oci-archive:" + image_},
                           {"gracePeriod", 1},
                           {"command",
                            {"sh", "-c",
                             "trap 'echo got-term' TERM; echo up; "
                             "while :; do sleep 0.2; done; : low-marker-55"}}})
                .status,
            202U);
  ASSERT_EQ(nodeLogging("low", "up"), "gpu-a") << agentLog("gpu-a");
  ASSERT_FALSE(processesOf("gpu-a", "low-marker-55").empty());
  const auto preempted_at = std::chrono::steady_clock::now();
  ASSERT_EQ(submit("urgent", {{"gpu", {{"count", 2}}},
                              {"priority", 10},
                              {"image", "oci-archive:" + image_},
                              {"command", {"sh", "-c", "echo urgent-up; sleep 3"}}})
                .status,
            202U);
  ASSERT_EQ(nodeLogging("urgent", "urgent-up"), "gpu-a")
      << workload("low").dump() << workload("urgent").dump() << agentLog("gpu-a");
  // By then the preempted container was gone: SIGTERM reached it, it went on, SIGKILL ended it
  // once its grace had passed.
  EXPECT_GE(std::chrono::steady_clock::now() - preempted_at, 900ms);
  EXPECT_TRUE(processesOf("gpu-a", "low-marker-55").empty());
  EXPECT_EQ(slurp(taskDir("gpu-a", "low") / "stdout.log"), "up\ngot-term\n");
  const std::string events = call("GET", "/v1/tenants/team-1/workloads/low/events", tenant_).raw;
  EXPECT_NE(events.find("preempted by workload urgent"), std::string::npos) << events;
  ASSERT_EQ(call("DELETE", "/v1/tenants/team-1/workloads/low", tenant_).status, 204U);
}

// Must show 2, agent kill -9: the node's shim fences the container once the lease runs out,
// and the task runs again on the other node only after that, never twice at once.
TEST_F(ContainerTest, AKilledAgentsContainerIsFencedBeforeItRunsElsewhere) {
  ASSERT_NO_FATAL_FAILURE(startAgents({"gpu-a", "gpu-b"}));
  ASSERT_EQ(submit("fenced", {{"gpu", {{"count", 2}}},
                              {"image", "oci-archive:" + image_},
                              {"gracePeriod", 1},
                              {"command", {"sh", "-c", "echo start; exec sleep 88888"}}})
                .status,
            202U);
  const std::string first = nodeLogging("fenced", "start");
  ASSERT_FALSE(first.empty()) << agentLog("gpu-a") << agentLog("gpu-b");
  const std::string other = first == "gpu-a" ? "gpu-b" : "gpu-a";
  ASSERT_FALSE(processesOf(first, "sleep 88888").empty());
  EXPECT_EQ(agents_[first]->stop(SIGKILL), -SIGKILL);
  // Until the old container is gone, the task must not start on the other node.
  bool overlap = false;
  const bool moved = waitFor(
      [&] {
        const bool old_alive = !processesOf(first, "sleep 88888").empty();
        const bool new_started =
            slurp(taskDir(other, "fenced") / "stdout.log").find("start") != std::string::npos;
        overlap = overlap || (old_alive && new_started);
        return new_started && !old_alive;
      },
      40s);
  EXPECT_TRUE(moved) << workload("fenced").dump();
  EXPECT_FALSE(overlap) << "the task ran on two nodes at once";
  EXPECT_TRUE(processesOf(first, "sleep 88888").empty());
  EXPECT_EQ(count(slurp(taskDir(first, "fenced") / "stdout.log"), "start"), 1U);
  ASSERT_EQ(call("DELETE", "/v1/tenants/team-1/workloads/fenced", tenant_).status, 204U);
  ASSERT_TRUE(waitFor([&] { return processesOf(other, "sleep 88888").empty(); }, 15s));
}

// Must show 2, agent restart: a restarted agent adopts its running container, which finishes
// once, its exit reported.
TEST_F(ContainerTest, ARestartedAgentAdoptsItsContainer) {
  ASSERT_NO_FATAL_FAILURE(startAgents({"gpu-a"}));
  ASSERT_EQ(submit("steady", {{"gpu", {{"count", 1}}},
                              {"image", "oci-archive:" + image_},
                              {"command", {"sh", "-c", "echo start; sleep 4; echo done"}}})
                .status,
            202U);
  ASSERT_EQ(nodeLogging("steady", "start"), "gpu-a") << agentLog("gpu-a");
  EXPECT_EQ(agents_["gpu-a"]->stop(SIGTERM), 0);
  EXPECT_FALSE(processesOf("gpu-a", "sleep 4").empty())
      << "the container did not outlive its agent";
  startAgent("gpu-a");
  ASSERT_TRUE(waitPhase("steady", "succeeded")) << workload("steady").dump() << agentLog("gpu-a");
  EXPECT_EQ(slurp(taskDir("gpu-a", "steady") / "stdout.log"), "start\ndone\n");
  EXPECT_NE(agentLog("gpu-a").find("adopted: still running"), std::string::npos)
      << agentLog("gpu-a");
  EXPECT_TRUE(fs::is_empty(dir_ / "gpu-a" / "containers" / "bundles"));
}

// Must show 3: `tessera dev`, and a user's `tessera run hello --image oci-archive:PATH -- echo hi`
// with the image the README shows how to build.
TEST(ContainerDevTest, DevRunsAWorkloadFromAnImage) {
  ASSERT_EQ(::geteuid(), 0U) << "container tests need root (runc runs bundles as root here)";
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-dev-containers-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string image = (dir / "busybox.tar").string();
  ASSERT_EQ(
      std::system((sourceDir() + "/scripts/make-busybox-image " + image + " >/dev/null").c_str()),
      0)
      << "apt-get install busybox-static";
  {
    Process dev({"dev", "--data-dir", dir.string(), "--addr", "127.0.0.1:0", "--nodes", "t4-2x:1"},
                dir / "dev.out");
    json info;
    ASSERT_TRUE(waitFor(
        [&] {
          info = json::parse(slurp(dir / "dev.json"), nullptr, false);
          return info.is_object() && info.value("pid", 0) == dev.pid();
        },
        30s))
        << dev.errors();
    const std::string env = "TESSERA_ADDR=" + info["address"].get<std::string>() +
                            " TESSERA_CACERT=" + info["ca_cert"].get<std::string>() +
                            " TESSERA_TENANT= HOME=" + dir.string() +
                            " TESSERA_TOKEN=" + info["tenant_token"].get<std::string>();
    const CmdResult run =
        runTessera("run hello --image oci-archive:" + image + " -- echo hi", dir / "cli.err", env);
    ASSERT_EQ(run.rc, 0) << run.err;
    CmdResult logs;
    waitFor(
        [&] {
          logs = runTessera("logs hello", dir / "cli.err", env);
          return logs.rc == 0 && !logs.out.empty();
        },
        30s);
    EXPECT_EQ(logs.out, "hi\n") << logs.err << dev.errors();
    // A malformed reference: the client shows the server's 400.
    const CmdResult bad =
        runTessera("run bad --image oci:relative -- echo hi", dir / "cli.err", env);
    EXPECT_NE(bad.rc, 0);
    EXPECT_NE(bad.err.find("oci:/absolute/path"), std::string::npos) << bad.err;
    EXPECT_EQ(dev.stop(SIGTERM), 0) << dev.errors();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace tessera::integration
