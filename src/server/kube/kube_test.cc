// The Kubernetes API's pure parts: documents, the Pod mapping both ways, Tables, quantities,
// the authorization mapping and the Status shapes. kube_integration_test drives them through
// the real binary with the real kubectl.
#include <gtest/gtest.h>

#include <random>

#include "core/rfc3339.h"
#include "server/kube/access.h"
#include "server/kube/objects.h"
#include "server/kube/patch.h"
#include "server/kube/protobuf.h"
#include "server/kube/selector.h"

namespace tessera::server::kube {
namespace {

using nlohmann::json;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

TEST(KubeObjectsTest, AgeReadsAsKubectlSaysIt) {
  // apimachinery's HumanDuration, boundary by boundary.
  EXPECT_EQ(humanDuration(seconds(0)), "0s");
  EXPECT_EQ(humanDuration(seconds(119)), "119s");
  EXPECT_EQ(humanDuration(seconds(120)), "2m");
  EXPECT_EQ(humanDuration(seconds(150)), "2m30s");
  EXPECT_EQ(humanDuration(minutes(10)), "10m");
  EXPECT_EQ(humanDuration(minutes(179)), "179m");
  EXPECT_EQ(humanDuration(hours(3)), "3h");
  EXPECT_EQ(humanDuration(hours(7) + minutes(30)), "7h30m");
  EXPECT_EQ(humanDuration(hours(47)), "47h");
  EXPECT_EQ(humanDuration(hours(48)), "2d");
  EXPECT_EQ(humanDuration(hours(76)), "3d4h");
  EXPECT_EQ(humanDuration(hours(24 * 10)), "10d");
  EXPECT_EQ(humanDuration(hours(24 * 800)), "2y70d");
  EXPECT_EQ(humanDuration(hours(24 * 365 * 9)), "9y");
  EXPECT_EQ(humanDuration(seconds(-5)), "0s");  // A clock a little behind: never negative.
}

TEST(KubeObjectsTest, QuantitiesScaleToMilliCoresAndMebibytes) {
  EXPECT_EQ(*cpuMilli("500m"), 500);
  EXPECT_EQ(*cpuMilli("2"), 2000);
  EXPECT_EQ(*cpuMilli(1.5), 1500);
  EXPECT_EQ(*cpuMilli(3), 3000);
  EXPECT_EQ(*memoryMiB("4Gi"), 4096);
  EXPECT_EQ(*memoryMiB("1000Mi"), 1000);
  EXPECT_EQ(*memoryMiB("1G"), 954);   // 10^9 bytes, rounded up to whole MiB.
  EXPECT_EQ(*memoryMiB("512Ki"), 1);  // Half a MiB: rounded up.
  for (const json& bad : {json("4Xi"), json("-1"), json(""), json("1.2.3"), json(true)}) {
    auto r = memoryMiB(bad);
    EXPECT_FALSE(r.isOk()) << bad;
  }
  EXPECT_NE(cpuMilli("lots").status().message().find("'lots' is not a quantity"),
            std::string::npos);
}

json pod(json spec, json metadata = json::object()) {
  if (!metadata.contains("name")) {
    metadata["name"] = "p";
  }
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", metadata}, {"spec", spec}};
}

TEST(KubeObjectsTest, APodIsReadAsTesseraReadsAWorkload) {
  const json p = pod({{"restartPolicy", "Never"},
                      {"nodeSelector", {{"pool", "a100"}}},
                      {"containers",
                       {{{"name", "main"},
                         {"image", "nvcr.io/nvidia/pytorch:24.05-py3"},
                         {"command", {"torchrun"}},
                         {"args", {"--nproc-per-node=2", "train.py"}},
                         {"env", {{{"name", "EPOCHS"}, {"value", "3"}}}},
                         {"resources",
                          {{"limits", {{"nvidia.com/gpu", "2"}, {"memory", "8Gi"}}},
                           {"requests", {{"cpu", "1500m"}, {"memory", "4Gi"}}}}}}}}},
                     {{"name", "train"}, {"labels", {{"kai.scheduler/queue", "research"}}}});
  auto s = workloadFromPod(p, "default", /*strict=*/true);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  EXPECT_EQ(s->name, "train");
  EXPECT_EQ(s->spec["image"], "nvcr.io/nvidia/pytorch:24.05-py3");
  EXPECT_EQ(s->spec["command"], json({"torchrun", "--nproc-per-node=2", "train.py"}));
  EXPECT_EQ(s->spec["env"], json({{"EPOCHS", "3"}}));
  EXPECT_EQ(s->spec["gpu"], json({{"count", 2}}));
  EXPECT_EQ(s->spec["cpuMilli"], 1500);
  EXPECT_EQ(s->spec["memoryMiB"], 4096);  // Requests first, as Kubernetes schedules by them.
  EXPECT_EQ(s->spec["queue"], "research");
  EXPECT_EQ(s->spec["nodeSelector"], json({{"pool", "a100"}}));
  EXPECT_FALSE(s->spec.contains("restart"));  // Never: no retry.
  EXPECT_EQ(s->kube["namespace"], "default");
  EXPECT_EQ(s->kube["labels"]["kai.scheduler/queue"], "research");
  EXPECT_EQ(s->kube["spec"]["terminationGracePeriodSeconds"], 30);  // Kubernetes' default.
  EXPECT_TRUE(s->warnings.empty());

  // Run:ai's queue label, KAI's fraction annotation; OnFailure retries.
  auto f = workloadFromPod(
      pod({{"restartPolicy", "OnFailure"}, {"containers", {{{"name", "m"}, {"image", "x"}}}}},
          {{"labels", {{"runai/queue", "team"}}}, {"annotations", {{"gpu-fraction", "0.25"}}}}),
      "ml", false);
  ASSERT_TRUE(f.isOk()) << f.status().toString();
  EXPECT_EQ(f->spec["gpu"], json({{"milli", 250}}));
  EXPECT_EQ(f->spec["queue"], "team");
  EXPECT_EQ(f->spec["restart"]["mode"], "delay");
  auto m = workloadFromPod(pod({{"containers", {{{"name", "m"}, {"image", "x"}}}}},
                               {{"annotations", {{"gpu-memory", "2000"}}}}),
                           "ml", false);
  ASSERT_TRUE(m.isOk());
  EXPECT_EQ(m->spec["gpu"], json({{"memoryMiB", 2000}}));
  // Run:ai's dynamic fractions: a burst limit over the fraction, on a time-sliced share.
  auto d = workloadFromPod(
      pod({{"containers", {{{"name", "m"}, {"image", "x"}}}}},
          {{"annotations", {{"gpu-fraction", "0.25"}, {"gpu-fraction-limit", "0.8"}}}}),
      "ml", false);
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(d->spec["gpu"], json({{"milli", 250}, {"milliLimit", 800}, {"isolation", "none"}}));
  for (const char* bad : {"0.2", "1.5", "x"}) {
    auto l = workloadFromPod(
        pod({{"containers", {{{"name", "m"}, {"image", "x"}}}}},
            {{"annotations", {{"gpu-fraction", "0.25"}, {"gpu-fraction-limit", bad}}}}),
        "ml", false);
    ASSERT_FALSE(l.isOk()) << bad;
    EXPECT_NE(l.status().message().find("metadata.annotations[gpu-fraction-limit]"),
              std::string::npos)
        << l.status().message();
  }
}

TEST(KubeObjectsTest, WhatTesseraCannotDoIsRefusedNamingTheFieldAndSafeIgnoresWarn) {
  auto error = [](const json& p, bool strict = true) {
    auto r = workloadFromPod(p, "default", strict);
    EXPECT_FALSE(r.isOk()) << p;
    return r.isOk() ? std::string() : r.status().message();
  };
  const json one = {{"name", "m"}, {"command", {"true"}}};
  EXPECT_EQ(error(pod({{"containers", json::array()}})), "spec.containers: Required value");
  EXPECT_EQ(error(pod({{"containers", {one, one}}})).substr(0, 27), "spec.containers: Forbidden:");
  EXPECT_EQ(error(pod({{"hostNetwork", true}, {"containers", {one}}})).substr(0, 28),
            "spec.hostNetwork: Forbidden:");
  EXPECT_EQ(error(pod({{"initContainers", json::array()}, {"containers", {one}}})).substr(0, 31),
            "spec.initContainers: Forbidden:");
  json privileged = one;
  privileged["securityContext"] = {{"privileged", true}};
  EXPECT_NE(error(pod({{"containers", {privileged}}})).find("securityContext.privileged"),
            std::string::npos);
  json requests_only = one;
  requests_only["resources"] = {{"requests", {{"nvidia.com/gpu", 1}}}};
  EXPECT_NE(
      error(pod({{"containers", {requests_only}}})).find("limits[nvidia.com/gpu]: Required value"),
      std::string::npos);
  json half_gpu = one;
  half_gpu["resources"] = {{"limits", {{"nvidia.com/gpu", "0.5"}}}};
  EXPECT_NE(error(pod({{"containers", {half_gpu}}})).find("whole number of GPUs"),
            std::string::npos);
  EXPECT_NE(error(pod({{"containers", {one}}}, {{"annotations", {{"gpu-fraction", "1.5"}}}}))
                .find("metadata.annotations[gpu-fraction]"),
            std::string::npos);
  json from_secret = one;
  from_secret["env"] = {{{"name", "K"}, {"valueFrom", {{"secretKeyRef", json::object()}}}}};
  EXPECT_NE(error(pod({{"containers", {from_secret}}})).find("env[0].valueFrom"),
            std::string::npos);
  EXPECT_NE(error(pod({{"restartPolicy", "Sometimes"}, {"containers", {one}}}))
                .find("Unsupported value: \"Sometimes\""),
            std::string::npos);
  EXPECT_EQ(error(pod({{"containers", {one}}}, {{"name", "p"}, {"namespace", "other"}})),
            "the namespace of the provided object does not match the namespace sent on the "
            "request");
  json typo = one;
  typo["imagePullPolcy"] = "Always";
  EXPECT_EQ(error(pod({{"containers", {typo}}})),
            "spec.containers[0].imagePullPolcy: unknown field");
  // Not strict: accepted, with a warning; so are fields Tessera may safely ignore.
  auto lenient = workloadFromPod(
      pod({{"affinity", json::object()}, {"restartPolicy", "Never"}, {"containers", {typo}}}),
      "default", false);
  ASSERT_TRUE(lenient.isOk());
  ASSERT_EQ(lenient->warnings.size(), 2U);
  EXPECT_NE(lenient->warnings[1].find("imagePullPolcy"), std::string::npos);
  EXPECT_NE(lenient->warnings[0].find("spec.affinity is ignored"), std::string::npos);
}

// Secret, configMap and emptyDir volumes (docs/kubernetes.md "Volumes"): Tessera's kv and tmpfs
// volumes at each mountPath, the Secrets and ConfigMaps referenced for the server to check;
// every other source, subPath and a pod without an image are refused naming the field.
TEST(KubeObjectsTest, VolumesAreKvFilesAndTmpfsFoldersInTheContainer) {
  json c = {{"name", "m"},
            {"image", "registry.example/train:1"},
            {"volumeMounts",
             {{{"name", "db"}, {"mountPath", "/etc/db/"}, {"readOnly", true}},
              {{"name", "cfg"}, {"mountPath", "/etc/cfg"}},
              {{"name", "db"}, {"mountPath", "/etc/db2"}},
              {{"name", "shm"}, {"mountPath", "/dev/shm"}},
              {{"name", "scratch"}, {"mountPath", "/scratch"}}}}};
  const json volumes = {
      {{"name", "db"}, {"secret", {{"secretName", "db"}, {"defaultMode", 420}}}},
      {{"name", "cfg"},
       {"configMap",
        {{"name", "cfg"},
         {"optional", true},
         {"items", {{{"key", "model.yaml"}, {"path", "conf/model.yaml"}}}}}}},
      {{"name", "shm"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", "8Gi"}}}},
      {{"name", "unused"}, {"emptyDir", json::object()}},
      {{"name", "scratch"}, {"emptyDir", json::object()}}};
  auto r = workloadFromPod(
      pod({{"restartPolicy", "Never"}, {"volumes", volumes}, {"containers", {c}}}), "team", true);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->spec["volumes"], json::parse(R"([
              {"path": "/etc/db", "kv": "kube/team/secrets/db"},
              {"path": "/etc/cfg", "kv": "kube/team/configmaps/cfg", "optional": true,
               "items": {"model.yaml": "conf/model.yaml"}},
              {"path": "/etc/db2", "kv": "kube/team/secrets/db"},
              {"path": "/dev/shm", "tmpfs": {"sizeMiB": 8192}},
              {"path": "/scratch", "tmpfs": {}}])"));
  // Each Secret and ConfigMap once, for the server to check as the submitter may read it.
  ASSERT_EQ(r->env_refs.size(), 2U);
  EXPECT_TRUE(r->env_refs[0].volume);
  EXPECT_EQ(r->env_refs[0].resource, "secrets");
  EXPECT_EQ(r->env_refs[0].field, "spec.volumes[0].secret");
  EXPECT_EQ(r->env_refs[1].keys, std::vector<std::string>{"model.yaml"});
  EXPECT_TRUE(r->env_refs[1].optional);
  // defaultMode; the mounted disk-less emptyDir (not the one nothing mounts).
  ASSERT_EQ(r->warnings.size(), 2U) << json(r->warnings);
  EXPECT_NE(r->warnings[0].find("spec.volumes[0].secret.defaultMode is ignored"),
            std::string::npos);
  EXPECT_NE(r->warnings[1].find("spec.volumes[4].emptyDir is a tmpfs here"), std::string::npos);

  auto error = [&](json vs, json container) {
    auto bad = workloadFromPod(pod({{"volumes", std::move(vs)}, {"containers", {container}}}),
                               "team", true);
    EXPECT_FALSE(bad.isOk());
    return bad.isOk() ? std::string() : bad.status().message();
  };
  const json mount_d = {{{"name", "d"}, {"mountPath", "/data"}}};
  json mounting = c;
  mounting["volumeMounts"] = mount_d;
  EXPECT_EQ(error({{{"name", "d"}, {"hostPath", {{"path", "/etc"}}}}}, mounting).substr(0, 36),
            "spec.volumes[0].hostPath: Forbidden:");
  EXPECT_EQ(error({{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", "x"}}}}}, mounting)
                .substr(0, 49),
            "spec.volumes[0].persistentVolumeClaim: Forbidden:");
  EXPECT_EQ(error({{{"name", "d"}, {"secret", json::object()}}}, mounting),
            "spec.volumes[0].secret.secretName: Required value");
  EXPECT_EQ(error({{{"name", "D_"}, {"emptyDir", json::object()}}}, mounting).substr(0, 37),
            "spec.volumes[0].name: Invalid value: ");
  EXPECT_EQ(
      error({{{"name", "d"}, {"emptyDir", json::object()}, {"secret", json::object()}}}, mounting)
          .substr(0, 31),
      "spec.volumes[0]: Invalid value:");
  EXPECT_EQ(
      error({{{"name", "d"},
              {"secret", {{"secretName", "s"}, {"items", {{{"key", "k"}, {"path", "../k"}}}}}}}},
            mounting)
          .substr(0, 45),
      "spec.volumes[0].secret.items[0].path: Invalid");
  const json d = {{{"name", "d"}, {"emptyDir", json::object()}}};
  json other = c;
  other["volumeMounts"] = {{{"name", "e"}, {"mountPath", "/data"}}};
  EXPECT_EQ(error(d, other), "spec.containers[0].volumeMounts[0].name: Not found: \"e\"");
  for (const char* path : {"data", "/proc/x", "/a/../b", "/dev"}) {
    other["volumeMounts"] = {{{"name", "d"}, {"mountPath", path}}};
    EXPECT_EQ(error(d, other).substr(0, 52), "spec.containers[0].volumeMounts[0].mountPath: Invali")
        << path;
  }
  other["volumeMounts"] = {{{"name", "d"}, {"mountPath", "/data"}, {"subPath", "x"}}};
  EXPECT_EQ(error(d, other).substr(0, 55),
            "spec.containers[0].volumeMounts[0].subPath: Forbidden: ");
  other["volumeMounts"] = {{{"name", "d"}, {"mountPath", "/data"}},
                           {{"name", "d"}, {"mountPath", "/data/"}}};
  EXPECT_NE(error(d, other).find("volumeMounts[1].mountPath: Invalid value: \"/data\": must be "
                                 "unique"),
            std::string::npos);
  other["volumeMounts"] = {{{"name", "d"}, {"mountPath", "/data"}, {"readOnly", true}}};
  EXPECT_NE(error(d, other).find("readOnly: Forbidden"), std::string::npos);
  // A pod without an image is a process on its node: nothing to mount into.
  json process = {{"name", "m"}, {"command", {"true"}}, {"volumeMounts", mount_d}};
  EXPECT_EQ(error(d, process).substr(0, 46), "spec.containers[0].volumeMounts: Forbidden: vo");
  // In a Job, errors name the template's field.
  json job = json::parse(R"({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
      "spec": {"template": {"spec": {"restartPolicy": "Never",
        "volumes": [{"name": "d", "hostPath": {"path": "/"}}]}}}})");
  job["spec"]["template"]["spec"]["containers"] = {mounting};
  auto j = workloadFromJob(job, "team", true);
  ASSERT_FALSE(j.isOk());
  EXPECT_EQ(j.status().message().substr(0, 54),
            "spec.template.spec.volumes[0].hostPath: Forbidden: Tes");
}

WorkloadRecord record(WorkloadPhase phase) {
  WorkloadRecord r;
  r.name = "train";
  r.submitted = "2026-12-04T10:00:00Z";
  r.spec = {{"gpu", {{"count", 1}}}, {"command", {"sleep", "60"}}};
  r.status.phase = phase;
  r.create_revision = 7;
  r.mod_revision = 9;
  return r;
}

TEST(KubeObjectsTest, AWorkloadIsAPodWhoseStatusAndTableReadAsKubectlExpects) {
  const core::WallTime now = *core::parseRfc3339("2026-12-04T10:01:05Z");
  WorkloadRecord r = record(WorkloadPhase::kPending);
  WorkloadStatus waiting;
  waiting.reason = "waiting for 1 GPU: queue team-1/default is at its limit";
  waiting.tasks.resize(1);
  json p = podObject("team-1", r, waiting);
  EXPECT_EQ(p["metadata"]["resourceVersion"], "9");
  EXPECT_EQ(p["metadata"]["namespace"], "default");
  EXPECT_EQ(p["status"]["phase"], "Pending");
  EXPECT_EQ(p["status"]["conditions"][0], json({{"type", "PodScheduled"},
                                                {"status", "False"},
                                                {"reason", "Unschedulable"},
                                                {"message", waiting.reason}}));
  // Stable across reads, another for another incarnation of the name.
  EXPECT_EQ(p["metadata"]["uid"], podObject("team-1", r, waiting)["metadata"]["uid"]);
  WorkloadRecord again = r;
  again.create_revision = 20;
  EXPECT_NE(p["metadata"]["uid"], podObject("team-1", again, waiting)["metadata"]["uid"]);
  // A Tessera workload's spec shows as its Pod.
  EXPECT_EQ(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1");

  WorkloadStatus running;
  running.phase = WorkloadPhase::kRunning;
  running.tasks.resize(1);
  running.tasks[0].state = "running";
  running.tasks[0].node = "gpu-a";
  running.tasks[0].starts = 2;  // Placed again once (an eviction).
  running.tasks[0].started_at = *core::parseRfc3339("2026-12-04T10:00:30Z");
  WorkloadStatus done = running;
  done.phase = WorkloadPhase::kSucceeded;
  done.tasks[0].state = "finished";
  done.tasks[0].exit_code = 0;
  WorkloadStatus failed = done;
  failed.phase = WorkloadPhase::kFailed;
  failed.tasks[0].exit_code = 3;
  const json t = podTable({podObject("team-1", r, waiting), podObject("team-1", r, running),
                           podObject("team-1", r, done), podObject("team-1", r, failed)},
                          "42", IncludeObject::kMetadata, now);
  EXPECT_EQ(t["metadata"]["resourceVersion"], "42");
  ASSERT_EQ(t["columnDefinitions"].size(), 9U);
  EXPECT_EQ(t["columnDefinitions"][5]["priority"], 1);  // IP and after: -o wide only.
  EXPECT_EQ(t["rows"][0]["cells"],
            json({"train", "0/1", "Pending", "0", "65s", "<none>", "<none>", "<none>", "<none>"}));
  EXPECT_EQ(t["rows"][1]["cells"],
            json({"train", "1/1", "Running", "1", "65s", "<none>", "gpu-a", "<none>", "<none>"}));
  EXPECT_EQ(t["rows"][2]["cells"][1], "0/1");
  EXPECT_EQ(t["rows"][2]["cells"][2], "Completed");
  EXPECT_EQ(t["rows"][3]["cells"][2], "Error");
  EXPECT_EQ(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
  EXPECT_EQ(t["rows"][0]["object"]["metadata"]["name"], "train");
  EXPECT_EQ(podTable({p}, "1", IncludeObject::kObject, now)["rows"][0]["object"]["kind"], "Pod");
}

json indexedJob() {
  return json::parse(R"({
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "ddp", "labels": {"kai.scheduler/queue": "research"},
                 "annotations": {"kai.scheduler/batch-min-member": "2"}},
    "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed", "backoffLimit": 1,
             "ttlSecondsAfterFinished": 60,
             "template": {"metadata": {"labels": {"app": "ddp"}},
                          "spec": {"restartPolicy": "Never",
                                   "containers": [{"name": "main", "image": "busybox",
                                                   "command": ["sh", "-c", "echo $RANK"],
                                                   "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}
  })");
}

TEST(KubeObjectsTest, AJobIsOneWorkloadOfItsCompletionsParallelismAtATime) {
  auto j = workloadFromJob(indexedJob(), "default", true);
  ASSERT_TRUE(j.isOk()) << j.status().message();
  EXPECT_EQ(j->name, "ddp");
  EXPECT_EQ(j->spec["tasks"], 2);
  EXPECT_EQ(j->spec["minAvailable"], 2);    // kai.scheduler/batch-min-member: a gang.
  EXPECT_EQ(j->spec["queue"], "research");  // The Job's label, as KAI's pod-grouper reads it.
  EXPECT_EQ(j->spec["gpu"], json({{"count", 1}}));
  EXPECT_EQ(j->spec["indexEnv"], json({"JOB_COMPLETION_INDEX"}));
  // backoffLimit, with the Job controller's back-off: 10 s doubling to 6 minutes.
  EXPECT_EQ(j->spec["restart"],
            json({{"attempts", 1}, {"delay", 10}, {"maxDelay", 360}, {"mode", "fail"}}));
  EXPECT_EQ(j->kube["kind"], "Job");
  EXPECT_EQ(j->kube["spec"]["ttlSecondsAfterFinished"], 60);
  EXPECT_EQ(j->kube["spec"]["template"]["spec"]["restartPolicy"], "Never");

  // Defaults: one pod, elastic (minAvailable 1), backoffLimit 6, NonIndexed.
  json plain = indexedJob();
  plain["spec"] = {{"template", plain["spec"]["template"]}};
  plain["metadata"].erase("annotations");
  auto d = workloadFromJob(plain, "default", true);
  ASSERT_TRUE(d.isOk()) << d.status().message();
  EXPECT_EQ(d->spec["tasks"], 1);
  EXPECT_EQ(d->spec["minAvailable"], 1);
  EXPECT_EQ(d->spec["restart"]["attempts"], 6);
  EXPECT_FALSE(d->spec.contains("indexEnv"));
  EXPECT_EQ(d->kube["spec"]["completionMode"], "NonIndexed");

  // Fewer at once than completions: Kubernetes' default parallelism is 1; more than the
  // completions is the same Job.
  plain["spec"]["completions"] = 5;
  auto serial = workloadFromJob(plain, "default", true);
  ASSERT_TRUE(serial.isOk()) << serial.status().message();
  EXPECT_EQ(serial->spec["tasks"], 5);
  EXPECT_EQ(serial->spec["parallelism"], 1);
  EXPECT_EQ(serial->kube["spec"]["parallelism"], 1);
  plain["spec"]["parallelism"] = 7;
  auto wide = workloadFromJob(plain, "default", true);
  ASSERT_TRUE(wide.isOk()) << wide.status().message();
  EXPECT_FALSE(wide->spec.contains("parallelism"));  // All at once: the workload's default.
  EXPECT_EQ(wide->kube["spec"]["parallelism"], 5);

  // Refusals name the Job's field.
  auto refused = [](json job) {
    auto r = workloadFromJob(job, "default", true);
    return r.isOk() ? std::string("accepted") : r.status().message();
  };
  json j2 = indexedJob();
  j2["spec"]["parallelism"] = 1;  // A gang of 2 cannot start one at a time.
  EXPECT_EQ(refused(j2),
            "metadata.annotations[kai.scheduler/batch-min-member]: Invalid value: expected a "
            "number of pods in 1..1 (the Job's parallelism)");
  j2 = indexedJob();
  j2["spec"]["template"]["spec"]["restartPolicy"] = "Always";
  EXPECT_EQ(refused(j2),
            "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: "
            "\"OnFailure\", \"Never\"");
  j2 = indexedJob();
  j2["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "0.5";
  EXPECT_TRUE(refused(j2).starts_with(
      "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value"))
      << refused(j2);
  j2 = indexedJob();
  j2["spec"]["template"]["spec"]["hostNetwork"] = true;
  EXPECT_EQ(refused(j2),
            "spec.template.spec.hostNetwork: Forbidden: Tessera does not support this field");
  j2 = indexedJob();
  j2["spec"]["suspend"] = "yes";
  EXPECT_EQ(refused(j2), "spec.suspend: expected true or false");
  // A suspended Job is a workload created held (WorkloadRecord::suspended).
  j2["spec"]["suspend"] = true;
  auto held = workloadFromJob(j2, "default", true);
  ASSERT_TRUE(held.isOk()) << held.status().message();
  EXPECT_EQ(held->spec["suspended"], true);
  EXPECT_FALSE(held->kube["spec"].contains("suspend"));  // Shown from the record.
  j2 = indexedJob();
  j2["spec"]["podFailurePolicy"] = json::object();
  EXPECT_TRUE(refused(j2).starts_with("spec.podFailurePolicy: Forbidden")) << refused(j2);
  j2 = indexedJob();
  j2["spec"].erase("completions");
  EXPECT_EQ(refused(j2), "spec.completions: Required value: when completion mode is Indexed");
  j2 = indexedJob();
  j2["metadata"]["annotations"]["kai.scheduler/batch-min-member"] = "3";
  EXPECT_TRUE(refused(j2).starts_with(
      "metadata.annotations[kai.scheduler/batch-min-member]: Invalid value"))
      << refused(j2);
  j2 = indexedJob();
  j2["spec"]["completions"] = -1;
  EXPECT_TRUE(refused(j2).starts_with("spec.completions: Invalid value")) << refused(j2);
  j2 = indexedJob();
  j2["spec"]["bogus"] = 1;
  EXPECT_EQ(refused(j2), "spec.bogus: unknown field");
}

TEST(KubeObjectsTest, AJobsTasksArePodsItsSelectorFindsAndItsStatusCountsThem) {
  const core::WallTime now = *core::parseRfc3339("2026-12-04T10:01:05Z");
  auto sub = workloadFromJob(indexedJob(), "default", true);
  ASSERT_TRUE(sub.isOk());
  WorkloadRecord r = record(WorkloadPhase::kRunning);
  r.name = "ddp";
  r.spec = sub->spec;
  r.kube = sub->kube;
  WorkloadStatus st;
  st.phase = WorkloadPhase::kRunning;
  st.tasks.resize(2);
  st.tasks[0].state = "finished";
  st.tasks[0].exit_code = 0;
  st.tasks[0].node = "gpu-a";
  st.tasks[1].state = "running";
  st.tasks[1].node = "gpu-b";
  st.tasks[1].started_at = *core::parseRfc3339("2026-12-04T10:00:30Z");
  ASSERT_TRUE(isJob(r));
  const std::vector<json> pods = podsOf("team-1", r, st);
  ASSERT_EQ(pods.size(), 2U);
  const std::string uid = uidOf("team-1", r);
  for (int i = 0; i < 2; ++i) {
    const json& m = pods[i]["metadata"];
    const std::string name = m["name"];
    EXPECT_EQ(name, taskPodName("team-1", r, i));
    EXPECT_TRUE(name.starts_with("ddp-" + std::to_string(i) + "-")) << name;
    auto parsed = parseTaskPodName(name);
    ASSERT_TRUE(parsed);
    EXPECT_EQ(parsed->workload, "ddp");
    EXPECT_EQ(parsed->index, i);
    EXPECT_EQ(m["labels"]["batch.kubernetes.io/controller-uid"], uid);
    EXPECT_EQ(m["labels"]["job-name"], "ddp");
    EXPECT_EQ(m["labels"]["app"], "ddp");  // The template's.
    EXPECT_EQ(m["annotations"]["batch.kubernetes.io/job-completion-index"], std::to_string(i));
    EXPECT_EQ(m["ownerReferences"][0]["kind"], "Job");
    EXPECT_EQ(m["ownerReferences"][0]["uid"], uid);
    EXPECT_EQ(pods[i]["spec"]["hostname"], "ddp-" + std::to_string(i));
  }
  EXPECT_EQ(pods[0]["status"]["phase"], "Succeeded");
  EXPECT_EQ(pods[1]["status"]["phase"], "Running");
  EXPECT_EQ(pods[1]["spec"]["nodeName"], "gpu-b");
  EXPECT_NE(pods[0]["metadata"]["uid"], pods[1]["metadata"]["uid"]);
  EXPECT_FALSE(parseTaskPodName("ddp"));
  EXPECT_FALSE(parseTaskPodName("ddp-x-abcde"));
  EXPECT_FALSE(parseTaskPodName("-0-abcde"));

  json job = jobObject("team-1", r, st);
  EXPECT_EQ(job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"], uid);
  EXPECT_EQ(job["status"]["active"], 1);
  EXPECT_EQ(job["status"]["ready"], 1);
  EXPECT_EQ(job["status"]["succeeded"], 1);
  EXPECT_FALSE(job["status"].contains("conditions"));
  json t = jobTable({job}, "5", IncludeObject::kMetadata, now);
  EXPECT_EQ(t["rows"][0]["cells"][0], "ddp");
  EXPECT_EQ(t["rows"][0]["cells"][1], "Running");
  EXPECT_EQ(t["rows"][0]["cells"][2], "1/2");
  EXPECT_EQ(t["rows"][0]["cells"][3], "65s");

  // Done: Complete (what `kubectl wait --for=condition=complete` waits for).
  r.finished = "2026-12-04T10:00:50Z";
  st.phase = WorkloadPhase::kSucceeded;
  job = jobObject("team-1", r, st);
  EXPECT_EQ(job["status"]["succeeded"], 2);
  EXPECT_EQ(job["status"]["completionTime"], r.finished);
  ASSERT_EQ(job["status"]["conditions"].size(), 2U);
  EXPECT_EQ(job["status"]["conditions"][1]["type"], "Complete");
  EXPECT_EQ(job["status"]["conditions"][1]["status"], "True");
  t = jobTable({job}, "6", IncludeObject::kNone, now);
  EXPECT_EQ(t["rows"][0]["cells"][1], "Complete");
  EXPECT_EQ(t["rows"][0]["cells"][2], "2/2");
  EXPECT_EQ(t["rows"][0]["cells"][3], "50s");
  // Failed: never Complete.
  st.phase = WorkloadPhase::kFailed;
  st.reason = "task 1 on node gpu-b exited with code 3 after 2 attempts";
  st.attempt = 2;
  st.tasks[1].state = "finished";
  st.tasks[1].exit_code = 3;
  job = jobObject("team-1", r, st);
  EXPECT_EQ(job["status"]["conditions"][1]["type"], "Failed");
  EXPECT_EQ(job["status"]["conditions"][1]["reason"], "BackoffLimitExceeded");
  EXPECT_EQ(job["status"]["failed"], 2);  // The earlier attempt's, and this one's.
  EXPECT_EQ(podsOf("team-1", r, st)[1]["status"]["phase"], "Failed");

  // Tessera's own workload of several tasks is a Job of Indexed pods too.
  WorkloadRecord own = record(WorkloadPhase::kPending);
  own.spec["tasks"] = 3;
  ASSERT_TRUE(isJob(own));
  EXPECT_FALSE(isJob(record(WorkloadPhase::kPending)));
  WorkloadStatus pending;
  EXPECT_EQ(podsOf("team-1", own, pending).size(), 3U);
  EXPECT_EQ(podsOf("team-1", own, pending)[2]["status"]["phase"], "Pending");
  EXPECT_EQ(jobObject("team-1", own, pending)["spec"]["completions"], 3);

  // Two at a time of four: a pod for each task placed so far, and for the next it may run now.
  own.spec["tasks"] = 4;
  own.spec["parallelism"] = 2;
  EXPECT_EQ(podsOf("team-1", own, pending).size(), 2U);  // No status yet: the first two.
  WorkloadStatus serial;
  serial.tasks.resize(4);
  serial.tasks[0].state = "finished";
  serial.tasks[0].starts = 1;
  serial.tasks[0].exit_code = 0;
  serial.tasks[1].state = "running";
  serial.tasks[1].starts = 1;
  const std::vector<json> shown = podsOf("team-1", own, serial);
  ASSERT_EQ(shown.size(), 3U);
  EXPECT_EQ(shown[2]["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"], "2");
  EXPECT_EQ(shown[2]["status"]["phase"], "Pending");
  EXPECT_EQ(jobObject("team-1", own, serial)["spec"]["parallelism"], 2);
  EXPECT_EQ(jobObject("team-1", own, serial)["status"]["active"], 2);

  // A pod its node could not start (an image it could not pull), while the Job waits for its
  // next attempt: failed with the runtime's StartError, never Completed.
  serial.phase = WorkloadPhase::kPending;
  serial.reason = "restarting: attempt 2 starts at 2026-12-04T10:01:15Z";
  serial.attempt = 1;
  serial.tasks[1].state = "finished";
  serial.tasks[1].start_failed = true;
  serial.tasks[1].node = "gpu-a";
  const json unstarted = podsOf("team-1", own, serial)[1];
  EXPECT_EQ(unstarted["status"]["phase"], "Failed");
  const json term = unstarted["status"]["containerStatuses"][0]["state"]["terminated"];
  EXPECT_EQ(term["reason"], "StartError") << term;
  EXPECT_EQ(term["exitCode"], 128);
  const json counted = jobObject("team-1", own, serial)["status"];
  EXPECT_EQ(counted["failed"], 1) << counted;
  EXPECT_EQ(counted["succeeded"], 1) << counted;  // Task 0's only.
  EXPECT_EQ(podTable({unstarted}, "7", IncludeObject::kNone, now)["rows"][0]["cells"][2],
            "StartError");
}

// Protobuf wire encoding, for bodies as kubectl's typed clients send them.
std::string varint(uint64_t v) {
  std::string out;
  do {
    out.push_back(static_cast<char>((v & 0x7F) | (v > 0x7F ? 0x80 : 0)));
    v >>= 7;
  } while (v != 0);
  return out;
}
std::string bytesField(uint32_t n, const std::string& b) {
  return varint(n << 3 | 2) + varint(b.size()) + b;
}
std::string entry(uint32_t n, const std::string& k, const std::string& v) {
  return bytesField(n, bytesField(1, k) + bytesField(2, v));
}
std::string k8sBody(const std::string& api_version, const std::string& kind,
                    const std::string& raw) {
  return std::string("k8s\0", 4) + bytesField(1, bytesField(1, api_version) + bytesField(2, kind)) +
         bytesField(2, raw) + bytesField(3, "") + bytesField(4, "");
}

TEST(KubeProtobufTest, ASecretAReviewAndANamespaceReadAsTheirJson) {
  // `kubectl create secret generic hf --from-literal=HF_TOKEN=abc123`, as captured: empty
  // strings sent for unset fields, type "" meaning Opaque.
  const std::string meta =
      bytesField(1, "hf") + bytesField(2, "") + bytesField(3, "default") + entry(11, "app", "llm");
  const std::string secret = bytesField(1, meta) + entry(2, "HF_TOKEN", "abc123") +
                             entry(2, "bin", std::string("\xff\x00", 2)) + bytesField(3, "") +
                             varint(5 << 3) + varint(1);
  auto s = decodeProtobuf(k8sBody("v1", "Secret", secret));
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ((*s)["kind"], "Secret");
  EXPECT_EQ((*s)["metadata"],
            json({{"name", "hf"}, {"namespace", "default"}, {"labels", {{"app", "llm"}}}}));
  EXPECT_EQ((*s)["data"]["HF_TOKEN"], "YWJjMTIz");  // Bytes, base64 as JSON carries them.
  EXPECT_EQ((*s)["data"]["bin"], "/wA=");
  EXPECT_FALSE(s->contains("type"));
  EXPECT_EQ((*s)["immutable"], true);

  // `kubectl auth can-i create pods`.
  const std::string attrs = bytesField(1, "default") + bytesField(2, "create") + bytesField(3, "") +
                            bytesField(5, "pods");
  auto review = decodeProtobuf(k8sBody("authorization.k8s.io/v1", "SelfSubjectAccessReview",
                                       bytesField(1, "") + bytesField(2, bytesField(1, attrs))));
  ASSERT_TRUE(review.isOk()) << review.status().message();
  EXPECT_EQ((*review)["spec"]["resourceAttributes"],
            json({{"namespace", "default"}, {"verb", "create"}, {"resource", "pods"}}));

  auto ns = decodeProtobuf(k8sBody("v1", "Namespace", bytesField(1, bytesField(1, "team-a"))));
  ASSERT_TRUE(ns.isOk());
  EXPECT_EQ((*ns)["metadata"]["name"], "team-a");
  auto cm = decodeProtobuf(
      k8sBody("v1", "ConfigMap", bytesField(1, bytesField(1, "cfg")) + entry(2, "LR", "0.1")));
  ASSERT_TRUE(cm.isOk());
  EXPECT_EQ((*cm)["data"]["LR"], "0.1");

  // Bad bodies: each an error that says what, never a crash.
  auto error = [](const std::string& body) {
    auto r = decodeProtobuf(body);
    return r.isOk() ? std::string("decoded") : r.status().message();
  };
  EXPECT_TRUE(error("{\"kind\": \"Secret\"}").find("magic") != std::string::npos);
  EXPECT_TRUE(error(k8sBody("apps/v1", "Deployment", "")).find("only as JSON") != std::string::npos)
      << error(k8sBody("apps/v1", "Deployment", ""));
  std::string cut = k8sBody("v1", "Secret", secret);
  cut.resize(cut.size() - 12);  // The raw message cut short.
  EXPECT_TRUE(error(cut).find("cut short") != std::string::npos) << error(cut);
  EXPECT_TRUE(error(k8sBody("v1", "Secret", bytesField(1, bytesField(1, "\xc3")))).find("UTF-8") !=
              std::string::npos);
  EXPECT_TRUE(error(std::string("k8s\0", 4) + varint(1 << 3 | 3)).find("wire type") !=
              std::string::npos);
  EXPECT_TRUE(error(std::string("k8s\0", 4) + varint(0)).find("without a number") !=
              std::string::npos);
  // A length far beyond the body.
  EXPECT_TRUE(
      error(std::string("k8s\0", 4) + varint(2 << 3 | 2) + varint(1u << 30)).find("cut short") !=
      std::string::npos);
}

// `kubectl create job` sends its Job in protobuf, as its typed client does: read to the JSON a
// JSON client would have sent (the wire's empty strings and false bools unset, a pointer's
// explicit 0 kept), then read as any Job is. A set field the tables do not read is refused,
// naming it: a privileged securityContext is never dropped unseen.
TEST(KubeProtobufTest, AJobAndAPodReadAsTheirJson) {
  auto num = [](uint32_t n, uint64_t v) { return varint(n << 3) + varint(v); };
  const std::string quantity = bytesField(1, "1");  // resource.Quantity {string: "1"}.
  const std::string limits =
      bytesField(1, bytesField(1, "nvidia.com/gpu") + bytesField(2, quantity));
  const std::string container = bytesField(1, "hi") + bytesField(2, "busybox") +
                                bytesField(3, "echo") + bytesField(3, "") + bytesField(4, "hi") +
                                bytesField(5, "") + bytesField(8, limits) + bytesField(14, "") +
                                num(16, 0);
  const std::string env = bytesField(1, "LR") + bytesField(2, "0.1");
  const std::string volume =
      bytesField(1, "scratch") + bytesField(2, bytesField(2, ""));  // emptyDir: {}.
  const std::string pod_spec = bytesField(1, volume) +
                               bytesField(2, container + bytesField(7, env)) +
                               bytesField(3, "Never") + bytesField(6, "") + num(11, 0) +
                               bytesField(14, "") + bytesField(19, "");
  const std::string template_spec = bytesField(1, entry(11, "app", "hi")) + bytesField(2, pod_spec);
  const std::string job_spec = num(1, 2) + num(2, 2) + num(7, 0) + bytesField(6, template_spec) +
                               bytesField(9, "Indexed") + num(10, 0);
  const std::string meta = bytesField(1, "hi") + bytesField(3, "") + bytesField(8, "");
  auto job = decodeProtobuf(k8sBody(
      "batch/v1", "Job", bytesField(1, meta) + bytesField(2, job_spec) + bytesField(3, "")));
  ASSERT_TRUE(job.isOk()) << job.status().message();
  EXPECT_EQ((*job)["metadata"], json({{"name", "hi"}}));
  const json& spec = (*job)["spec"];
  EXPECT_EQ(spec["parallelism"], 2);
  EXPECT_EQ(spec["backoffLimit"], 0) << "an explicit 0 is kept";
  EXPECT_EQ(spec["completionMode"], "Indexed");
  EXPECT_FALSE(spec.contains("suspend"));
  const json& pod = spec["template"]["spec"];
  EXPECT_EQ(spec["template"]["metadata"]["labels"]["app"], "hi");
  EXPECT_EQ(pod["restartPolicy"], "Never");
  EXPECT_FALSE(pod.contains("hostNetwork")) << pod;
  EXPECT_FALSE(pod.contains("dnsPolicy")) << pod;
  EXPECT_EQ(pod["volumes"], json::parse(R"([{"name": "scratch", "emptyDir": {}}])"));
  EXPECT_EQ(pod["containers"],
            json::parse(R"([{"name": "hi", "image": "busybox", "command": ["echo", ""],
                             "args": ["hi"], "resources": {"limits": {"nvidia.com/gpu": "1"}},
                             "env": [{"name": "LR", "value": "0.1"}]}])"));
  // Read as a Job: one GPU, the explicit backoffLimit 0 as no retry.
  auto w = workloadFromJob(*job, "default", false);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  EXPECT_EQ(w->spec["restart"]["attempts"], 0);
  EXPECT_EQ(w->spec["gpu"]["count"], 1);

  // A Pod: the same spec.
  auto p = decodeProtobuf(k8sBody("v1", "Pod", bytesField(1, meta) + bytesField(2, pod_spec)));
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_EQ((*p)["spec"]["containers"][0]["image"], "busybox");

  auto error = [](const std::string& body) {
    auto r = decodeProtobuf(body);
    return r.isOk() ? std::string("decoded") : r.status().message();
  };
  // securityContext (Container 15) with privileged: true: refused, naming where.
  const std::string privileged = bytesField(15, num(2, 1));
  const std::string bad_spec = bytesField(2, container + privileged);
  EXPECT_EQ(error(k8sBody("v1", "Pod", bytesField(1, meta) + bytesField(2, bad_spec))),
            "protobuf body: spec.containers[0]: field 15 of Container is not read from protobuf "
            "here; send the object as JSON (kubectl create -f with its YAML)");
  // podFailurePolicy (JobSpec 11), set: refused too.
  EXPECT_NE(error(k8sBody("batch/v1", "Job", bytesField(2, bytesField(11, bytesField(1, "x"))))),
            "decoded");
  // A string where an int is: the wire type is named.
  EXPECT_NE(error(k8sBody("batch/v1", "Job", bytesField(2, bytesField(7, "6"))))
                .find("spec.backoffLimit: wire type 2"),
            std::string::npos);
}

// A Job body cut, grown or with bytes changed anywhere (a client's bug, an attacker) decodes or
// is refused with a "protobuf body" error; it never throws, and what decodes reads as a Job or is
// refused as one.
TEST(KubeProtobufTest, MangledJobBodiesAreDecodedOrRefusedNeverCrash) {
  const std::string limits =
      bytesField(1, bytesField(1, "nvidia.com/gpu") + bytesField(2, bytesField(1, "1")));
  const std::string container = bytesField(1, "main") + bytesField(2, "busybox") +
                                bytesField(3, "sh") + bytesField(3, "true") + bytesField(8, limits);
  const std::string pod = bytesField(1, bytesField(1, "v") + bytesField(2, bytesField(2, ""))) +
                          bytesField(2, container + bytesField(7, bytesField(1, "A"))) +
                          bytesField(3, "Never");
  const std::string spec = varint(1 << 3) + varint(1) + varint(7 << 3) + varint(0) +
                           bytesField(6, bytesField(1, entry(11, "app", "x")) + bytesField(2, pod));
  const std::string job = bytesField(1, bytesField(1, "j")) + bytesField(2, spec);
  std::mt19937 rng(42);
  int decoded = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string raw = job;
    for (int edits = 1 + static_cast<int>(rng() % 4); edits > 0 && !raw.empty(); --edits) {
      const size_t at = rng() % raw.size();
      switch (rng() % 3) {
        case 0:
          raw[at] = static_cast<char>(rng());
          break;
        case 1:
          raw.erase(at, 1);
          break;
        default:
          raw.insert(at, 1, static_cast<char>(rng()));
      }
    }
    core::Result<json> r = core::internalError("not run");
    ASSERT_NO_THROW(r = decodeProtobuf(k8sBody("batch/v1", "Job", raw))) << i;
    if (!r.isOk()) {
      EXPECT_TRUE(r.status().message().starts_with("protobuf body: ")) << r.status().message();
      continue;
    }
    ++decoded;
    ASSERT_NO_THROW((void)workloadFromJob(*r, "default", false)) << r->dump();
  }
  EXPECT_GT(decoded, 0);  // Some edits leave a Job (a changed letter of a name, say).
}

TEST(KubeObjectsTest, SecretsAndConfigMapsAreKvDataAndBackAndTheirErrorsNameTheField) {
  const core::WallTime now = *core::parseRfc3339("2026-12-04T10:00:00Z");
  const json secret = {{"apiVersion", "v1"},
                       {"kind", "Secret"},
                       {"metadata", {{"name", "hf"}, {"labels", {{"app", "llm"}}}}},
                       {"data", {{"HF_TOKEN", "YWJjMTIz"}}},
                       {"stringData", {{"user", "me"}}},
                       {"type", ""}};
  auto kv = kvFromObject(secret, "Secret", "default", true, now);
  ASSERT_TRUE(kv.isOk()) << kv.status().message();
  EXPECT_EQ(kv->name, "hf");
  EXPECT_EQ(kv->data["HF_TOKEN"], "abc123");  // Kept as text: Tessera's own readers see it so.
  EXPECT_EQ(kv->data["user"], "me");
  EXPECT_EQ(kv->data[std::string(kKubeObjectKey)]["type"], "Opaque");  // "" is Opaque.
  const json back = objectFromKv("Secret", "t", "default", "hf", kv->data, 3);
  EXPECT_EQ(back["data"], json({{"HF_TOKEN", "YWJjMTIz"}, {"user", "bWU="}}));
  EXPECT_EQ(back["metadata"]["labels"]["app"], "llm");
  EXPECT_EQ(back["metadata"]["resourceVersion"], "3");
  EXPECT_EQ(back["metadata"]["creationTimestamp"], "2026-12-04T10:00:00Z");
  EXPECT_FALSE(back.contains("stringData"));
  const json t = kvTable("Secret", {back}, "3", IncludeObject::kMetadata, now + seconds(5));
  EXPECT_EQ(t["rows"][0]["cells"], json({"hf", "Opaque", 2, "5s"}));

  auto refused = [&](json body, std::string_view kind = "Secret") {
    auto r = kvFromObject(body, kind, "default", true, now);
    return r.isOk() ? std::string("accepted") : r.status().message();
  };
  json bad = secret;
  bad["data"]["k"] = "not base64!";
  EXPECT_TRUE(refused(bad).starts_with("data[k]: Invalid value: not base64")) << refused(bad);
  bad = secret;
  bad["data"]["k"] = "/wA=";  // 0xff 0x00: not text.
  EXPECT_TRUE(refused(bad).starts_with("data[k]: Forbidden: Tessera keeps")) << refused(bad);
  bad = secret;
  bad["data"]["a/b"] = "YQ==";
  EXPECT_TRUE(refused(bad).starts_with("data[a/b]: Invalid value")) << refused(bad);
  bad = secret;
  bad["type"] = "kubernetes.io/tls";
  EXPECT_EQ(refused(bad), "data[tls.crt]: Required value: a kubernetes.io/tls Secret needs it");
  bad = secret;
  bad["extra"] = 1;
  EXPECT_EQ(refused(bad), "extra: unknown field");
  const json cm = {
      {"kind", "ConfigMap"}, {"metadata", {{"name", "cfg"}}}, {"binaryData", {{"x", "YQ=="}}}};
  EXPECT_TRUE(refused(cm, "ConfigMap").starts_with("binaryData: Forbidden"))
      << refused(cm, "ConfigMap");
  json ok_cm = cm;
  ok_cm.erase("binaryData");
  ok_cm["data"] = {{"LR", "0.1"}};
  auto c = kvFromObject(ok_cm, "ConfigMap", "default", true, now);
  ASSERT_TRUE(c.isOk());
  EXPECT_EQ(objectFromKv("ConfigMap", "t", "default", "cfg", c->data, 1)["data"]["LR"], "0.1");
  EXPECT_EQ(kvPathOf("secrets", "default", "hf"), "kube/default/secrets/hf");
}

TEST(KubeAccessTest, AnAccessReviewAsksTheSameMappingAsTheRequestWould) {
  std::vector<std::pair<std::string, Capability>> asked;
  auto only_pods = [&](const std::string& path, Capability c) {
    asked.emplace_back(path, c);
    return path.starts_with("workloads");
  };
  json review = {{"spec",
                  {{"resourceAttributes",
                    {{"namespace", "default"}, {"verb", "create"}, {"resource", "pods"}}}}}};
  json out = accessReview(review, only_pods);
  EXPECT_EQ(out["status"]["allowed"], true);
  ASSERT_EQ(asked.size(), 1U);
  EXPECT_EQ(asked[0].first, "workloads");
  EXPECT_EQ(asked[0].second, Capability::kCreate);
  review["spec"]["resourceAttributes"] = {
      {"namespace", "default"}, {"verb", "get"}, {"resource", "secrets"}, {"name", "hf"}};
  out = accessReview(review, only_pods);
  EXPECT_EQ(out["status"]["allowed"], false);
  EXPECT_EQ(asked.back().first, "secrets/kv/data/kube/default/secrets/hf");
  review["spec"]["resourceAttributes"] = {
      {"verb", "create"}, {"resource", "deployments"}, {"group", "apps"}};
  out = accessReview(review, only_pods);
  EXPECT_EQ(out["status"]["allowed"], false);
  EXPECT_EQ(out["status"]["reason"],
            "Tessera does not serve create on \"deployments\" in API group \"apps\"");
  review["spec"] = {{"nonResourceAttributes", {{"path", "/version"}, {"verb", "get"}}}};
  EXPECT_EQ(accessReview(review, only_pods)["status"]["allowed"], true);
  EXPECT_EQ(accessReview(json::array(), only_pods)["status"]["allowed"], false);
}

// Found by fuzz/kube_fuzz.cc: a field of an unexpected JSON type is an error naming it, never
// an exception out of the decoder.
TEST(KubeObjectsTest, AMigSliceIsAskedForAsTheDevicePluginNamesIt) {
  json p = {{"metadata", {{"name", "p"}}},
            {"spec",
             {{"containers",
               {{{"name", "main"},
                 {"command", {"true"}},
                 {"resources", {{"limits", {{"nvidia.com/mig-3g.40gb", 1}}}}}}}}}}};
  auto pod = workloadFromPod(p, "default", true);
  ASSERT_TRUE(pod.isOk()) << pod.status().message();
  EXPECT_EQ(pod->spec["gpu"], json({{"mig", "3g.40gb"}}));
  p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] = 2;
  EXPECT_TRUE(workloadFromPod(p, "default", true)
                  .status()
                  .message()
                  .starts_with("spec.containers[0].resources.limits[nvidia.com/mig-3g.40gb]: "
                               "Invalid value"));
  p["spec"]["containers"][0]["resources"]["limits"] = {{"nvidia.com/gpu", 1},
                                                       {"nvidia.com/mig-1g.10gb", 1}};
  EXPECT_TRUE(workloadFromPod(p, "default", true).status().message().find("Forbidden: one kind") !=
              std::string::npos);
}

TEST(KubeObjectsTest, FieldsOfTheWrongTypeAreErrorsNamingThem) {
  auto pod = [](const json& body) {
    auto r = workloadFromPod(body, "default", true);
    return r.isOk() ? std::string("accepted") : r.status().message();
  };
  EXPECT_EQ(pod(json::parse(R"({"kind": {"name": "5.1"}})")),
            "kind: expected apiVersion v1, kind Pod");
  json p = {{"metadata", {{"name", "p"}}},
            {"spec", {{"containers", {{{"name", "main"}, {"command", {"true"}}}}}}}};
  ASSERT_EQ(pod(p), "accepted");
  json bad = p;
  bad["spec"]["restartPolicy"] = 5;
  EXPECT_EQ(pod(bad), "spec.restartPolicy: expected a string");
  bad = p;
  bad["spec"]["containers"][0]["name"] = 7;
  EXPECT_EQ(pod(bad), "spec.containers[0].name: Required value");
  bad = p;
  bad["spec"]["containers"][0]["resources"] = "big";
  EXPECT_EQ(pod(bad), "spec.containers[0].resources: expected an object");
  bad = p;
  bad["spec"]["containers"][0]["securityContext"] = {{"privileged", "yes"}};
  EXPECT_EQ(pod(bad), "accepted");  // Only true is privileged.
  bad = p;
  bad["spec"]["containers"][0]["env"] = {{{"name", "N"}, {"valueFrom", {{"fieldRef", 3}}}}};
  EXPECT_TRUE(
      pod(bad).starts_with("spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: "
                           "Unsupported value"))
      << pod(bad);
  EXPECT_EQ(textOr(json::parse(R"({"a": 1})"), "a", "x"), "x");
  EXPECT_EQ(textOr(json::array(), "a"), "");
  auto secret = kvFromObject({{"kind", "Secret"}, {"metadata", {{"name", "s"}}}, {"type", 5}},
                             "Secret", "default", true, {});
  ASSERT_FALSE(secret.isOk());
  EXPECT_EQ(secret.status().message(), "type: expected a string");
}

TEST(KubeObjectsTest, EventsSayWhatHappenedInKubernetesReasonsAndTesserasWords) {
  WorkloadRecord r = record(WorkloadPhase::kPending);
  r.events = {{"2026-12-04T10:00:00Z", "submitted", ""},
              {"2026-12-04T10:00:01Z", "running", ""},
              {"2026-12-04T10:00:05Z", "evicted",
               "task 0 on gpu-a evicted: reclaimed for workload team-2/big (queue team-2 below "
               "its share)"},
              {"2026-12-04T10:00:06Z", "evicted", "task 0 on gpu-a evicted: node gpu-a drained"}};
  WorkloadStatus waiting;
  waiting.reason = "waiting for 1 GPU: queue team-1/default is at its limit";
  waiting.tasks.resize(1);
  const std::vector<json> ev = eventsOf("team-1", r, waiting);
  std::vector<std::string> reasons;
  for (const json& e : ev) {
    reasons.push_back(e["reason"]);
    EXPECT_EQ(e["involvedObject"]["kind"], "Pod");
    EXPECT_EQ(e["involvedObject"]["uid"], podObject("team-1", r, waiting)["metadata"]["uid"]);
  }
  // Running: no node now (it waits again), so no Scheduled; the reclaim is Preempted, the
  // drain Evicted, both with Tessera's words; and why it waits now.
  EXPECT_EQ(reasons, std::vector<std::string>({"Preempted", "Evicted", "FailedScheduling"}));
  EXPECT_EQ(ev[0]["type"], "Warning");
  EXPECT_EQ(ev[0]["message"], r.events[2].reason);
  EXPECT_EQ(ev.back()["message"], waiting.reason);
  EXPECT_NE(ev[0]["metadata"]["name"], ev[1]["metadata"]["name"]);
  // The fields `kubectl describe pod` selects them by.
  auto f = PodFilter::parse("default", "",
                            "involvedObject.name=train,involvedObject.namespace=default,"
                            "involvedObject.uid=" +
                                ev[0]["involvedObject"]["uid"].get<std::string>(),
                            eventFields());
  ASSERT_TRUE(f.isOk()) << f.status().message();
  EXPECT_TRUE(f->matches(ev[0]));
  EXPECT_FALSE(
      PodFilter::parse("", "", "involvedObject.name=other", eventFields())->matches(ev[0]));
  const json t =
      eventTable(ev, "1", IncludeObject::kMetadata, *core::parseRfc3339("2026-12-04T10:01:06Z"));
  EXPECT_EQ(t["rows"][1]["cells"][0], "60s");
  EXPECT_EQ(t["rows"][1]["cells"][3], "pod/train");

  // A Job: its pods' creation, its completion, about the Job.
  auto sub = workloadFromJob(indexedJob(), "default", true);
  ASSERT_TRUE(sub.isOk());
  WorkloadRecord j = record(WorkloadPhase::kSucceeded);
  j.name = "ddp";
  j.spec = sub->spec;
  j.kube = sub->kube;
  j.events = {{"2026-12-04T10:00:00Z", "submitted", ""}, {"2026-12-04T10:00:09Z", "succeeded", ""}};
  WorkloadStatus done;
  done.phase = WorkloadPhase::kSucceeded;
  const std::vector<json> jev = eventsOf("team-1", j, done);
  ASSERT_EQ(jev.size(), 3U);
  EXPECT_EQ(jev[0]["reason"], "SuccessfulCreate");
  EXPECT_EQ(jev[0]["message"], "Created pod: " + taskPodName("team-1", j, 0));
  EXPECT_EQ(jev[2]["reason"], "Completed");
  EXPECT_EQ(jev[2]["involvedObject"]["kind"], "Job");

  // Placed, its image still coming (or its pull backing off): Scheduled, not yet Started; once
  // its container runs, Started. One its node could not start never was.
  WorkloadRecord placed = record(WorkloadPhase::kRunning);
  placed.events = {{"2026-12-04T10:00:00Z", "submitted", ""},
                   {"2026-12-04T10:00:01Z", "running", ""}};
  WorkloadStatus starting;
  starting.phase = WorkloadPhase::kRunning;
  starting.tasks.resize(1);
  starting.tasks[0].state = "starting";
  starting.tasks[0].node = "gpu-a";
  starting.tasks[0].progress = "ImagePullBackOff (retry 1 of 5 in 10 s): registry down";
  auto reasonsOf = [](const std::vector<json>& events) {
    std::vector<std::string> out;
    for (const json& e : events) {
      out.push_back(e["reason"]);
    }
    return out;
  };
  EXPECT_EQ(reasonsOf(eventsOf("team-1", placed, starting)),
            std::vector<std::string>({"Scheduled"}));
  WorkloadStatus running = starting;
  running.tasks[0].state = "running";
  running.tasks[0].progress.clear();
  EXPECT_EQ(reasonsOf(eventsOf("team-1", placed, running)),
            std::vector<std::string>({"Scheduled", "Started"}));
  WorkloadStatus unstarted = starting;
  unstarted.phase = WorkloadPhase::kFailed;
  unstarted.reason = "task 0 on node gpu-a could not start: no such file";
  unstarted.tasks[0].state = "finished";
  unstarted.tasks[0].start_failed = true;
  placed.events.push_back({"2026-12-04T10:00:02Z", "failed", unstarted.reason});
  EXPECT_EQ(reasonsOf(eventsOf("team-1", placed, unstarted)),
            std::vector<std::string>({"Scheduled", "Failed"}));
}

TEST(KubeObjectsTest, ANodeShowsItsGpusAsTheDevicePluginWould) {
  NodeState s;
  s.name = "gpu-a";
  s.state = "ready";
  s.node.cpu = core::MilliCpu(128000);
  s.node.memory = core::MiB(2048 * 1024);
  s.node.gpus.resize(8);
  s.node.labels = {{"pool", "train"}};
  json n = nodeObject(s, "NVIDIA-H100-80GB");
  EXPECT_EQ(n["status"]["capacity"]["nvidia.com/gpu"], "8");
  EXPECT_EQ(n["status"]["capacity"]["cpu"], "128000m");
  EXPECT_EQ(n["metadata"]["labels"]["pool"], "train");
  EXPECT_EQ(n["metadata"]["labels"]["nvidia.com/gpu.product"], "NVIDIA-H100-80GB");
  EXPECT_EQ(n["status"]["conditions"][0]["status"], "True");
  EXPECT_FALSE(n["metadata"].contains("creationTimestamp"));  // Not known: not made up.
  s.gpus.resize(8);
  s.gpus[6].mig = true;
  s.gpus[7].mig = true;
  s.state = "lost";
  s.cordoned = true;
  n = nodeObject(s, "NVIDIA-H100-80GB");
  EXPECT_EQ(n["status"]["capacity"]["nvidia.com/gpu"], "6");  // Two hold MIG slices.
  EXPECT_EQ(n["metadata"]["labels"]["tessera.io/mig-gpus"], "2");
  EXPECT_EQ(n["metadata"]["labels"]["nvidia.com/gpu.count"], "8");
  const json t = nodeTable({n}, "1", IncludeObject::kNone, {});
  EXPECT_EQ(t["rows"][0]["cells"][1], "NotReady,SchedulingDisabled");
  EXPECT_EQ(t["rows"][0]["cells"][3], "<unknown>");
}

TEST(KubePatchTest, EachPatchTypeAsKubectlSendsIt) {
  const json pod = json::parse(R"({"metadata": {"name": "p", "labels": {"app": "llm", "x": "1"}},
      "spec": {"containers": [{"name": "main", "image": "a", "env": [{"name": "A", "value": "1"}]},
                              {"name": "side", "image": "s"}]}})");
  EXPECT_EQ(patchTypeOf("application/strategic-merge-patch+json"), PatchType::kStrategic);
  EXPECT_EQ(patchTypeOf("application/apply-patch+yaml"), PatchType::kApply);
  EXPECT_EQ(patchTypeOf("application/merge-patch+json; charset=utf-8"), PatchType::kMerge);
  EXPECT_FALSE(patchTypeOf("application/json"));

  auto merged = applyPatch(pod, {{"metadata", {{"labels", {{"x", nullptr}, {"y", "2"}}}}}},
                           PatchType::kMerge);
  ASSERT_TRUE(merged.isOk());
  EXPECT_EQ((*merged)["metadata"]["labels"], json({{"app", "llm"}, {"y", "2"}}));

  auto patched = applyPatch(
      pod, json::parse(R"([{"op": "replace", "path": "/metadata/labels/app", "value": "z"}])"),
      PatchType::kJson);
  ASSERT_TRUE(patched.isOk());
  EXPECT_EQ((*patched)["metadata"]["labels"]["app"], "z");
  auto failed = applyPatch(
      pod, json::parse(R"([{"op": "test", "path": "/metadata/labels/app", "value": "no"}])"),
      PatchType::kJson);
  ASSERT_FALSE(failed.isOk());
  EXPECT_TRUE(failed.status().message().starts_with("the JSON patch cannot be applied"));

  // kubectl apply's patch: containers merged by name, one deleted, order hints ignored.
  auto smp = applyPatch(pod, json::parse(R"({
      "$setElementOrder/containers": [{"name": "main"}],
      "spec": {"containers": [{"name": "main", "image": "b"},
                              {"name": "side", "$patch": "delete"}]},
      "metadata": {"labels": {"x": null}}})"),
                        PatchType::kStrategic);
  ASSERT_TRUE(smp.isOk()) << smp.status().message();
  ASSERT_EQ((*smp)["spec"]["containers"].size(), 1U);
  EXPECT_EQ((*smp)["spec"]["containers"][0]["image"], "b");
  EXPECT_EQ((*smp)["spec"]["containers"][0]["env"][0]["value"], "1");  // Kept.
  EXPECT_FALSE((*smp)["metadata"]["labels"].contains("x"));
  EXPECT_FALSE(applyPatch(pod, json::array(), PatchType::kStrategic).isOk());

  const auto paths = fieldPaths(pod);
  EXPECT_TRUE(paths.contains(".metadata.labels.app"));
  EXPECT_TRUE(paths.contains(".spec.containers[name=main].image"));
  EXPECT_FALSE(paths.contains(".metadata.name"));
  EXPECT_EQ(fieldValue(pod, ".spec.containers[name=side].image"), "s");
  EXPECT_TRUE(fieldValue(pod, ".spec.containers[name=nope].image").is_null());
}

TEST(KubePatchTest, ServerSideApplyConflictsWithAnotherManagersFieldsUnlessForced) {
  const json current = {{"apiVersion", "v1"},
                        {"metadata", {{"name", "p"}, {"labels", {{"app", "llm"}, {"t", "1"}}}}}};
  json managed = {{"kubectl-client-side-apply", {".metadata.labels.app", ".metadata.labels.t"}}};
  const json applied = {{"metadata", {{"name", "p"}, {"labels", {{"app", "other"}, {"t", "1"}}}}}};
  json m = managed;
  auto conflict = serverSideApply(current, applied, "kubectl", false, m);
  ASSERT_FALSE(conflict.isOk());
  EXPECT_EQ(conflict.status().message(),
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: "
            ".metadata.labels.app");
  EXPECT_EQ(m, managed);  // Nothing taken.
  auto forced = serverSideApply(current, applied, "kubectl", true, m);
  ASSERT_TRUE(forced.isOk());
  EXPECT_EQ((*forced)["metadata"]["labels"]["app"], "other");
  // The changed field is kubectl's now; the one set to the same value is shared.
  EXPECT_EQ(m["kubectl-client-side-apply"], json({".metadata.labels.t"}));
  EXPECT_EQ(m["kubectl"], json({".metadata.labels.app", ".metadata.labels.t"}));
  // Its own fields again: no conflict.
  json again = {{"metadata", {{"labels", {{"app", "third"}}}}}};
  EXPECT_TRUE(serverSideApply(*forced, again, "kubectl", false, m).isOk());
}

TEST(KubeObjectsTest, DiscoveryAndOpenApiSayWhatIsServedAndNoMore) {
  const json agg = aggregatedDiscovery(true);
  EXPECT_EQ(agg["kind"], "APIGroupDiscoveryList");
  ASSERT_EQ(agg["items"].size(), 1U);
  for (const json& r : agg["items"][0]["versions"][0]["resources"]) {
    EXPECT_TRUE(r.contains("responseKind")) << r;  // client-go drops a resource without one.
    for (const json& s : r.value("subresources", json::array())) {
      EXPECT_TRUE(s.contains("responseKind")) << s;
    }
  }
  const json groups = aggregatedDiscovery(false)["items"];
  ASSERT_EQ(groups.size(), 2U);  // And nothing Tessera does not serve.
  EXPECT_EQ(groups[0]["metadata"]["name"], "authorization.k8s.io");
  EXPECT_EQ(groups[0]["versions"][0]["resources"][0]["resource"], "selfsubjectaccessreviews");
  EXPECT_EQ(groups[1]["metadata"]["name"], "batch");
  EXPECT_EQ(groups[1]["versions"][0]["resources"][0]["resource"], "jobs");
  EXPECT_TRUE(acceptsAggregatedDiscovery(
      "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"));
  EXPECT_FALSE(acceptsAggregatedDiscovery("application/json"));
  ASSERT_TRUE(apiResourceList("", "v1"));
  EXPECT_EQ((*apiResourceList("", "v1"))["resources"][1]["name"], "pods/log");
  EXPECT_EQ((*apiResourceList("", "v1"))["resources"][2]["name"], "pods/status");
  EXPECT_EQ((*apiResourceList("", "v1"))["resources"][2]["verbs"], json({"get"}));
  ASSERT_TRUE(apiResourceList("batch", "v1"));
  EXPECT_EQ((*apiResourceList("batch", "v1"))["resources"][0]["kind"], "Job");
  EXPECT_EQ((*apiResourceList("batch", "v1"))["resources"][1]["name"], "jobs/status");
  EXPECT_FALSE(apiResourceList("apps", "v1"));

  const json index = openApiIndex();
  ASSERT_TRUE(index["paths"].contains("api/v1"));
  const std::string url = index["paths"]["api/v1"]["serverRelativeURL"];
  EXPECT_EQ(url, "/openapi/v3/api/v1?hash=" + openApiHash("api/v1"));  // Relative to the root.
  const auto doc = openApiDocument("api/v1");
  ASSERT_TRUE(doc);
  const json& patch = (*doc)["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
  EXPECT_EQ(patch["x-kubernetes-group-version-kind"],
            json({{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}));
  EXPECT_EQ(patch["parameters"][0]["name"], "fieldValidation");
  EXPECT_FALSE(patch["requestBody"]["content"].contains("application/strategic-merge-patch+json"));
  ASSERT_TRUE(openApiDocument("apis/batch/v1"));
  EXPECT_TRUE((*openApiDocument("apis/batch/v1"))["paths"].contains(
      "/apis/batch/v1/namespaces/{namespace}/jobs/{name}"));
  EXPECT_FALSE(openApiDocument("apis/apps/v1"));
  // No schemas, but the section kubectl explain reads is there: it then says the kind is not in
  // the schema rather than failing in its template ("index of nil pointer").
  EXPECT_EQ((*doc)["components"]["schemas"], json::object());
}

TEST(KubeObjectsTest, ErrorsLeaveAsStatusObjectsAndABadTokenIs401) {
  HttpResponse bad_token{
      .status = 403,
      .body = R"({"errors":["permission denied: missing, invalid, revoked or expired token"]})"};
  asStatus(bad_token);
  EXPECT_EQ(bad_token.status, 401U);
  const json s = json::parse(bad_token.body);
  EXPECT_EQ(s["kind"], "Status");
  EXPECT_EQ(s["reason"], "Unauthorized");
  EXPECT_EQ(s["message"], "Unauthorized");
  HttpResponse boundary{.status = 404, .body = R"({"errors":["not found"]})"};
  asStatus(boundary);
  EXPECT_EQ(json::parse(boundary.body)["message"],
            "the server could not find the requested resource");
  HttpResponse limited{.status = 429, .body = R"({"errors":["slow down"]})"};
  asStatus(limited);
  EXPECT_EQ(json::parse(limited.body)["details"]["retryAfterSeconds"], 1);
  // A Status, or a success, is left as it is.
  HttpResponse already = statusResponse(409, "pods \"x\" already exists", {}, "AlreadyExists");
  const std::string before = already.body;
  asStatus(already);
  EXPECT_EQ(already.body, before);
  HttpResponse ok{.status = 200, .body = "{\"errors\": []}"};
  asStatus(ok);
  EXPECT_EQ(ok.body, "{\"errors\": []}");
  EXPECT_TRUE(queryBool(nullptr, false) == false);
  const std::string t = "True";
  const std::string f = "0";
  const std::string junk = "yes";
  EXPECT_TRUE(queryBool(&t, false));  // The Python client's spelling.
  EXPECT_FALSE(queryBool(&f, true));
  EXPECT_TRUE(queryBool(&junk, true));  // Unreadable: the default.
}

TEST(KubeAccessTest, EachRequestMapsToItsVerbAndTesseraPath) {
  const std::map<std::string, std::string> none;
  KubeTarget t = kubeTarget("k8s/api/v1/namespaces/default/pods/x", "DELETE", none, {});
  EXPECT_EQ(t.verb, "delete");
  EXPECT_EQ(t.resource, "pods");
  EXPECT_EQ(t.ns, "default");
  EXPECT_EQ(t.name, "x");
  auto need = tesseraAccess(t);
  ASSERT_TRUE(need);
  EXPECT_EQ(need->path, "workloads/x");
  EXPECT_EQ(need->capability, Capability::kDelete);
  t = kubeTarget("k8s/api/v1/namespaces/default/pods", "POST", none,
                 {{"metadata", {{"name", "new"}}}});
  EXPECT_EQ(t.verb, "create");
  EXPECT_EQ(tesseraAccess(t)->path, "workloads/new");  // The name from the body.
  EXPECT_EQ(tesseraAccess(t)->capability, Capability::kCreate);
  t = kubeTarget("k8s/api/v1/pods", "GET", {{"watch", "True"}}, {});
  EXPECT_EQ(t.verb, "watch");
  EXPECT_EQ(t.ns, "");
  EXPECT_EQ(tesseraAccess(t)->capability, Capability::kList);
  t = kubeTarget("k8s/api/v1/namespaces/ml/pods/x/log", "GET", none, {});
  EXPECT_EQ(t.subresource, "log");
  EXPECT_EQ(tesseraAccess(t)->path, "workloads/x/logs");
  t = kubeTarget("k8s/api/v1/namespaces/ml", "GET", none, {});
  EXPECT_EQ(t.resource, "namespaces");
  EXPECT_EQ(t.name, "ml");
  EXPECT_EQ(tesseraAccess(t)->path, "workloads");
  // A namespace created, changed or deleted is its key in the tenant's KV.
  t = kubeTarget("k8s/api/v1/namespaces", "POST", none, {{"metadata", {{"name", "research"}}}});
  EXPECT_EQ(tesseraAccess(t)->path, "secrets/kv/data/kube/research/namespace");
  EXPECT_EQ(tesseraAccess(t)->capability, Capability::kCreate);
  t = kubeTarget("k8s/api/v1/namespaces/research", "DELETE", none, {});
  EXPECT_EQ(tesseraAccess(t)->path, "secrets/kv/data/kube/research/namespace");
  EXPECT_EQ(tesseraAccess(t)->capability, Capability::kDelete);
  EXPECT_FALSE(tesseraAccess(kubeTarget("k8s/api/v1", "GET", none, {})));  // Discovery.
  EXPECT_FALSE(tesseraAccess(kubeTarget("k8s/version", "GET", none, {})));
  t = kubeTarget("k8s/apis/batch/v1/namespaces/default/jobs/j", "PUT", none, {});
  EXPECT_EQ(t.group, "batch");
  EXPECT_EQ(t.verb, "update");
  EXPECT_EQ(tesseraAccess(t)->path, "workloads/j");  // A Job is a workload.
  EXPECT_EQ(tesseraAccess(t)->capability, Capability::kUpdate);
  t = kubeTarget("k8s/apis/apps/v1/namespaces/default/deployments/d", "GET", none, {});
  EXPECT_FALSE(tesseraAccess(t));  // Not served: the handler's 404.

  EXPECT_EQ(forbiddenMessage(kubeTarget("k8s/api/v1/namespaces/default/pods", "POST", none,
                                        {{"metadata", {{"name", "p"}}}}),
                             "bob"),
            "pods \"p\" is forbidden: User \"bob\" cannot create resource \"pods\" in API group "
            "\"\" in the namespace \"default\"");
  EXPECT_EQ(
      forbiddenMessage(kubeTarget("k8s/api/v1/namespaces/ml/pods/p/log", "GET", none, {}), "bob"),
      "pods \"p\" is forbidden: User \"bob\" cannot get resource \"pods/log\" in API group "
      "\"\" in the namespace \"ml\"");
}

}  // namespace
}  // namespace tessera::server::kube

namespace tessera::server::kube {
namespace {

TEST(KubeSelectorTest, LabelSelectorsInEveryFormKubectlSends) {
  const json labels = {{"app", "llm"}, {"kai.scheduler/queue", "team-a"}, {"tier", "gpu"}};
  auto matches = [&](const std::string& text) {
    auto s = parseLabelSelector(text);
    EXPECT_TRUE(s.isOk()) << text << ": " << s.status().toString();
    return s.isOk() && matchesLabels(*s, labels);
  };
  EXPECT_TRUE(matches(""));
  EXPECT_TRUE(matches("app=llm"));
  EXPECT_TRUE(matches("app==llm,tier"));
  EXPECT_FALSE(matches("app!=llm"));
  EXPECT_TRUE(matches("!missing"));
  EXPECT_FALSE(matches("!app"));
  // The spec's example, as kubectl decodes it from the URL.
  EXPECT_TRUE(matches("app in (llm,x),kai.scheduler/queue=team-a"));
  EXPECT_TRUE(matches("app in ( x , llm )"));
  EXPECT_FALSE(matches("app in (x,y)"));
  EXPECT_TRUE(matches("app notin (x,y)"));
  EXPECT_FALSE(matches("app notin (llm)"));
  EXPECT_TRUE(matches("missing notin (a)"));  // Absent: notin holds, as upstream.
  EXPECT_FALSE(matches("missing in (a)"));
  for (const char* bad : {"app in (llm", "app within (a)", ",", "a=b,", "=x", "app=(x)"}) {
    EXPECT_FALSE(parseLabelSelector(bad).isOk()) << bad;
  }
  auto fields = parseFieldSelector("metadata.name=x,status.phase!=Running", podFields());
  ASSERT_TRUE(fields.isOk());
  EXPECT_EQ(fields->size(), 2U);
  EXPECT_FALSE((*fields)[1].equal);
  EXPECT_EQ(parseFieldSelector("spec.foo=bar", podFields()).status().message(),
            "field label not supported: spec.foo");
}

}  // namespace
}  // namespace tessera::server::kube
