#include "protocol/node_protocol.h"

#include <gtest/gtest.h>

namespace tessera::protocol {
namespace {

using nlohmann::json;

TEST(NodeProtocolTest, ATaskRoundTripsThroughItsJson) {
  AssignedTask t;
  t.id = "team-1.train.0";
  t.generation = (3U << 16) | 2U;
  t.tenant = "team-1";
  t.workload = "train";
  t.command = {"python", "train.py"};
  t.env = {{"LR", "0.1"}, {"EMPTY", ""}};
  t.gpus = {2, 5};
  t.milli_per_gpu = 500;
  t.isolation = "process";
  t.gpu_memory_mib = 20480;
  t.milli_limit_per_gpu = 800;
  t.mig_profile = 3;
  t.mig_start = 4;
  t.cpu_milli = 8000;
  t.memory_mib = 65536;
  t.duration_s = 600;
  t.grace_ms = 45000;
  t.credentials = {{"identity-token", "eyJ..."}};
  t.task_count = 3;
  t.hosts = {"10.0.0.1", "", "gpu-b.example"};
  t.ports = {{"master", 20001}, {"http", 20002}};
  t.master_port = 20001;
  auto back = assignedTaskFromJson(toJson(t), "tasks[0]", "heartbeat answer");
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(toJson(*back), toJson(t));
  EXPECT_EQ(back->generation, t.generation);
  EXPECT_EQ(back->env.at("EMPTY"), "");
  EXPECT_EQ(back->hosts, t.hosts);
  EXPECT_EQ(back->ports, t.ports);
  // What a task leaves out: a whole GPU, hardware isolation, the agent's own grace period.
  auto minimal = assignedTaskFromJson(
      {{"task", "a.b.0"}, {"generation", 1}, {"tenant", "a"}, {"workload", "b"}, {"index", 0}}, "",
      "t");
  ASSERT_TRUE(minimal.isOk()) << minimal.status().message();
  EXPECT_EQ(minimal->milli_per_gpu, 1000);
  EXPECT_EQ(minimal->milli_limit_per_gpu, 0);
  EXPECT_FALSE(toJson(*minimal).contains("milli_limit_per_gpu"));
  EXPECT_EQ(back->milli_limit_per_gpu, 800);
  EXPECT_EQ(minimal->isolation, "hardware");
  EXPECT_EQ(minimal->grace_ms, -1);
  EXPECT_EQ(minimal->mig_profile, -1);
  EXPECT_EQ(minimal->mig_start, -1);
  EXPECT_TRUE(minimal->credentials_error.empty());
  EXPECT_EQ(minimal->task_count, 1);
  EXPECT_TRUE(minimal->hosts.empty());
  EXPECT_TRUE(minimal->ports.empty());
  EXPECT_EQ(minimal->master_port, 0);
  EXPECT_FALSE(toJson(*minimal).contains("hosts"));  // Older agents see nothing new.
}

// Volumes (docs/agent.md "Volumes"): files and tmpfs folders travel; paths that would leave the
// volume, or land on what the runtime mounts, never reach an agent.
TEST(NodeProtocolTest, VolumesRoundTripAndPathsThatWouldEscapeAreRefused) {
  AssignedTask t;
  t.id = "a.b.0";
  t.tenant = "a";
  t.workload = "b";
  t.image = "oci:/images/x:latest";
  t.volumes = {{.path = "/etc/db", .files = {{"password", "hunter2"}, {"conf/model.yaml", "lr"}}},
               {.path = "/dev/shm", .files = {}, .tmpfs = true, .size_mib = 256}};
  const json j = toJson(t);
  // A volume's files are under a key the audit log always hides.
  EXPECT_EQ(j["volumes"][0]["credentials"]["password"], "hunter2");
  auto back = assignedTaskFromJson(j, "tasks[0]", "heartbeat answer");
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back->volumes, t.volumes);
  for (const char* bad : {"../x", "a/../x", "..data", "a/..b", "/abs", "a//b", "", "a b"}) {
    EXPECT_FALSE(isVolumeFilePath(bad)) << bad;
    json b = j;
    b["volumes"][0]["credentials"] = {{bad, "x"}};
    auto r = assignedTaskFromJson(b, "tasks[0]", "heartbeat answer");
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_NE(r.status().message().find("tasks[0].volumes[0].credentials"), std::string::npos)
        << r.status().message();
  }
  for (const char* good : {"password", "conf/model.yaml", ".hidden", "a-b_c.d"}) {
    EXPECT_TRUE(isVolumeFilePath(good)) << good;
  }
  for (const char* bad : {"relative", "/", "/etc/../x", "/etc/./x", "/etc//x", "/proc",
                          "/proc/self", "/sys/fs", "/dev", "/dev/nvidia0", "/devices/x/"}) {
    EXPECT_FALSE(isMountPath(bad)) << bad;
    json b = j;
    b["volumes"][1]["path"] = bad;
    EXPECT_FALSE(assignedTaskFromJson(b, "", "t").isOk()) << bad;
  }
  for (const char* good : {"/etc/db", "/dev/shm", "/devices", "/data/x.y", "/procfs"}) {
    EXPECT_TRUE(isMountPath(good)) << good;
  }
  json both = j;
  both["volumes"][1]["credentials"] = json::object();
  auto r = assignedTaskFromJson(both, "", "t");
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("exactly one of"), std::string::npos);
}

TEST(NodeProtocolTest, ABadTaskSaysWhichField) {
  AssignedTask task;
  task.id = "a.b.0";
  task.tenant = "a";
  task.workload = "b";
  const json good = toJson(task);
  auto error = [&](const char* field, const json& value) {
    json j = good;
    j[field] = value;
    auto t = assignedTaskFromJson(j, "tasks[1]", "answer");
    return t.isOk() ? std::string("ok") : t.status().message();
  };
  EXPECT_EQ(error("generation", -1),
            "answer: tasks[1].generation: value -1 is outside 0..4294967295");
  EXPECT_EQ(error("command", "python t.py"),
            "answer: tasks[1].command: expected a list of strings (argv)");
  EXPECT_EQ(error("command", json::array({"python", 3})),
            "answer: tasks[1].command[1]: expected a string");
  EXPECT_EQ(error("env", json{{"LR", 0.1}}), "answer: tasks[1].env.LR: expected a string");
  EXPECT_EQ(error("milli_per_gpu", 1500),
            "answer: tasks[1].milli_per_gpu: value 1500 is outside 0..1000");
  EXPECT_EQ(error("credentials", json{{"token", 7}}),
            "answer: tasks[1]: credentials: 'token' is not a string");
  EXPECT_EQ(error("newer_field", true), "ok");  // A newer server may say more.
  EXPECT_EQ(error("mig_profile", 2), "answer: tasks[1]: mig_profile and mig_start go together");
  EXPECT_EQ(error("mig_start", 99), "answer: tasks[1].mig_start: value 99 is outside 0..63");
  EXPECT_EQ(error("hosts", json::array({"a", "b"})),
            "answer: tasks[1].hosts: expected a list of task_count node addresses");
  {
    json two = good;
    two["task_count"] = 2;
    two["hosts"] = {"10.0.0.1", "10.0.0.2,10.0.0.3"};
    EXPECT_EQ(assignedTaskFromJson(two, "tasks[1]", "answer").status().message(),
              "answer: tasks[1].hosts[1]: expected a node address (no spaces or commas)");
  }
  EXPECT_EQ(error("ports", json{{"Master", 20000}}),
            "answer: tasks[1].ports: 'Master' is not a port name");
  EXPECT_EQ(error("ports", json{{"master", 70000}}),
            "answer: tasks[1].ports.master: value 70000 is outside 1..65535");
  json j = good;
  j.erase("tenant");
  EXPECT_EQ(assignedTaskFromJson(j, "tasks[1]", "answer").status().message(),
            "answer: tasks[1]: missing 'tenant'");
  EXPECT_FALSE(assignedTaskFromJson(json::array(), "tasks[1]", "answer").isOk());
}

TEST(NodeProtocolTest, AReportRoundTripsAndAnUnknownFieldIsRefused) {
  TaskReport r;
  r.task = "a.b.0";
  r.generation = 7;
  r.state = TaskReport::State::kExited;
  r.exit_code = -1;
  r.signal = 9;
  r.oom_killed = true;
  r.stopped = false;
  r.run_time_ms = 1500;
  auto back = reportFromJson(toJson(r), "reports[0]", "heartbeat");
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(toJson(*back), toJson(r));
  EXPECT_EQ(back->signal, 9);
  EXPECT_TRUE(back->oom_killed);
  r.state = TaskReport::State::kFailedToStart;
  r.error = std::string(5000, 'x');
  back = reportFromJson(toJson(r), "reports[0]", "heartbeat");
  ASSERT_TRUE(back.isOk());
  EXPECT_EQ(back->error.size(), 1024U);  // Kept short.
  json bad = toJson(r);
  bad["state"] = "gone";
  EXPECT_EQ(reportFromJson(bad, "reports[0]", "heartbeat").status().message(),
            "heartbeat: reports[0].state: expected running, exited, failed_to_start or starting");
  // A task still starting says what it waits for, in a line kept short.
  TaskReport starting;
  starting.task = "a.b.0";
  starting.generation = 8;
  starting.state = TaskReport::State::kStarting;
  starting.progress = "pulling image (312 MB of 1.2 GB)";
  back = reportFromJson(toJson(starting), "reports[0]", "heartbeat");
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back->state, TaskReport::State::kStarting);
  EXPECT_EQ(back->progress, starting.progress);
  starting.progress = std::string(1000, 'p');
  EXPECT_EQ(reportFromJson(toJson(starting), "reports[0]", "heartbeat")->progress.size(), 256U);
  bad = toJson(r);
  bad["pid"] = 42;
  EXPECT_FALSE(reportFromJson(bad, "reports[0]", "heartbeat").isOk());
}

}  // namespace
}  // namespace tessera::protocol
