// The Kubernetes API of issue #39 through the real binary, as an ML team uses it: `tessera dev`
// (agents running real processes), a kubeconfig from `tessera kubeconfig`, and the machine's
// own `/usr/bin/kubectl` (1.32), its output checked as a user reads it. One workload registry
// behind both doors: what kubectl creates, Tessera's CLI sees, and the reverse.
//
// Skipped (with the reason) only where /usr/bin/kubectl is absent; CI has it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tessera::integration::binary;
using tessera::integration::Client;
using tessera::integration::Dev;
using tessera::integration::Outcome;
using tessera::integration::runArgv;
using tessera::integration::slurp;
using tessera::integration::waitFor;

constexpr const char* kKubectl = "/usr/bin/kubectl";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class KubeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (access(kKubectl, X_OK) != 0) {
      return;
    }
    dev_ = new Dev(fs::temp_directory_path() / ("tessera-kube-" + std::to_string(::getpid())),
                   {"--nodes", "dgx-h100:1"});
  }
  static void TearDownTestSuite() {
    delete dev_;
    dev_ = nullptr;
  }
  void SetUp() override {
    if (access(kKubectl, X_OK) != 0) {
      GTEST_SKIP() << kKubectl << " is not installed on this machine (CI has it)";
    }
    ASSERT_TRUE(dev_->up()) << dev_->logs();
    home_ = dev_->dir / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(home_);
  }

  std::string root() const { return dev_->info["root_token"]; }
  std::map<std::string, std::string> envFor(const std::string& token) const {
    return {{"TESSERA_ADDR", dev_->info["address"]},
            {"TESSERA_CACERT", dev_->info["ca_cert"]},
            {"TESSERA_TOKEN", token},
            {"HOME", home_.string()}};
  }
  Outcome tessera(const std::string& token, std::vector<std::string> args) const {
    args.insert(args.begin(), binary());
    return runArgv(args, envFor(token), home_);
  }
  // A tenant and a token of `policy` for it.
  std::string tenantToken(const std::string& tenant, const std::string& policy = "tenant-admin",
                          bool create = true) {
    if (create) {
      Outcome created = tessera(root(), {"tenant", "create", tenant, "--quota-gpu", "8"});
      EXPECT_EQ(created.rc, 0) << created;
    }
    Outcome token = tessera(root(), {"token", "create", "--tenant", tenant, "--policy", policy,
                                     "--ttl", "1h", "-format=json"});
    EXPECT_EQ(token.rc, 0) << token;
    return json::parse(token.out, nullptr, false)["auth"].value("client_token", "");
  }
  // A busybox OCI archive at HOME/busybox.tar, for pods with an image (they run in containers:
  // root and runc); "" (with the failure said) where it cannot be made.
  std::string busyboxImage() {
    if (::geteuid() != 0 || std::system("command -v runc >/dev/null") != 0) {
      ADD_FAILURE() << "pods with an image run in containers: this test needs root and runc";
      return "";
    }
    const fs::path image = home_ / "busybox.tar";
    const std::string make = tessera::integration::sourceDir() + "/scripts/make-busybox-image " +
                             image.string() + " >/dev/null";
    if (std::system(make.c_str()) != 0) {
      ADD_FAILURE() << make << " failed";
      return "";
    }
    return image.string();
  }
  // `tessera kubeconfig` for `token`, written to HOME/<name>.
  fs::path kubeconfig(const std::string& token, const std::string& name) {
    const fs::path file = home_ / name;
    Outcome made = tessera(token, {"kubeconfig", "-o", file.string()});
    EXPECT_EQ(made.rc, 0) << made;
    return file;
  }
  // A policy `name` of `tenant` (its `path` rules), made with `admin`, and a kubeconfig
  // HOME/<name>.kubeconfig for a new token of it.
  fs::path kubeconfigOfPolicy(const std::string& admin, const std::string& tenant,
                              const std::string& name, const json& paths) {
    const auto made =
        Client(dev_->info["address"], slurp(dev_->info["ca_cert"].get<std::string>()))
            .call("POST", "/v1/tenants/" + tenant + "/policies/" + name, admin, {{"path", paths}});
    EXPECT_EQ(made.status, 204U) << made.raw;
    return kubeconfig(tenantToken(tenant, name, /*create=*/false), name + ".kubeconfig");
  }
  Outcome kubectl(const fs::path& config, std::vector<std::string> args,
                  std::chrono::milliseconds stop_after = std::chrono::milliseconds(0)) const {
    args.insert(args.begin(), kKubectl);
    return runArgv(args, {{"KUBECONFIG", config.string()}, {"HOME", home_.string()}}, home_,
                   stop_after);
  }
  fs::path manifest(const std::string& name, const std::string& yaml) const {
    const fs::path file = home_ / name;
    std::ofstream(file) << yaml;
    return file;
  }

  static inline Dev* dev_ = nullptr;
  fs::path home_;
};

const char* kPod = R"(apiVersion: v1
kind: Pod
metadata:
  name: trainer
  labels:
    app: llm
spec:
  restartPolicy: Never
  containers:
  - name: main
    command: ["sh", "-c", "for i in 1 2 3; do echo tick $i; done; sleep 1"]
    resources:
      limits:
        nvidia.com/gpu: 1
)";

// Must show 1 (first part): version, api-resources, create -f (validated against the OpenAPI
// document), get in its forms, logs, selectors, delete; and one registry behind both APIs.
TEST_F(KubeTest, KubectlCreatesListsReadsAndDeletesPodsThatTesseraRuns) {
  const std::string token = tenantToken("kube-a");
  const fs::path config = kubeconfig(token, "a.kubeconfig");
  struct stat st {};
  ASSERT_EQ(stat(config.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U) << "the kubeconfig holds the token";
  EXPECT_TRUE(contains(slurp(config), "/v1/tenants/kube-a/k8s")) << slurp(config);

  Outcome version = kubectl(config, {"version"});
  ASSERT_EQ(version.rc, 0) << version;
  EXPECT_TRUE(contains(version.out, "Server Version: v1.32.0-tessera")) << version;
  EXPECT_FALSE(contains(version.err, "WARNING")) << version;  // No version skew.

  Outcome resources = kubectl(config, {"api-resources"});
  ASSERT_EQ(resources.rc, 0) << resources;
  // What is served, and only that.
  EXPECT_EQ(resources.out,
            "NAME                       SHORTNAMES   APIVERSION                NAMESPACED   KIND\n"
            "configmaps                 cm           v1                        true         "
            "ConfigMap\n"
            "events                     ev           v1                        true         "
            "Event\n"
            "namespaces                 ns           v1                        false        "
            "Namespace\n"
            "nodes                      no           v1                        false        "
            "Node\n"
            "pods                       po           v1                        true         Pod\n"
            "secrets                                 v1                        true         "
            "Secret\n"
            "selfsubjectaccessreviews                authorization.k8s.io/v1   false        "
            "SelfSubjectAccessReview\n"
            "jobs                                    batch/v1                  true         Job\n")
      << resources;

  Outcome empty = kubectl(config, {"get", "pods"});
  ASSERT_EQ(empty.rc, 0) << empty;
  EXPECT_TRUE(contains(empty.err, "No resources found in default namespace.")) << empty;

  // create -f with validation on: kubectl reads the OpenAPI document, then sends Strict.
  const fs::path pod = manifest("pod.yaml", kPod);
  Outcome created = kubectl(config, {"create", "-f", pod.string()});
  ASSERT_EQ(created.rc, 0) << created;
  EXPECT_EQ(created.out, "pod/trainer created\n") << created;
  Outcome again = kubectl(config, {"create", "-f", pod.string()});
  EXPECT_EQ(again.rc, 1) << again;
  EXPECT_TRUE(contains(again.err, "Error from server (AlreadyExists): error when creating \"" +
                                      pod.string() + "\": pods \"trainer\" already exists"))
      << again;

  // It runs on the dev node, then completes; kubectl's columns say so.
  std::string phase;
  ASSERT_TRUE(waitFor(
      [&] {
        phase = kubectl(config, {"get", "pod", "trainer", "-o", "jsonpath={.status.phase}"}).out;
        return phase == "Succeeded";
      },
      std::chrono::seconds(30)))
      << phase;
  Outcome listed = kubectl(config, {"get", "pods"});
  ASSERT_EQ(listed.rc, 0) << listed;
  EXPECT_TRUE(contains(listed.out, "NAME      READY   STATUS      RESTARTS   AGE\n")) << listed;
  EXPECT_TRUE(contains(listed.out, "trainer   0/1     Completed   0")) << listed;
  Outcome wide = kubectl(config, {"get", "pods", "-o", "wide"});
  EXPECT_TRUE(contains(wide.out, "NODE")) << wide;
  EXPECT_TRUE(contains(wide.out, "dgx-h100-0")) << wide;
  const json object =
      json::parse(kubectl(config, {"get", "pod", "trainer", "-o", "json"}).out, nullptr, false);
  ASSERT_TRUE(object.is_object());
  EXPECT_EQ(object["metadata"]["labels"]["app"], "llm");
  EXPECT_EQ(object["metadata"]["namespace"], "default");
  EXPECT_GT(std::stoll(object["metadata"]["resourceVersion"].get<std::string>()), 0);
  EXPECT_EQ(object["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 0);
  EXPECT_EQ(object["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], 1);

  Outcome logs = kubectl(config, {"logs", "trainer"});
  ASSERT_EQ(logs.rc, 0) << logs;
  EXPECT_EQ(logs.out, "tick 1\ntick 2\ntick 3\n");
  EXPECT_EQ(kubectl(config, {"logs", "trainer", "--tail=1"}).out, "tick 3\n");

  // Selectors kubectl sends.
  EXPECT_TRUE(contains(kubectl(config, {"get", "pods", "-l", "app=llm"}).out, "trainer"));
  EXPECT_TRUE(
      contains(kubectl(config, {"get", "pods", "-l", "app in (llm,x),!nolabel"}).out, "trainer"));
  Outcome none = kubectl(config, {"get", "pods", "-l", "app=other"});
  EXPECT_TRUE(contains(none.err, "No resources found")) << none;
  EXPECT_TRUE(
      contains(kubectl(config, {"get", "pods", "--field-selector", "status.phase=Succeeded"}).out,
               "trainer"));
  Outcome badfield = kubectl(config, {"get", "pods", "--field-selector", "spec.foo=bar"});
  EXPECT_EQ(badfield.rc, 1) << badfield;
  EXPECT_TRUE(contains(badfield.err, "field label not supported: spec.foo")) << badfield;

  // One registry, both doors: Tessera's CLI shows the pod as a workload, and a workload it
  // submits is a pod to kubectl.
  Outcome ps = tessera(token, {"ps"});
  EXPECT_TRUE(contains(ps.out, "trainer")) << ps;
  Outcome run = tessera(token, {"run", "from-cli", "--gpus", "1", "--", "sleep", "30"});
  ASSERT_EQ(run.rc, 0) << run;
  Outcome both = kubectl(config, {"get", "pods"});
  EXPECT_TRUE(contains(both.out, "from-cli")) << both;
  EXPECT_TRUE(contains(both.out, "trainer")) << both;

  // Delete: a running pod is stopped and goes; a finished one goes at once.
  Outcome deleted = kubectl(config, {"delete", "pod", "trainer"});
  ASSERT_EQ(deleted.rc, 0) << deleted;
  EXPECT_EQ(deleted.out, "pod \"trainer\" deleted\n");
  Outcome gone = kubectl(config, {"get", "pod", "trainer"});
  EXPECT_EQ(gone.rc, 1) << gone;
  EXPECT_TRUE(contains(gone.err, "Error from server (NotFound): pods \"trainer\" not found"))
      << gone;
  // Every request is in the tenant's audit stream, with the kubectl command that sent it.
  bool audited = false;
  std::istringstream log(slurp(dev_->dir / "audit.log"));
  for (std::string line; std::getline(log, line);) {
    const json record = json::parse(line, nullptr, false);
    if (record.is_object() && record.value("tenant", "") == "kube-a" &&
        record["request"].value("client", json::object()).value("kubectl-command", "") ==
            "kubectl create" &&
        record["request"].value("path", "").ends_with("k8s/api/v1/namespaces/default/pods")) {
      audited = true;
    }
  }
  EXPECT_TRUE(audited) << "no audit record of `kubectl create` in kube-a's stream";
  Outcome stopped = kubectl(config, {"delete", "pod", "from-cli", "--wait=false"});
  ASSERT_EQ(stopped.rc, 0) << stopped;
  EXPECT_TRUE(waitFor(
      [&] {
        return kubectl(config, {"get", "pod", "from-cli"}).rc == 1;
      },
      std::chrono::seconds(30)))
      << kubectl(config, {"get", "pod", "from-cli", "-o", "json"}).out;
}

// Bad input gets kubectl's Invalid with the field named, and nothing is created; a fraction
// asked for with KAI's annotation is a fraction of a GPU in Tessera.
TEST_F(KubeTest, InvalidPodsAreRefusedNamingTheFieldAndKaiFractionsMap) {
  const std::string token = tenantToken("kube-b");
  const fs::path config = kubeconfig(token, "b.kubeconfig");
  const fs::path two = manifest("two.yaml", R"(apiVersion: v1
kind: Pod
metadata: {name: two}
spec:
  containers:
  - {name: a, command: ["true"]}
  - {name: b, command: ["true"]}
)");
  Outcome refused = kubectl(config, {"create", "-f", two.string()});
  EXPECT_EQ(refused.rc, 1) << refused;
  EXPECT_TRUE(contains(refused.err, "The Pod \"two\" is invalid: spec.containers: Forbidden"))
      << refused;
  const fs::path host = manifest("host.yaml", R"(apiVersion: v1
kind: Pod
metadata: {name: host}
spec:
  hostNetwork: true
  containers:
  - {name: a, command: ["true"]}
)");
  Outcome host_refused = kubectl(config, {"create", "-f", host.string()});
  EXPECT_EQ(host_refused.rc, 1) << host_refused;
  EXPECT_TRUE(contains(host_refused.err, "spec.hostNetwork: Forbidden")) << host_refused;
  const fs::path typo = manifest("typo.yaml", R"(apiVersion: v1
kind: Pod
metadata: {name: typo}
spec:
  containers:
  - {name: a, command: ["true"], imagePullPolcy: Always}
)");
  Outcome strict = kubectl(config, {"create", "-f", typo.string()});
  EXPECT_EQ(strict.rc, 1) << strict;
  EXPECT_TRUE(contains(strict.err,
                       "Error from server (BadRequest): error when creating \"" + typo.string() +
                           "\": Pod in version \"v1\" cannot be handled as a Pod: strict "
                           "decoding error: unknown field \"spec.containers[0].imagePullPolcy\""))
      << strict;
  Outcome none = kubectl(config, {"get", "pods"});
  EXPECT_TRUE(contains(none.err, "No resources found")) << none;

  const fs::path half = manifest("half.yaml", R"(apiVersion: v1
kind: Pod
metadata:
  name: half
  annotations: {gpu-fraction: "0.5"}
  labels: {kai.scheduler/queue: default}
spec:
  schedulerName: kai-scheduler
  restartPolicy: Never
  containers:
  - {name: main, command: ["sleep", "1"]}
)");
  Outcome created = kubectl(config, {"create", "-f", half.string()});
  ASSERT_EQ(created.rc, 0) << created;
  Outcome shown = tessera(token, {"show", "half", "-format=json"});
  ASSERT_EQ(shown.rc, 0) << shown;
  const json spec = json::parse(shown.out, nullptr, false).value("spec", json::object());
  EXPECT_EQ(spec["gpu"].value("milli", 0), 500) << shown.out;
  EXPECT_EQ(spec.value("queue", ""), "default") << shown.out;

  // Run:ai's dynamic fractions from kubectl: a burst limit over the fraction, time-sliced; a
  // limit under the fraction is refused, naming the annotation.
  const std::string burst = R"(apiVersion: v1
kind: Pod
metadata:
  name: NAME
  annotations: {gpu-fraction: "0.25", gpu-fraction-limit: "LIMIT"}
spec:
  restartPolicy: Never
  containers:
  - {name: main, command: ["sleep", "1"]}
)";
  auto burst_pod = [&](const std::string& name, const std::string& limit) {
    std::string text = burst;
    text.replace(text.find("NAME"), 4, name);
    text.replace(text.find("LIMIT"), 5, limit);
    return manifest(name + ".yaml", text);
  };
  Outcome bursty = kubectl(config, {"create", "-f", burst_pod("bursty", "0.8").string()});
  ASSERT_EQ(bursty.rc, 0) << bursty;
  Outcome bursty_shown = tessera(token, {"show", "bursty", "-format=json"});
  ASSERT_EQ(bursty_shown.rc, 0) << bursty_shown;
  EXPECT_EQ(json::parse(bursty_shown.out, nullptr, false).value("spec", json::object())["gpu"],
            json({{"milli", 250}, {"milliLimit", 800}, {"isolation", "none"}}))
      << bursty_shown.out;
  Outcome under = kubectl(config, {"create", "-f", burst_pod("under", "0.2").string()});
  EXPECT_EQ(under.rc, 1) << under;
  EXPECT_TRUE(contains(under.err, "metadata.annotations[gpu-fraction-limit]: Invalid value"))
      << under;

  // A MIG slice as the device plugin names it: the task sees its MIG device.
  const fs::path slice = manifest("slice.yaml", R"(apiVersion: v1
kind: Pod
metadata: {name: slice}
spec:
  restartPolicy: Never
  containers:
  - name: main
    command: ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"]
    resources: {limits: {nvidia.com/mig-3g.40gb: 1}}
)");
  ASSERT_EQ(kubectl(config, {"create", "-f", slice.string()}).rc, 0);
  ASSERT_EQ(kubectl(config, {"wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/slice",
                             "--timeout=30s"})
                .rc,
            0)
      << kubectl(config, {"get", "pod", "slice", "-o", "json"});
  EXPECT_TRUE(kubectl(config, {"logs", "slice"}).out.starts_with("MIG-"));
}

// Must show 2 (first part): another tenant's pods are not there (404, never 403), whatever the
// path; a token that may only read cannot create, in kubectl's words; a bad token is 401.
TEST_F(KubeTest, TenantsSeeOnlyTheirOwnPodsAndPoliciesHold) {
  const std::string a = tenantToken("kube-c");
  const std::string b = tenantToken("kube-d");
  const fs::path ca = kubeconfig(a, "c.kubeconfig");
  const fs::path cb = kubeconfig(b, "d.kubeconfig");
  ASSERT_EQ(kubectl(ca, {"create", "-f", manifest("pod.yaml", kPod).string()}).rc, 0);
  Outcome theirs = kubectl(cb, {"get", "pods", "-A"});
  EXPECT_TRUE(contains(theirs.err, "No resources found")) << theirs;
  Outcome get = kubectl(cb, {"get", "pod", "trainer"});
  EXPECT_TRUE(contains(get.err, "(NotFound)")) << get;
  Outcome logs = kubectl(cb, {"logs", "trainer"});
  EXPECT_TRUE(contains(logs.err, "(NotFound)")) << logs;
  // B's watch sees nothing of what A does meanwhile.
  Outcome watched;
  std::thread watcher([&] {
    watched = kubectl(cb, {"get", "pods", "-A", "-w"}, std::chrono::seconds(4));
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::string third = kPod;
  third.replace(third.find("name: trainer"), 13, "name: third");
  ASSERT_EQ(kubectl(ca, {"create", "-f", manifest("third.yaml", third).string()}).rc, 0);
  watcher.join();
  EXPECT_FALSE(contains(watched.out + watched.err, "third")) << watched;
  EXPECT_FALSE(contains(watched.out + watched.err, "trainer")) << watched;
  // B's token pointed at A's API root: not found, as every other path of A's.
  std::string text = slurp(cb);
  text.replace(text.find("/v1/tenants/kube-d/k8s"), 22, "/v1/tenants/kube-c/k8s");
  const fs::path crossed = manifest("crossed.kubeconfig", text);
  Outcome cross = kubectl(crossed, {"get", "pods"});
  EXPECT_EQ(cross.rc, 1) << cross;
  EXPECT_TRUE(contains(cross.err, "(NotFound)")) << cross;
  EXPECT_FALSE(contains(cross.out + cross.err, "trainer")) << cross;

  // A read-only token of A's.
  const fs::path cr = kubeconfigOfPolicy(a, "kube-c", "reader",
                                         {{"workloads*", {{"capabilities", {"read", "list"}}}}});
  EXPECT_TRUE(contains(kubectl(cr, {"get", "pods"}).out, "trainer"));
  std::string second = kPod;
  second.replace(second.find("name: trainer"), 13, "name: second");
  Outcome forbidden = kubectl(cr, {"create", "-f", manifest("second.yaml", second).string()});
  EXPECT_EQ(forbidden.rc, 1) << forbidden;
  EXPECT_TRUE(contains(forbidden.err,
                       "Error from server (Forbidden): error when creating \"" +
                           (home_ / "second.yaml").string() +
                           "\": pods \"second\" is forbidden: User \"token\" cannot create "
                           "resource \"pods\" in API group \"\" in the namespace \"default\"") ||
              contains(forbidden.err, "pods \"second\" is forbidden: User "))
      << forbidden;
  Outcome not_deleted = kubectl(cr, {"delete", "pod", "trainer", "--wait=false"});
  EXPECT_EQ(not_deleted.rc, 1) << not_deleted;
  EXPECT_TRUE(contains(not_deleted.err, "(Forbidden)")) << not_deleted;

  std::string bad = slurp(ca);
  const size_t at = bad.find("token: \"") + 8;
  bad.replace(at, bad.find('"', at) - at, "tsr.AAAAAAAAAAAAAAAAAAAAAAAA");
  Outcome unauthorized = kubectl(manifest("bad.kubeconfig", bad), {"get", "pods"});
  EXPECT_EQ(unauthorized.rc, 1) << unauthorized;
  EXPECT_TRUE(
      contains(unauthorized.err, "error: You must be logged in to the server (Unauthorized)"))
      << unauthorized;
}

// Must show 1 (watch): `get pods -w` sees Pending, Running, Completed as they happen; `wait`
// and `delete` (which waits for a running pod to go) work, as both are built on watches; and
// `logs -f` follows a running pod to its end.
TEST_F(KubeTest, WatchesSeeEachChangeAndDeleteWaitsForARunningPodToGo) {
  const std::string token = tenantToken("kube-w");
  const fs::path config = kubeconfig(token, "w.kubeconfig");
  Outcome watched;
  Outcome watched_events;
  std::thread watcher([&] {
    watched = kubectl(config, {"get", "pods", "-w"}, std::chrono::seconds(9));
  });
  std::thread event_watcher([&] {
    watched_events = kubectl(config, {"get", "events", "-w"}, std::chrono::seconds(9));
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::string pod = kPod;
  pod.replace(pod.find("sleep 1"), 7, "sleep 2");
  ASSERT_EQ(kubectl(config, {"create", "-f", manifest("pod.yaml", pod).string()}).rc, 0);
  Outcome waited = kubectl(
      config, {"wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/trainer", "--timeout=30s"});
  EXPECT_EQ(waited.rc, 0) << waited;
  EXPECT_EQ(waited.out, "pod/trainer condition met\n") << waited;
  watcher.join();
  event_watcher.join();
  // Events are watched as pods are, each once however often its pod changes afterwards. kubectl
  // sizes a watch's columns by its first row: runs of spaces count as one.
  const auto count = [](const std::string& text, const std::string& what) {
    std::string squeezed;
    for (char ch : text) {
      if (ch != ' ' || squeezed.empty() || squeezed.back() != ' ') {
        squeezed += ch;
      }
    }
    size_t n = 0;
    for (size_t at = squeezed.find(what); at != std::string::npos;
         at = squeezed.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count(watched_events.out, "Scheduled pod/trainer Successfully assigned"), 1U)
      << watched_events;
  EXPECT_EQ(count(watched_events.out, "Started pod/trainer Started container main"), 1U)
      << watched_events;
  // One line per change, in order, each a row of kubectl's table.
  const size_t running = watched.out.find("trainer   1/1     Running");
  const size_t completed = watched.out.find("trainer   0/1     Completed");
  EXPECT_NE(running, std::string::npos) << watched;
  EXPECT_NE(completed, std::string::npos) << watched;
  EXPECT_LT(running, completed) << watched;
  EXPECT_TRUE(contains(watched.out.substr(0, running), "trainer   0/1     ")) << watched;

  // logs -f: the lines as they come, and it ends when the container does.
  std::string ticker = kPod;
  ticker.replace(ticker.find("name: trainer"), 13, "name: ticker");
  ticker.replace(ticker.find("for i in 1 2 3; do echo tick $i; done; sleep 1"), 46,
                 "for i in 1 2 3; do echo tick $i; sleep 1; done");
  ASSERT_EQ(kubectl(config, {"create", "-f", manifest("ticker.yaml", ticker).string()}).rc, 0);
  ASSERT_EQ(kubectl(config, {"wait", "--for=jsonpath={.status.phase}=Running", "pod/ticker",
                             "--timeout=30s"})
                .rc,
            0);
  Outcome followed = kubectl(config, {"logs", "-f", "ticker"});
  EXPECT_EQ(followed.rc, 0) << followed;
  EXPECT_EQ(followed.out, "tick 1\ntick 2\ntick 3\n") << followed;

  // A running pod: delete stops it and waits (on a watch) until it is gone.
  std::string slow = kPod;
  slow.replace(slow.find("name: trainer"), 13, "name: sleeper");
  slow.replace(slow.find("for i in 1 2 3; do echo tick $i; done; sleep 1"), 46, "exec sleep 300");
  ASSERT_EQ(kubectl(config, {"create", "-f", manifest("slow.yaml", slow).string()}).rc, 0);
  ASSERT_EQ(kubectl(config, {"wait", "--for=jsonpath={.status.phase}=Running", "pod/sleeper",
                             "--timeout=30s"})
                .rc,
            0);
  Outcome deleted = kubectl(config, {"delete", "pod", "sleeper", "--timeout=30s"});
  EXPECT_EQ(deleted.rc, 0) << deleted;
  EXPECT_EQ(deleted.out, "pod \"sleeper\" deleted\n") << deleted;
  EXPECT_TRUE(contains(kubectl(config, {"get", "pod", "sleeper"}).err, "(NotFound)"));
}

const char* kIndexedJob = R"(apiVersion: batch/v1
kind: Job
metadata:
  name: ddp
  labels:
    team: nlp
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    metadata:
      labels:
        app: ddp
    spec:
      restartPolicy: Never
      containers:
      - name: main
        command: ["sh", "-c", "echo index=$JOB_COMPLETION_INDEX rank=$RANK world=$WORLD_SIZE master=${MASTER_ADDR:+set}; sleep 2"]
        resources:
          limits:
            nvidia.com/gpu: 1
)";

// Must show 1 (Jobs): an Indexed Job's pods run at once with their index and #29's rendezvous
// variables; kubectl waits for it to complete, reads its logs through its selector, lists it
// with kubectl's columns, and deletes it with its pods. A failing Job ends Failed, never
// Complete; one with parallelism below its completions runs its pods that many at a time;
// Tessera's own workload of several tasks is a Job to kubectl.
TEST_F(KubeTest, AnIndexedJobRunsItsPodsAtOnceWithTheirIndexAndCompletes) {
  const std::string token = tenantToken("kube-j");
  const fs::path config = kubeconfig(token, "j.kubeconfig");
  Outcome resources = kubectl(config, {"api-resources", "--api-group=batch"});
  ASSERT_EQ(resources.rc, 0) << resources;
  EXPECT_TRUE(contains(resources.out, "jobs") && contains(resources.out, "batch/v1") &&
              contains(resources.out, "Job"))
      << resources;

  Outcome watched_events;
  std::thread event_watcher([&] {
    watched_events = kubectl(config,
                             {"get", "events", "-w", "--watch-only", "-o",
                              "custom-columns=REASON:.reason,OBJECT:.involvedObject.name"},
                             std::chrono::seconds(8));
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const fs::path job = manifest("job.yaml", kIndexedJob);
  Outcome created = kubectl(config, {"create", "-f", job.string()});
  ASSERT_EQ(created.rc, 0) << created;
  EXPECT_EQ(created.out, "job.batch/ddp created\n") << created;
  Outcome waited =
      kubectl(config, {"wait", "--for=condition=complete", "job/ddp", "--timeout=60s"});
  event_watcher.join();
  ASSERT_EQ(waited.rc, 0) << waited << kubectl(config, {"get", "job", "ddp", "-o", "json"}).out;
  EXPECT_EQ(waited.out, "job.batch/ddp condition met\n") << waited;
  // A watch sends the Job's events as they happened, however many one change makes: the Job
  // controller's two creates first, the pods Scheduled in index order, each pod's Started once
  // its container runs (after its own Scheduled: in the same change or a later one), and
  // Completed last.
  std::vector<std::string> reasons;
  std::vector<std::string> objects;
  {
    std::istringstream lines(watched_events.out);
    for (std::string reason, object; lines >> reason >> object;) {
      if (reason != "REASON") {
        reasons.push_back(reason);
        objects.push_back(object);
      }
    }
  }
  ASSERT_EQ(reasons.size(), 7U) << watched_events;
  EXPECT_EQ(reasons[0], "SuccessfulCreate") << watched_events;
  EXPECT_EQ(reasons[1], "SuccessfulCreate") << watched_events;
  EXPECT_EQ(reasons[6], "Completed") << watched_events;
  std::vector<std::string> scheduled;  // Pods, in the order they were Scheduled.
  for (size_t i = 2; i < 6; ++i) {
    if (reasons[i] == "Scheduled") {
      scheduled.push_back(objects[i]);
    } else {
      EXPECT_EQ(reasons[i], "Started") << watched_events;
      EXPECT_NE(std::find(scheduled.begin(), scheduled.end(), objects[i]), scheduled.end())
          << objects[i] << " Started before it was Scheduled: " << watched_events;
    }
  }
  ASSERT_EQ(scheduled.size(), 2U) << watched_events;
  EXPECT_TRUE(scheduled[0].starts_with("ddp-0-") && scheduled[1].starts_with("ddp-1-"))
      << watched_events;

  Outcome listed = kubectl(config, {"get", "jobs"});
  ASSERT_EQ(listed.rc, 0) << listed;
  EXPECT_TRUE(contains(listed.out, "NAME   STATUS     COMPLETIONS   DURATION   AGE\n")) << listed;
  EXPECT_TRUE(contains(listed.out, "ddp    Complete   2/2")) << listed;
  Outcome wide = kubectl(config, {"get", "jobs", "-o", "wide"});
  EXPECT_TRUE(contains(wide.out, "batch.kubernetes.io/controller-uid=")) << wide;
  const json object =
      json::parse(kubectl(config, {"get", "job", "ddp", "-o", "json"}).out, nullptr, false);
  ASSERT_TRUE(object.is_object());
  const std::string uid = object["metadata"]["uid"];
  EXPECT_EQ(object["spec"]["completionMode"], "Indexed");
  EXPECT_EQ(object["status"]["succeeded"], 2);
  EXPECT_EQ(object["metadata"]["labels"]["team"], "nlp");
  Outcome yaml = kubectl(config, {"get", "job", "ddp", "-o", "yaml"});
  EXPECT_TRUE(contains(yaml.out, "type: Complete")) << yaml;

  // Its pods: one per index, found by the Job's selector, each with its own index.
  const json pods = json::parse(
      kubectl(config,
              {"get", "pods", "-l", "batch.kubernetes.io/controller-uid=" + uid, "-o", "json"})
          .out,
      nullptr, false);
  ASSERT_TRUE(pods.is_object());
  ASSERT_EQ(pods["items"].size(), 2U) << pods.dump();
  std::map<std::string, std::string> by_index;
  for (const json& p : pods["items"]) {
    EXPECT_EQ(p["status"]["phase"], "Succeeded") << p.dump();
    EXPECT_EQ(p["metadata"]["labels"]["app"], "ddp");
    by_index[p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]] =
        p["metadata"]["name"];
  }
  ASSERT_EQ(by_index.size(), 2U);
  Outcome logs = kubectl(config, {"logs", "job/ddp"});
  ASSERT_EQ(logs.rc, 0) << logs;
  EXPECT_EQ(logs.out, "index=0 rank=0 world=2 master=set\n") << logs;
  Outcome second = kubectl(config, {"logs", by_index["1"]});
  EXPECT_EQ(second.out, "index=1 rank=1 world=2 master=set\n") << second;
  Outcome pod_delete = kubectl(config, {"delete", "pod", by_index["1"]});
  EXPECT_EQ(pod_delete.rc, 1) << pod_delete;
  EXPECT_TRUE(contains(pod_delete.err, "delete the job instead")) << pod_delete;

  Outcome deleted = kubectl(config, {"delete", "job", "ddp"});
  ASSERT_EQ(deleted.rc, 0) << deleted;
  EXPECT_EQ(deleted.out, "job.batch \"ddp\" deleted\n") << deleted;
  EXPECT_TRUE(contains(kubectl(config, {"get", "job", "ddp"}).err,
                       "Error from server (NotFound): jobs.batch \"ddp\" not found"));
  EXPECT_TRUE(
      contains(kubectl(config, {"get", "pods", "-l", "job-name=ddp"}).err, "No resources found"));

  // A Job whose pod fails, with no retries, is Failed: `wait --for=condition=failed` sees it.
  std::string failing = kIndexedJob;
  failing.replace(failing.find("name: ddp"), 9, "name: bad");
  failing.replace(failing.find("completions: 2"), 14, "completions: 1\n  backoffLimit: 0");
  failing.replace(failing.find("parallelism: 2"), 14, "parallelism: 1");
  failing.replace(failing.find("sleep 2"), 7, "exit 3");
  ASSERT_EQ(kubectl(config, {"create", "-f", manifest("bad.yaml", failing).string()}).rc, 0);
  Outcome failed = kubectl(config, {"wait", "--for=condition=failed", "job/bad", "--timeout=60s"});
  EXPECT_EQ(failed.rc, 0) << failed;
  EXPECT_TRUE(contains(kubectl(config, {"get", "job", "bad"}).out, "bad    Failed   0/1"))
      << kubectl(config, {"get", "job", "bad"});

  // A Job whose parallelism is below its completions runs that many pods at a time, the next
  // index as one succeeds: each pod of a serial Job starts after the one before it finished.
  std::string serial = kIndexedJob;
  serial.replace(serial.find("name: ddp"), 9, "name: serial");
  serial.replace(serial.find("completions: 2"), 14, "completions: 3");
  serial.replace(serial.find("parallelism: 2"), 14, "parallelism: 1");
  ASSERT_EQ(kubectl(config, {"create", "-f", manifest("serial.yaml", serial).string()}).rc, 0);
  Outcome serial_pods = kubectl(config, {"get", "pods", "-l", "job-name=serial"});
  EXPECT_EQ(std::count(serial_pods.out.begin(), serial_pods.out.end(), '\n'), 2)
      << "one pod at a time: " << serial_pods;
  Outcome serial_done =
      kubectl(config, {"wait", "--for=condition=complete", "job/serial", "--timeout=90s"});
  EXPECT_EQ(serial_done.rc, 0) << serial_done;
  EXPECT_TRUE(contains(kubectl(config, {"get", "job", "serial"}).out, "serial   Complete   3/3"))
      << kubectl(config, {"get", "job", "serial"});
  const json ran = json::parse(
      kubectl(config, {"get", "pods", "-l", "job-name=serial", "-o", "json"}).out, nullptr, false);
  ASSERT_TRUE(ran.is_object() && ran["items"].size() == 3) << ran.dump();
  std::map<std::string, std::pair<std::string, std::string>> spans;  // By index.
  for (const json& pod : ran["items"]) {
    const json& done = pod["status"]["containerStatuses"][0]["state"]["terminated"];
    spans[pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]] = {
        done["startedAt"], done["finishedAt"]};
    EXPECT_TRUE(
        contains(kubectl(config, {"logs", pod["metadata"]["name"]}).out, "rank= world= master="))
        << "no rendezvous for pods that do not run together";
  }
  ASSERT_EQ(spans.size(), 3U);
  EXPECT_LE(spans["0"].second, spans["1"].first);  // RFC 3339 UTC: text order is time order.
  EXPECT_LE(spans["1"].second, spans["2"].first);

  // Tessera's own workload of several tasks is a Job, its tasks pods.
  Outcome run = tessera(token, {"run", "pair", "--tasks", "2", "--", "sleep", "30"});
  ASSERT_EQ(run.rc, 0) << run;
  Outcome jobs = kubectl(config, {"get", "jobs"});
  EXPECT_TRUE(contains(jobs.out, "pair ")) << jobs;
  Outcome pair_pods = kubectl(config, {"get", "pods", "-l", "job-name=pair"});
  EXPECT_EQ(std::count(pair_pods.out.begin(), pair_pods.out.end(), '\n'), 3) << pair_pods;
  EXPECT_EQ(kubectl(config, {"delete", "job", "pair", "--wait=false"}).rc, 0);
}

// A Job's pods are recreated after the Job controller's back-off, not at once: a pod whose image
// is not there shows StartError, never Completed, and the Job waits 10 s before its next
// attempt, so a failure does not use up its backoffLimit in a second; once the attempts are used
// it fails. A pod whose registry does not answer waits in ImagePullBackOff, as a kubelet's does.
TEST_F(KubeTest, AJobWhosePodCannotStartBacksOffAndShowsStartError) {
  const std::string token = tenantToken("kube-p");
  const fs::path config = kubeconfig(token, "p.kubeconfig");
  const std::string job = R"(apiVersion: batch/v1
kind: Job
metadata:
  name: unpulled
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: oci-archive:/no/such/image.tar
        command: ["sh", "-c", "echo never"]
        resources:
          limits:
            nvidia.com/gpu: 1
)";
  const auto created_at = std::chrono::steady_clock::now();
  Outcome created = kubectl(config, {"create", "-f", manifest("unpulled.yaml", job).string()});
  ASSERT_EQ(created.rc, 0) << created << job;
  // Its pod failed to start and the Job waits for its next attempt.
  Outcome pods;
  for (int i = 0; i < 100 && !contains(pods.out, "StartError"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pods = kubectl(config, {"get", "pods", "-l", "job-name=unpulled"});
  }
  ASSERT_TRUE(contains(pods.out, "StartError")) << pods;
  EXPECT_FALSE(contains(pods.out, "Completed")) << pods;
  const json pod =
      json::parse(kubectl(config, {"get", "pods", "-l", "job-name=unpulled", "-o", "json"}).out,
                  nullptr, false);
  ASSERT_TRUE(pod.is_object() && pod["items"].size() == 1U) << pod.dump();
  const json term = pod["items"][0]["status"]["containerStatuses"][0]["state"]["terminated"];
  EXPECT_EQ(term.value("reason", ""), "StartError") << term;
  EXPECT_EQ(term.value("exitCode", 0), 128) << term;
  EXPECT_EQ(pod["items"][0]["status"]["phase"], "Failed");
  Outcome events =
      kubectl(config, {"get", "events", "--field-selector", "involvedObject.name=unpulled"});
  EXPECT_TRUE(contains(events.out, "BackOff")) << events;
  EXPECT_TRUE(contains(events.out, "no such file")) << events;
  EXPECT_TRUE(contains(events.out, "attempt 2 starts in 10 s")) << events;
  const json waiting =
      json::parse(kubectl(config, {"get", "job", "unpulled", "-o", "json"}).out, nullptr, false);
  ASSERT_TRUE(waiting.is_object());
  EXPECT_EQ(waiting["status"].value("failed", 0), 1) << waiting["status"];
  EXPECT_FALSE(waiting["status"].contains("conditions")) << waiting["status"];
  // Its second attempt fails the same way, after the back-off: then the Job has failed.
  Outcome failed =
      kubectl(config, {"wait", "--for=condition=failed", "job/unpulled", "--timeout=60s"});
  ASSERT_EQ(failed.rc, 0) << failed << kubectl(config, {"describe", "job", "unpulled"});
  EXPECT_GE(std::chrono::steady_clock::now() - created_at, std::chrono::seconds(10))
      << "failed before its back-off";
  Outcome reason = kubectl(config, {"get", "job", "unpulled", "-o",
                                    "jsonpath={.status.conditions[?(@.type==\"Failed\")].reason}"});
  EXPECT_EQ(reason.out, "BackoffLimitExceeded") << reason;
  EXPECT_TRUE(contains(kubectl(config, {"get", "job", "unpulled"}).out, "unpulled   Failed   0/1"))
      << kubectl(config, {"get", "job", "unpulled"});

  // A registry nobody answers at (a closed loopback port): the pod waits, its pull tried again
  // after a back-off, and says so in kubectl's words; deleting it ends the wait.
  const std::string pod_yaml = R"(apiVersion: v1
kind: Pod
metadata:
  name: backoff
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: 127.0.0.1:1/team/none:1
    command: ["true"]
)";
  ASSERT_EQ(kubectl(config, {"create", "-f", manifest("backoff.yaml", pod_yaml).string()}).rc, 0);
  Outcome backoff;
  for (int i = 0; i < 100 && !contains(backoff.out, "ImagePullBackOff"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    backoff = kubectl(config, {"get", "pod", "backoff"});
  }
  EXPECT_TRUE(contains(backoff.out, "backoff   0/1     ImagePullBackOff")) << backoff;
  const std::string message = kubectl(config, {"get", "pod", "backoff", "-o",
                                               "jsonpath={.status.containerStatuses[0].state."
                                               "waiting.message}"})
                                  .out;
  EXPECT_TRUE(message.starts_with("ImagePullBackOff (retry 1 of 5 in 10 s): ")) << message;
  EXPECT_TRUE(contains(message, "cannot reach the registry at https://127.0.0.1:1")) << message;
  EXPECT_EQ(kubectl(config, {"get", "pod", "backoff", "-o", "jsonpath={.status.phase}"}).out,
            "Pending");
  Outcome deleted = kubectl(config, {"delete", "pod", "backoff", "--timeout=30s"});
  EXPECT_EQ(deleted.rc, 0) << deleted;
}

const char* kEnvPod = R"(apiVersion: v1
kind: Pod
metadata:
  name: reader
spec:
  restartPolicy: Never
  containers:
  - name: main
    command: ["sh", "-c", "echo token=$HF_TOKEN user=$S_user lr=$LR me=$ME"]
    envFrom:
    - configMapRef:
        name: cfg
    - secretRef:
        name: hf
      prefix: S_
    env:
    - name: HF_TOKEN
      valueFrom:
        secretKeyRef:
          name: hf
          key: HF_TOKEN
    - name: ME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
)";

// Must show 1 (Secrets, can-i) and 2: `create secret generic` and `create configmap` (protobuf
// bodies) keep them in the tenant's sealed KV; a pod reads them through envFrom and valueFrom,
// sealed on the way; `auth can-i` answers from the token's policies; a read-only token and
// another tenant see nothing of them.
TEST_F(KubeTest, SecretsFromKubectlReachAPodThroughEnvFromAndStayInTheirTenant) {
  const std::string token = tenantToken("kube-s");
  const fs::path config = kubeconfig(token, "s.kubeconfig");
  Outcome created =
      kubectl(config, {"create", "secret", "generic", "hf", "--from-literal=HF_TOKEN=hf_tok_Secret",
                       "--from-literal=user=me"});
  ASSERT_EQ(created.rc, 0) << created;
  EXPECT_EQ(created.out, "secret/hf created\n");
  Outcome listed = kubectl(config, {"get", "secrets"});
  EXPECT_TRUE(contains(listed.out, "NAME   TYPE     DATA   AGE\nhf     Opaque   2")) << listed;
  EXPECT_EQ(kubectl(config, {"get", "secret", "hf", "-o", "jsonpath={.data.HF_TOKEN}"}).out,
            "aGZfdG9rX1NlY3JldA==");
  Outcome again = kubectl(config, {"create", "secret", "generic", "hf", "--from-literal=a=b"});
  EXPECT_TRUE(contains(again.err, "secrets \"hf\" already exists")) << again;
  ASSERT_EQ(kubectl(config, {"create", "configmap", "cfg", "--from-literal=LR=0.1"}).out,
            "configmap/cfg created\n");

  ASSERT_EQ(kubectl(config, {"create", "-f", manifest("reader.yaml", kEnvPod).string()}).rc, 0);
  ASSERT_EQ(kubectl(config, {"wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/reader",
                             "--timeout=30s"})
                .rc,
            0);
  EXPECT_EQ(kubectl(config, {"logs", "reader"}).out,
            "token=hf_tok_Secret user=me lr=0.1 me=reader\n");
  // Sealed on the way: the workload's spec says so, and no record holds the value.
  const json workload =
      json::parse(tessera(token, {"show", "reader", "-format=json"}).out, nullptr, false);
  EXPECT_NE(workload.dump().find("(sealed)"), std::string::npos) << workload.dump();
  // The value has letters past f: the log is full of hex digests, where a value such as "abc123"
  // turns up by chance in about one run in a hundred.
  EXPECT_EQ(workload.dump().find("hf_tok_Secret"), std::string::npos) << workload.dump();
  EXPECT_FALSE(contains(slurp(dev_->dir / "audit.log"), "hf_tok_Secret"));
  // A Secret that is not there: refused, naming the field; nothing created.
  std::string missing = kEnvPod;
  missing.replace(missing.find("name: reader"), 12, "name: lost");
  missing.replace(missing.find("name: hf\n      prefix"), 8, "name: nope");
  Outcome lost = kubectl(config, {"create", "-f", manifest("lost.yaml", missing).string()});
  EXPECT_EQ(lost.rc, 1) << lost;
  EXPECT_TRUE(contains(lost.err,
                       "spec.containers[0].envFrom[1].secretRef: Not found: secret "
                       "\"nope\""))
      << lost;
  EXPECT_TRUE(contains(kubectl(config, {"get", "pod", "lost"}).err, "(NotFound)"));

  // auth can-i: yes for the tenant's admin, no for a token that may only read workloads.
  Outcome can = kubectl(config, {"auth", "can-i", "create", "pods"});
  EXPECT_EQ(can.rc, 0) << can;
  EXPECT_EQ(can.out, "yes\n") << can;
  const fs::path viewer = kubeconfigOfPolicy(
      token, "kube-s", "viewer", {{"workloads*", {{"capabilities", {"read", "list"}}}}});
  Outcome cannot = kubectl(viewer, {"auth", "can-i", "create", "pods"});
  EXPECT_EQ(cannot.rc, 1) << cannot;
  EXPECT_TRUE(cannot.out.starts_with("no")) << cannot;
  EXPECT_EQ(kubectl(viewer, {"auth", "can-i", "list", "pods"}).out, "yes\n");
  Outcome hidden = kubectl(viewer, {"get", "secret", "hf"});
  EXPECT_EQ(hidden.rc, 1) << hidden;
  EXPECT_TRUE(contains(hidden.err, "(Forbidden)")) << hidden;
  EXPECT_TRUE(contains(kubectl(viewer, {"get", "pods"}).out, "reader"));

  // Another tenant: nothing of them, by any path.
  const fs::path other = kubeconfig(tenantToken("kube-s2"), "s2.kubeconfig");
  EXPECT_TRUE(contains(kubectl(other, {"get", "secrets", "-A"}).err, "No resources found"));
  EXPECT_TRUE(contains(kubectl(other, {"get", "secret", "hf"}).err, "(NotFound)"));
  EXPECT_TRUE(contains(kubectl(other, {"get", "configmap", "cfg"}).err, "(NotFound)"));

  Outcome deleted = kubectl(config, {"delete", "secret", "hf"});
  EXPECT_EQ(deleted.out, "secret \"hf\" deleted\n") << deleted;
  EXPECT_TRUE(contains(kubectl(config, {"get", "secret", "hf"}).err, "(NotFound)"));
}

// Secret and ConfigMap volumes (docs/kubernetes.md "Volumes"): a pod's container reads them as
// files at their mountPaths, read-only, with an emptyDir at /dev/shm of its sizeLimit; a Secret
// the submitter may not read, or one that is not there, is refused naming the field. Containers
// need root and runc here, as container_integration_test does (CI has both).
TEST_F(KubeTest, SecretAndConfigMapVolumesAreFilesInThePodsContainer) {
  const std::string image = busyboxImage();
  ASSERT_FALSE(image.empty());
  const std::string token = tenantToken("kube-v");
  const fs::path config = kubeconfig(token, "v.kubeconfig");
  ASSERT_EQ(kubectl(config, {"create", "secret", "generic", "db", "--from-literal=password=hunter2",
                             "--from-literal=user=alice"})
                .rc,
            0);
  ASSERT_EQ(
      kubectl(config, {"create", "configmap", "train", "--from-literal=model.yaml=lr: 0.1"}).rc, 0);
  std::string pod = R"(apiVersion: v1
kind: Pod
metadata:
  name: mounted
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: oci-archive:IMAGE
    command: ["sh", "-c", "cat /etc/db/password /etc/db/user /etc/train/conf/model.yaml; echo; ls /etc/train; touch /etc/db/x 2>/dev/null || echo read-only; df -m /dev/shm | tail -1"]
    volumeMounts:
    - {name: db, mountPath: /etc/db, readOnly: true}
    - {name: train, mountPath: /etc/train}
    - {name: shm, mountPath: /dev/shm}
  volumes:
  - name: db
    secret: {secretName: db}
  - name: train
    configMap:
      name: train
      items: [{key: model.yaml, path: conf/model.yaml}]
  - name: shm
    emptyDir: {medium: Memory, sizeLimit: 48Mi}
)";
  pod.replace(pod.find("IMAGE"), 5, image);
  Outcome created = kubectl(config, {"create", "-f", manifest("mounted.yaml", pod).string()});
  ASSERT_EQ(created.rc, 0) << created;
  Outcome waited = kubectl(
      config, {"wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/mounted", "--timeout=60s"});
  ASSERT_EQ(waited.rc, 0) << waited << kubectl(config, {"describe", "pod", "mounted"});
  const std::string logs = kubectl(config, {"logs", "mounted"}).out;
  EXPECT_TRUE(contains(logs, "hunter2alicelr: 0.1\nconf\nread-only\n")) << logs;
  EXPECT_TRUE(contains(logs, "48")) << logs;
  // The pod reads back with its volumes, as it was written.
  EXPECT_EQ(kubectl(config, {"get", "pod", "mounted", "-o",
                             "jsonpath={.spec.volumes[1].configMap.items[0].path}"})
                .out,
            "conf/model.yaml");
  // Nothing of the Secret in the workload's record or the audit log.
  EXPECT_EQ(tessera(token, {"show", "mounted", "-format=json"}).out.find("hunter2"),
            std::string::npos);
  EXPECT_FALSE(contains(slurp(dev_->dir / "audit.log"), "hunter2"));

  // A Secret that is not there, and one the submitter may not read: refused, naming the field.
  std::string lost = pod;
  lost.replace(lost.find("name: mounted"), 13, "name: lost");
  lost.replace(lost.find("secretName: db"), 14, "secretName: nope");
  Outcome refused = kubectl(config, {"create", "-f", manifest("lost.yaml", lost).string()});
  EXPECT_EQ(refused.rc, 1) << refused;
  EXPECT_TRUE(contains(refused.err, "spec.volumes[0].secret: Not found: secret \"nope\""))
      << refused;
  const fs::path runner = kubeconfigOfPolicy(
      token, "kube-v", "runner",
      {{"workloads*", {{"capabilities", {"create", "read", "list", "update"}}}},
       {"secrets/kv/data/kube/default/configmaps/*", {{"capabilities", {"read"}}}}});
  std::string other = pod;
  other.replace(other.find("name: mounted"), 13, "name: other");
  Outcome forbidden = kubectl(runner, {"create", "-f", manifest("other.yaml", other).string()});
  EXPECT_EQ(forbidden.rc, 1) << forbidden;
  EXPECT_TRUE(contains(forbidden.err,
                       "spec.volumes[0].secret: this token may not read secret "
                       "\"db\""))
      << forbidden;
}

// `kubectl create job NAME --image=... -- CMD` (kubectl's typed client, which sends the Job in
// protobuf and has no fallback to JSON): the Job runs its image's command and completes.
TEST_F(KubeTest, KubectlCreateJobRunsItsCommandInItsImage) {
  const std::string image = busyboxImage();
  ASSERT_FALSE(image.empty());
  const std::string token = tenantToken("kube-cj");
  const fs::path config = kubeconfig(token, "cj.kubeconfig");
  Outcome created = kubectl(config, {"create", "job", "hello", "--image=oci-archive:" + image, "--",
                                     "sh", "-c", "echo hello from $0", "job"});
  ASSERT_EQ(created.rc, 0) << created;
  EXPECT_EQ(created.out, "job.batch/hello created\n") << created;
  Outcome waited =
      kubectl(config, {"wait", "--for=condition=complete", "job/hello", "--timeout=60s"});
  ASSERT_EQ(waited.rc, 0) << waited << kubectl(config, {"describe", "job", "hello"});
  EXPECT_EQ(kubectl(config, {"logs", "job/hello"}).out, "hello from job\n");
  EXPECT_EQ(kubectl(config, {"get", "job", "hello", "-o",
                             "jsonpath={.spec.template.spec.containers[0].command}"})
                .out,
            R"(["sh","-c","echo hello from $0","job"])");
}

// Suspended Jobs (docs/kubernetes.md "Jobs"): created with `suspend: true`, a Job has no pod and
// says Suspended; `kubectl patch` resumes it; suspended while it runs, its running pod stops and
// its completed one stays done; resumed again, it completes.
TEST_F(KubeTest, ASuspendedJobRunsNothingUntilResumed) {
  const fs::path config = kubeconfig(tenantToken("kube-held"), "held.kubeconfig");
  // Index 1 runs for 8 s: long enough to be suspended while it runs.
  const std::string held = R"yaml(apiVersion: batch/v1
kind: Job
metadata:
  name: held
spec:
  suspend: true
  completions: 2
  parallelism: 1
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        command: ["sh", "-c", "echo index $JOB_COMPLETION_INDEX; sleep $((8 * JOB_COMPLETION_INDEX))"]
)yaml";
  const fs::path job = manifest("held.yaml", held);
  ASSERT_EQ(kubectl(config, {"create", "-f", job.string()}).rc, 0);
  Outcome got = kubectl(config, {"get", "job", "held"});
  EXPECT_TRUE(contains(got.out, "held   Suspended   0/2")) << got;
  EXPECT_TRUE(
      contains(kubectl(config, {"get", "pods", "-l", "job-name=held"}).err, "No resources found"));
  auto patch = [&](bool suspend) {
    return kubectl(config,
                   {"patch", "job", "held", "--type=merge", "-p",
                    std::string("{\"spec\":{\"suspend\":") + (suspend ? "true" : "false") + "}}"});
  };
  Outcome resumed = patch(false);
  ASSERT_EQ(resumed.out, "job.batch/held patched\n") << resumed;
  // Index 0 completes; index 1 runs: suspend it there.
  ASSERT_TRUE(waitFor(
      [&] {
        const std::string pods =
            kubectl(config, {"get", "pods", "-l", "job-name=held", "--no-headers"}).out;
        return contains(pods, "Completed") && contains(pods, "Running");
      },
      std::chrono::seconds(30)));
  ASSERT_EQ(patch(true).rc, 0);
  ASSERT_TRUE(waitFor(
      [&] {
        const std::string pods =
            kubectl(config, {"get", "pods", "-l", "job-name=held", "--no-headers"}).out;
        return contains(pods, "Completed") && !contains(pods, "Running");
      },
      std::chrono::seconds(30)));
  got = kubectl(config, {"get", "job", "held", "-o",
                         "jsonpath={.spec.suspend} "
                         "{.status.conditions[0].type} "
                         "{.status.succeeded}"});
  EXPECT_EQ(got.out, "true Suspended 1") << got;
  ASSERT_EQ(patch(false).rc, 0);
  Outcome done = kubectl(config, {"wait", "--for=condition=complete", "job/held", "--timeout=60s"});
  EXPECT_EQ(done.rc, 0) << done << kubectl(config, {"describe", "job", "held"});
  EXPECT_TRUE(contains(kubectl(config, {"get", "job", "held"}).out, "Complete   2/2")) << got;
}

// Namespaces (docs/kubernetes.md "Namespaces"): created by `kubectl create namespace` (a protobuf
// body) or as a document of `kubectl apply -f`, labeled, listed, and deleted with the Secrets
// and ConfigMaps in them; one that still holds pods is refused, default is never deleted, and
// another tenant sees none of them.
TEST_F(KubeTest, NamespacesAreCreatedLabeledAppliedAndDeleted) {
  const fs::path config = kubeconfig(tenantToken("kube-n"), "n.kubeconfig");
  Outcome created = kubectl(config, {"create", "namespace", "research"});
  ASSERT_EQ(created.rc, 0) << created;
  EXPECT_EQ(created.out, "namespace/research created\n");
  EXPECT_TRUE(contains(kubectl(config, {"create", "namespace", "research"}).err,
                       "namespaces \"research\" already exists"));
  Outcome labeled = kubectl(config, {"label", "namespace", "research", "team=vision"});
  EXPECT_EQ(labeled.out, "namespace/research labeled\n") << labeled;
  Outcome listed = kubectl(config, {"get", "namespaces", "--show-labels"});
  EXPECT_TRUE(contains(listed.out, "NAME       STATUS   AGE   LABELS\ndefault    Active"))
      << listed;
  EXPECT_TRUE(contains(listed.out, "kubernetes.io/metadata.name=research,team=vision")) << listed;
  const fs::path app = manifest("app.yaml", R"(apiVersion: v1
kind: Namespace
metadata:
  name: prod
  labels: {tier: gold}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: prod}
data: {lr: "0.1"}
)");
  Outcome applied = kubectl(config, {"apply", "-f", app.string()});
  EXPECT_EQ(applied.out, "namespace/prod created\nconfigmap/cfg created\n") << applied;
  applied = kubectl(config, {"apply", "-f", app.string()});
  EXPECT_EQ(applied.out, "namespace/prod unchanged\nconfigmap/cfg unchanged\n") << applied;
  EXPECT_EQ(
      kubectl(config, {"get", "namespace", "prod", "-o", "jsonpath={.metadata.labels.tier}"}).out,
      "gold");
  // Another tenant: none of them.
  const fs::path other = kubeconfig(tenantToken("kube-n2"), "n2.kubeconfig");
  EXPECT_TRUE(contains(kubectl(other, {"get", "namespace", "prod"}).err, "(NotFound)"));
  EXPECT_FALSE(contains(kubectl(other, {"get", "namespaces"}).out, "research"));
  // default stays; a namespace with a pod in it is refused until the pod is gone; one with
  // only a ConfigMap goes with it.
  Outcome kept = kubectl(config, {"delete", "namespace", "default"});
  EXPECT_EQ(kept.rc, 1) << kept;
  EXPECT_TRUE(contains(kept.err, "(Forbidden)")) << kept;
  std::string pod = kPod;
  pod.replace(pod.find("name: trainer"), 13, "name: in-research");
  ASSERT_EQ(
      kubectl(config, {"create", "-n", "research", "-f", manifest("r.yaml", pod).string()}).rc, 0);
  Outcome busy = kubectl(config, {"delete", "namespace", "research"});
  EXPECT_EQ(busy.rc, 1) << busy;
  EXPECT_TRUE(contains(busy.err, "still holds 1 pods and Jobs")) << busy;
  ASSERT_EQ(kubectl(config, {"delete", "pod", "in-research", "-n", "research", "--wait=false"}).rc,
            0);
  ASSERT_TRUE(waitFor(
      [&] {
        return kubectl(config, {"delete", "namespace", "research"}).rc == 0;
      },
      std::chrono::seconds(30)));
  Outcome gone = kubectl(config, {"delete", "namespace", "prod"});
  EXPECT_EQ(gone.out, "namespace \"prod\" deleted\n") << gone;
  EXPECT_TRUE(
      contains(kubectl(config, {"get", "configmap", "cfg", "-n", "prod"}).err, "(NotFound)"));
  listed = kubectl(config, {"get", "namespaces", "-o", "name"});
  EXPECT_EQ(listed.out, "namespace/default\n") << listed;
}

// Watching Secrets and ConfigMaps (`kubectl get secrets -w`): each change as an event, only of
// the objects the watch's token may read; a token revoked meanwhile ends the watch.
TEST_F(KubeTest, SecretsAreWatchedOnlyAsTheTokenMayReadThem) {
  const std::string admin = tenantToken("kube-sw");
  const fs::path config = kubeconfig(admin, "sw.kubeconfig");
  ASSERT_EQ(kubectl(config, {"create", "secret", "generic", "mine", "--from-literal=k=one"}).rc, 0);
  const fs::path reader = kubeconfigOfPolicy(
      admin, "kube-sw", "mine-only",
      {{"secrets/kv/metadata/kube/default/secrets/", {{"capabilities", {"list"}}}},
       {"secrets/kv/data/kube/default/secrets/mine", {{"capabilities", {"read"}}}}});
  Outcome all;
  Outcome mine;
  // The watches run 12 s: the changes below take 4.5 s of pauses and four kubectl calls, which
  // on a loaded machine took long enough that a 6 s watch ended before the last one showed.
  std::thread admin_watch([&] {
    all = kubectl(config,
                  {"get", "secrets", "-w", "--output-watch-events", "-o",
                   "jsonpath={.type} {.object.metadata.name} {.object.data.k}{\"\\n\"}"},
                  std::chrono::seconds(12));
  });
  std::thread reader_watch([&] {
    mine = kubectl(reader,
                   {"get", "secrets", "-w", "--output-watch-events", "-o",
                    "jsonpath={.type} {.object.metadata.name} {.object.data.k}{\"\\n\"}"},
                   std::chrono::seconds(12));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_EQ(kubectl(config, {"create", "secret", "generic", "other", "--from-literal=k=x"}).rc, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // Watches look each second.
  ASSERT_EQ(kubectl(config, {"patch", "secret", "mine", "-p", R"({"stringData":{"k":"two"}})"}).rc,
            0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_EQ(kubectl(config, {"delete", "secret", "other"}).rc, 0);
  admin_watch.join();
  reader_watch.join();
  // base64: one b25l, two dHdv, x eA==.
  EXPECT_EQ(all.out, "ADDED mine b25l\nADDED other eA==\nMODIFIED mine dHdv\nDELETED other eA==\n")
      << all;
  EXPECT_EQ(mine.out, "ADDED mine b25l\nMODIFIED mine dHdv\n") << mine;
  EXPECT_FALSE(contains(mine.out, "other")) << mine;  // Never a Secret it may not read.
  // Its token revoked: the watch ends.
  const std::string token = tenantToken("kube-sw", "mine-only", false);
  const fs::path cut = home_ / "cut.kubeconfig";
  ASSERT_EQ(tessera(token, {"kubeconfig", "-o", cut.string()}).rc, 0);
  Outcome ended;
  std::thread cut_watch([&] {
    ended = kubectl(cut, {"get", "secrets", "-w"}, std::chrono::seconds(6));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_EQ(tessera(token, {"token", "revoke", "--self"}).rc, 0);
  cut_watch.join();
  EXPECT_EQ(ended.rc, 0) << ended;  // It ended by itself (killed after 6 s it would be -15).
  EXPECT_TRUE(contains(ended.out + ended.err, "no longer valid")) << ended;
}

// Must show 1 (nodes, events, describe): the nodes a tenant may use with their GPUs; a pod that
// waits shows the scheduler's reason as a FailedScheduling event in `kubectl describe pod`;
// events are selected as describe selects them, and another tenant sees none of them.
TEST_F(KubeTest, NodesAndEventsSayWhereWorkRunsAndWhyItWaits) {
  const std::string token = tenantToken("kube-e");
  const fs::path config = kubeconfig(token, "e.kubeconfig");
  Outcome nodes = kubectl(config, {"get", "nodes"});
  ASSERT_EQ(nodes.rc, 0) << nodes;
  EXPECT_TRUE(contains(nodes.out,
                       "NAME         STATUS   ROLES    AGE         VERSION\n"
                       "dgx-h100-0   Ready    worker   <unknown>   v1.32.0-tessera\n"))
      << nodes;
  // A watch of nodes sees a node cordoned (then uncordoned, for the other tests).
  Outcome watched_nodes;
  std::thread node_watcher([&] {
    watched_nodes = kubectl(config, {"get", "nodes", "-w"}, std::chrono::seconds(5));
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));
  Outcome cordoned = tessera(root(), {"node", "cordon", "dgx-h100-0"});
  EXPECT_EQ(cordoned.rc, 0) << cordoned;
  node_watcher.join();
  EXPECT_EQ(tessera(root(), {"node", "uncordon", "dgx-h100-0"}).rc, 0);
  EXPECT_TRUE(contains(watched_nodes.out, "dgx-h100-0   Ready    worker")) << watched_nodes;
  EXPECT_TRUE(contains(watched_nodes.out, "dgx-h100-0   Ready,SchedulingDisabled   worker"))
      << watched_nodes;
  Outcome wide_nodes = kubectl(config, {"get", "nodes", "-o", "wide"});
  EXPECT_TRUE(contains(wide_nodes.out, "INTERNAL-IP")) << wide_nodes;
  EXPECT_TRUE(contains(wide_nodes.out, "CONTAINER-RUNTIME")) << wide_nodes;
  EXPECT_TRUE(
      contains(kubectl(config, {"get", "nodes", "-o", "yaml"}).out, "nvidia.com/gpu: \"6\""));
  const json node =
      json::parse(kubectl(config, {"get", "node", "dgx-h100-0", "-o", "json"}).out, nullptr, false);
  ASSERT_TRUE(node.is_object());
  EXPECT_EQ(node["status"]["capacity"]["nvidia.com/gpu"], "6");  // Its last two are in MIG mode.
  EXPECT_TRUE(node["metadata"]["labels"].contains("nvidia.com/gpu.product"));

  std::string holder = kPod;
  holder.replace(holder.find("name: trainer"), 13, "name: holder");
  holder.replace(holder.find("for i in 1 2 3; do echo tick $i; done; sleep 1"), 46,
                 "exec sleep 60");
  // 4 and 4 of the node's 6 whole GPUs (its last two are in MIG mode): the second waits.
  holder.replace(holder.find("nvidia.com/gpu: 1"), 17, "nvidia.com/gpu: 4");
  ASSERT_EQ(kubectl(config, {"create", "-f", manifest("holder.yaml", holder).string()}).rc, 0);
  ASSERT_EQ(kubectl(config, {"wait", "--for=jsonpath={.status.phase}=Running", "pod/holder",
                             "--timeout=60s"})
                .rc,
            0)
      << kubectl(config, {"get", "pod", "holder", "-o", "jsonpath={.status.message}"});
  std::string waiter = holder;
  waiter.replace(waiter.find("name: holder"), 12, "name: waiter");
  ASSERT_EQ(kubectl(config, {"create", "-f", manifest("waiter.yaml", waiter).string()}).rc, 0);
  std::string described;
  EXPECT_TRUE(waitFor(
      [&] {
        described = kubectl(config, {"describe", "pod", "waiter"}).out;
        return contains(described, "Warning  FailedScheduling");
      },
      std::chrono::seconds(15)))
      << described;
  EXPECT_TRUE(contains(described, "Status:       Pending")) << described;
  const std::string reason =
      json::parse(kubectl(config, {"get", "pod", "waiter", "-o", "json"}).out, nullptr,
                  false)["status"]
          .value("message", "");
  ASSERT_FALSE(reason.empty());
  EXPECT_TRUE(contains(described, reason.substr(0, 40))) << described << "\n" << reason;

  Outcome events = kubectl(config, {"get", "events"});
  EXPECT_TRUE(contains(events.out, "LAST SEEN   TYPE      REASON             OBJECT       MESSAGE"))
      << events;
  EXPECT_TRUE(contains(events.out,
                       "Scheduled          pod/holder   Successfully assigned "
                       "default/holder to dgx-h100-0"))
      << events;
  EXPECT_TRUE(contains(events.out, "FailedScheduling   pod/waiter")) << events;
  Outcome wide_events = kubectl(config, {"get", "events", "-o", "wide"});
  EXPECT_TRUE(contains(wide_events.out, "SUBOBJECT")) << wide_events;
  EXPECT_TRUE(contains(wide_events.out, "tessera-scheduler")) << wide_events;  // SOURCE.
  Outcome yaml_events = kubectl(config, {"get", "events", "-o", "yaml"});
  EXPECT_TRUE(contains(yaml_events.out, "reason: FailedScheduling")) << yaml_events;
  EXPECT_TRUE(contains(yaml_events.out, "kind: Event")) << yaml_events;
  const json selected = json::parse(kubectl(config, {"get", "events", "--field-selector",
                                                     "involvedObject.name=waiter", "-o", "json"})
                                        .out,
                                    nullptr, false);
  ASSERT_TRUE(selected.is_object());
  ASSERT_FALSE(selected["items"].empty());
  for (const json& e : selected["items"]) {
    EXPECT_EQ(e["involvedObject"]["name"], "waiter") << e.dump();
  }
  const fs::path other = kubeconfig(tenantToken("kube-e2"), "e2.kubeconfig");
  EXPECT_TRUE(contains(kubectl(other, {"get", "events", "-A"}).err, "No resources found"));
  // Nor the Jobs (kube-j's failed one is still there) and pods of the others.
  EXPECT_TRUE(contains(kubectl(other, {"get", "jobs", "-A"}).err, "No resources found"));
  EXPECT_TRUE(contains(kubectl(other, {"get", "pods", "-A"}).err, "No resources found"));
  EXPECT_EQ(kubectl(config, {"delete", "pod", "waiter", "holder", "--wait=false"}).rc, 0);
}

// Must show 1 (apply): `apply -f` of a Pod and of an Indexed Job (created, then changed, then
// unchanged), `apply --server-side` and its conflict with the client-side manager, forced; a
// change Tessera cannot make to a submitted workload (its spec) is refused in Kubernetes' words.
TEST_F(KubeTest, ApplyCreatesChangesAndLeavesUnchangedAndServerSideApplyConflicts) {
  const std::string token = tenantToken("kube-ap");
  const fs::path config = kubeconfig(token, "ap.kubeconfig");
  std::string pod = kPod;
  pod.replace(pod.find("name: trainer"), 13, "name: applied");
  pod.replace(pod.find("for i in 1 2 3; do echo tick $i; done; sleep 1"), 46, "exec sleep 30");
  const fs::path file = manifest("applied.yaml", pod);
  Outcome created = kubectl(config, {"apply", "-f", file.string()});
  ASSERT_EQ(created.rc, 0) << created;
  EXPECT_EQ(created.out, "pod/applied created\n");
  EXPECT_EQ(kubectl(config, {"apply", "-f", file.string()}).out, "pod/applied unchanged\n");
  std::string relabelled = pod;
  relabelled.replace(relabelled.find("app: llm"), 8, "app: llm2");
  Outcome configured =
      kubectl(config, {"apply", "-f", manifest("relabelled.yaml", relabelled).string()});
  EXPECT_EQ(configured.out, "pod/applied configured\n") << configured;
  EXPECT_EQ(kubectl(config, {"get", "pod", "applied", "-o", "jsonpath={.metadata.labels.app}"}).out,
            "llm2");

  std::string other = pod;
  other.replace(other.find("app: llm"), 8, "app: other");
  const fs::path other_file = manifest("other.yaml", other);
  Outcome conflict = kubectl(config, {"apply", "--server-side", "-f", other_file.string()});
  EXPECT_EQ(conflict.rc, 1) << conflict;
  EXPECT_TRUE(contains(conflict.err,
                       "Apply failed with 1 conflict: conflict with "
                       "\"kubectl-client-side-apply\" using v1: "
                       ".metadata.labels.app"))
      << conflict;
  Outcome forced =
      kubectl(config, {"apply", "--server-side", "--force-conflicts", "-f", other_file.string()});
  EXPECT_EQ(forced.out, "pod/applied serverside-applied\n") << forced;
  EXPECT_EQ(kubectl(config, {"get", "pod", "applied", "-o", "jsonpath={.metadata.labels.app}"}).out,
            "other");
  std::string respec = relabelled;
  respec.replace(respec.find("exec sleep 30"), 13, "exec sleep 31");
  Outcome refused = kubectl(config, {"apply", "-f", manifest("respec.yaml", respec).string()});
  EXPECT_EQ(refused.rc, 1) << refused;
  EXPECT_TRUE(contains(refused.err,
                       "pod updates may not change fields other than "
                       "`metadata.labels` and `metadata.annotations`"))
      << refused;
  EXPECT_EQ(kubectl(config, {"label", "pod", "applied", "tier=gold"}).out, "pod/applied labeled\n");

  // An Indexed Job with a GPU each, the same way.
  std::string job = kIndexedJob;
  job.replace(job.find("name: ddp"), 9, "name: ajob");
  const fs::path job_file = manifest("ajob.yaml", job);
  EXPECT_EQ(kubectl(config, {"apply", "-f", job_file.string()}).out, "job.batch/ajob created\n");
  EXPECT_EQ(kubectl(config, {"apply", "-f", job_file.string()}).out, "job.batch/ajob unchanged\n");
  std::string job2 = job;
  job2.replace(job2.find("team: nlp"), 9, "team: cv");
  EXPECT_EQ(kubectl(config, {"apply", "-f", manifest("ajob2.yaml", job2).string()}).out,
            "job.batch/ajob configured\n");
  EXPECT_EQ(kubectl(config, {"get", "job", "ajob", "-o", "jsonpath={.metadata.labels.team}"}).out,
            "cv");
  // Server-side apply of what is not there creates it.
  Outcome cm = kubectl(config, {"apply", "--server-side", "-f",
                                manifest("cm.yaml",
                                         "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
                                         "  name: cfg\ndata:\n  lr: \"0.1\"\n")
                                    .string()});
  EXPECT_EQ(cm.out, "configmap/cfg serverside-applied\n") << cm;
  EXPECT_EQ(kubectl(config, {"delete", "pod", "applied", "--wait=false"}).rc, 0);
  EXPECT_EQ(kubectl(config, {"delete", "job", "ajob", "--wait=false"}).rc, 0);
}

// Must show 3: the official Python client (Debian's python3-kubernetes) as a second real client:
// create, list, watch (watch=True), logs, delete, and its errors; a Job polled through its
// status subresource (read_namespaced_job_status).
TEST_F(KubeTest, ThePythonClientCreatesListsWatchesReadsLogsAndDeletes) {
  if (access("/usr/lib/python3/dist-packages/kubernetes", F_OK) != 0) {
    GTEST_SKIP() << "python3-kubernetes is not installed (scripts/bootstrap installs it)";
  }
  const std::string token = tenantToken("kube-py");
  const fs::path config = kubeconfig(token, "py.kubeconfig");
  const Outcome o = runArgv(
      {"/usr/bin/python3", "-W", "ignore::ResourceWarning",
       tessera::integration::sourceDir() + "/tests/kube/python_client_test.py", "-v"},
      {{"KUBECONFIG", config.string()}, {"HOME", home_.string()}, {"PYTHONDONTWRITEBYTECODE", "1"}},
      home_);
  EXPECT_EQ(o.rc, 0) << o;
  EXPECT_TRUE(contains(o.err, "Ran 3 tests")) << o;
  EXPECT_TRUE(contains(o.err, "\nOK")) << o;
}

}  // namespace
