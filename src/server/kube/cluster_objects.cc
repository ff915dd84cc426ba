// Events and Nodes (docs/kubernetes.md, "Events" and "Nodes"): what happened to a workload, in
// Kubernetes' reasons and Tessera's words, and the nodes a tenant may use, read-only.
#include <fmt/format.h>

#include "audit/crypto.h"
#include "core/rfc3339.h"
#include "server/kube/objects.h"

namespace tessera::server::kube {

using nlohmann::json;

namespace {

struct Involved {
  // involvedObject: without the object's resourceVersion (optional in Kubernetes), so that an
  // event reads the same while its object changes and a watch sees it once.
  json object;
  std::string ns;
  std::string rv;  // The object's, as the event's own.
};

Involved involvedPod(const json& pod) {
  const json& m = pod["metadata"];
  return {{{"kind", "Pod"},
           {"namespace", m["namespace"]},
           {"name", m["name"]},
           {"uid", m["uid"]},
           {"apiVersion", "v1"},
           {"fieldPath", "spec.containers{main}"}},
          m["namespace"],
          m.value("resourceVersion", "")};
}

Involved involvedJob(const std::string& tenant, const WorkloadRecord& r) {
  return {{{"kind", "Job"},
           {"namespace", namespaceOf(r)},
           {"name", r.name},
           {"uid", uidOf(tenant, r)},
           {"apiVersion", "batch/v1"}},
          namespaceOf(r),
          std::to_string(r.mod_revision)};
}

// `part`: what tells apart the events one workload event makes of one object (the pod a
// Job's SuccessfulCreate is about).
json event(const Involved& about, size_t seq, const std::string& time, bool warning,
           const std::string& reason, const std::string& message, const std::string& part = "") {
  const std::string uid = about.object.value("uid", "");
  const std::string key =
      uid + "#" + std::to_string(seq) + "#" + reason + (part.empty() ? "" : "#" + part);
  const std::string name =
      about.object.value("name", "") + "." + audit::sha256Hex(key).substr(0, 16);
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata",
           {{"name", name},
            {"namespace", about.ns},
            {"uid", uuidOf("event/" + key)},
            {"resourceVersion", about.rv},
            {"creationTimestamp", time}}},
          {"involvedObject", about.object},
          {"reason", reason},
          {"message", message},
          {"type", warning ? "Warning" : "Normal"},
          {"source", {{"component", "tessera-scheduler"}}},
          {"firstTimestamp", time},
          {"lastTimestamp", time},
          {"count", 1},
          {"eventTime", nullptr},
          {"reportingComponent", "tessera-scheduler"},
          {"reportingInstance", ""}};
}

// An eviction's reason: Preempted when another workload took the room (reclaim, preemption,
// a move), Evicted otherwise (a node drained or lost).
std::string evictionReason(const std::string& text) {
  for (const char* word : {"reclaim", "preempt", "moved", "for workload"}) {
    if (text.find(word) != std::string::npos) {
      return "Preempted";
    }
  }
  return "Evicted";
}

// Whether a pod's container has started: it runs, or it ended after running (not a StartError:
// its node could not start it). One still being created or backing off a pull has not.
bool containerStarted(const json& pod) {
  const json& statuses = pod["status"].value("containerStatuses", json::array());
  if (statuses.empty() || !statuses[0].contains("state")) {
    return false;
  }
  const json& state = statuses[0]["state"];
  return state.contains("running") ||
         (state.contains("terminated") && state["terminated"].value("reason", "") != "StartError");
}

}  // namespace

std::vector<json> eventsOf(const std::string& tenant, const WorkloadRecord& r,
                           const WorkloadStatus& status) {
  std::vector<json> out;
  const bool job = isJob(r);
  const std::vector<json> pods = podsOf(tenant, r, status);
  const Involved whole = job ? involvedJob(tenant, r) : involvedPod(pods.front());
  // The last time it was placed: its pods' Started waits for their containers to start (an
  // image pull, ImagePullBackOff); an earlier placement's is told as it was recorded.
  size_t last_running = 0;
  for (size_t i = 0; i < r.events.size(); ++i) {
    if (r.events[i].event == "running") {
      last_running = i + 1;
    }
  }
  size_t seq = 0;
  for (const WorkloadEvent& e : r.events) {
    ++seq;
    const std::string& what = e.event;
    if (what == "submitted") {
      if (job) {  // The Job controller's: one per pod it creates.
        for (const json& pod : pods) {
          const std::string name = pod["metadata"].value("name", "");
          out.push_back(
              event(whole, seq, e.time, false, "SuccessfulCreate", "Created pod: " + name, name));
        }
      }
    } else if (what == "running") {
      for (const json& pod : pods) {
        const std::string node = pod["spec"].value("nodeName", "");
        if (!node.empty()) {
          const Involved p = involvedPod(pod);
          out.push_back(event(p, seq, e.time, false, "Scheduled",
                              "Successfully assigned " + p.ns + "/" +
                                  pod["metadata"].value("name", "") + " to " + node));
          if (seq != last_running || containerStarted(pod)) {
            out.push_back(event(p, seq, e.time, false, "Started", "Started container main"));
          }
        }
      }
    } else if (what == "succeeded") {
      if (job) {
        out.push_back(event(whole, seq, e.time, false, "Completed", "Job completed"));
      }
    } else if (what == "failed") {
      const std::string m = e.reason.empty() ? status.reason : e.reason;
      out.push_back(event(whole, seq, e.time, true,
                          job ? (m.find("maxRuntime") != std::string::npos ? "DeadlineExceeded"
                                                                           : "BackoffLimitExceeded")
                              : "Failed",
                          m.empty() ? "failed" : m));
    } else if (what == "evicted") {
      out.push_back(event(whole, seq, e.time, true, evictionReason(e.reason), e.reason));
    } else if (what == "restarting") {
      out.push_back(event(whole, seq, e.time, true, "BackOff", e.reason));
    } else if (what == "cancel requested" || what == "cancelled") {
      out.push_back(event(
          whole, seq, e.time, false, "Killing",
          e.reason.empty() ? "Stopping container main" : "Stopping container main: " + e.reason));
    } else {
      std::string reason = what;
      if (!reason.empty()) {
        reason[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(reason[0])));
      }
      out.push_back(event(whole, seq, e.time, false, reason, e.reason.empty() ? what : e.reason));
    }
  }
  // While it waits: why, as the scheduler says it, about each pod that waits (what `kubectl
  // describe pod` shows under Events).
  if (status.phase == WorkloadPhase::kPending && !status.reason.empty()) {
    const std::string at = r.events.empty() ? r.submitted : r.events.back().time;
    for (const json& pod : pods) {
      if (pod["status"].value("phase", "") == "Pending") {
        out.push_back(
            event(involvedPod(pod), seq + 1, at, true, "FailedScheduling", status.reason));
      }
    }
  }
  return out;
}

json eventTable(const std::vector<json>& events, const std::string& rv, IncludeObject include,
                core::WallTime now) {
  json columns = {column("Last Seen", "The time the event was last seen."),
                  column("Type", "Normal or Warning."),
                  column("Reason", "Why: a short, machine-readable word."),
                  column("Object", "The object it is about."),
                  column("Subobject", "The part of the object it is about.", 1),
                  column("Source", "Who reported it.", 1),
                  column("Message", "What happened, in words."),
                  column("First Seen", "The time the event was first seen.", 1),
                  column("Count", "How many times it happened.", 1),
                  column("Name", "Name must be unique within a namespace.", 1, "name")};
  auto ago = [&](const json& e, const char* field) {
    const auto t = core::parseRfc3339(e.value(field, ""));
    return t ? humanDuration(std::chrono::duration_cast<std::chrono::seconds>(now - *t))
             : std::string("<unknown>");
  };
  json rows = json::array();
  for (const json& e : events) {
    const json& o = e["involvedObject"];
    std::string kind = o.value("kind", "");
    for (char& c : kind) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    json cells = {ago(e, "lastTimestamp"),  e.value("type", ""),
                  e.value("reason", ""),    kind + "/" + o.value("name", ""),
                  o.value("fieldPath", ""), e["source"].value("component", ""),
                  e.value("message", ""),   ago(e, "firstTimestamp"),
                  e.value("count", 1),      e["metadata"].value("name", "")};
    rows.push_back(tableRow(std::move(cells), e, include));
  }
  return makeTable(std::move(columns), std::move(rows), rv);
}

json nodeObject(const NodeState& s, const std::string& gpu_product) {
  // When it joined is not known here: no creationTimestamp (AGE <unknown>), never a made-up one.
  json labels = {{"kubernetes.io/hostname", s.name},
                 {"kubernetes.io/os", "linux"},
                 {"kubernetes.io/arch", "amd64"},
                 {"node-role.kubernetes.io/worker", ""}};
  for (const auto& [k, v] : s.node.labels) {
    labels[k] = v;
  }
  // Whole GPUs are nvidia.com/gpu; those in MIG mode hold slices Tessera makes as asked
  // (nvidia.com/mig-<profile> requests), so they are counted apart, in a label.
  size_t in_mig = 0;
  for (const GpuState& g : s.gpus) {
    in_mig += g.mig ? 1 : 0;
  }
  const std::string gpus =
      std::to_string(s.node.gpus.size() - std::min(in_mig, s.node.gpus.size()));
  if (!s.node.gpus.empty()) {
    labels["nvidia.com/gpu.count"] = std::to_string(s.node.gpus.size());
    labels["nvidia.com/gpu.product"] = gpu_product;
  }
  if (in_mig > 0) {
    labels["nvidia.com/mig.capable"] = "true";
    labels["tessera.io/mig-gpus"] = std::to_string(in_mig);
  }
  const json capacity = {{"cpu", fmt::format("{}m", s.node.cpu.value())},
                         {"memory", fmt::format("{}Mi", s.node.memory.value())},
                         {"nvidia.com/gpu", gpus},
                         {"pods", "110"}};
  const bool ready = s.state == "ready" || s.state == "simulated";
  json condition = {{"type", "Ready"},
                    {"status", ready ? "True" : "Unknown"},
                    {"reason", ready ? "KubeletReady" : "NodeStatusUnknown"},
                    {"message", ready ? "its agent is reporting" : "its agent is " + s.state}};
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", s.name}, {"uid", uuidOf("node/" + s.name)}, {"labels", std::move(labels)}}},
          {"spec", {{"unschedulable", s.cordoned}}},
          {"status",
           {{"capacity", capacity},
            {"allocatable", capacity},
            {"conditions", {condition}},
            {"addresses", {{{"type", "Hostname"}, {"address", s.name}}}},
            {"nodeInfo",
             {{"kubeletVersion", kGitVersion},
              {"osImage", ""},
              {"kernelVersion", ""},
              {"containerRuntimeVersion", "tessera"},
              {"architecture", "amd64"},
              {"operatingSystem", "linux"},
              {"machineID", ""},
              {"systemUUID", ""},
              {"bootID", ""},
              {"kubeProxyVersion", ""}}}}}};
}

json nodeTable(const std::vector<json>& nodes, const std::string& rv, IncludeObject include,
               core::WallTime now) {
  json columns = {
      column("Name", "Name must be unique within a namespace.", 0, "name"),
      column("Status", "The status of the node"),
      column("Roles", "The roles of the node"),
      column("Age", "CreationTimestamp is a timestamp of when this object was created."),
      column("Version", "Kubelet Version reported by the node."),
      column("Internal-IP", "List of internal IPs in the cluster.", 1),
      column("External-IP", "List of external IPs in the cluster.", 1),
      column("OS-Image", "OS image reported by the node.", 1),
      column("Kernel-Version", "Kernel version reported by the node.", 1),
      column("Container-Runtime", "Container runtime and version.", 1)};
  json rows = json::array();
  for (const json& n : nodes) {
    std::string status =
        n["status"]["conditions"][0].value("status", "") == "True" ? "Ready" : "NotReady";
    if (n["spec"].value("unschedulable", false)) {
      status += ",SchedulingDisabled";
    }
    json cells = {n["metadata"]["name"],
                  status,
                  "worker",
                  ageCell(n["metadata"], now),
                  n["status"]["nodeInfo"].value("kubeletVersion", ""),
                  "<none>",
                  "<none>",
                  "<unknown>",
                  "<unknown>",
                  n["status"]["nodeInfo"].value("containerRuntimeVersion", "")};
    rows.push_back(tableRow(std::move(cells), n, include));
  }
  return makeTable(std::move(columns), std::move(rows), rv);
}

}  // namespace tessera::server::kube
