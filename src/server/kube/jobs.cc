// batch/v1 Jobs (docs/kubernetes.md, "Jobs"): a Job is one workload whose tasks are its pods,
// all of them at once; read from a body, and shown back as a Job and a Table.
#include <fmt/format.h>

#include <set>

#include "core/rfc3339.h"
#include "server/kube/objects.h"

namespace tessera::server::kube {

using nlohmann::json;

namespace {

// The most pods one Job runs (a workload's most tasks).
constexpr int64_t kMaxCompletions = 10000;

core::Status invalid(const std::string& field, const std::string& message) {
  return core::invalidArgument(field + ": " + message);
}

// An optional integer field of the Job's spec, within [lo, hi]; nullopt when absent.
core::Result<std::optional<int64_t>> integerField(const json& spec, const char* field, int64_t lo,
                                                  int64_t hi) {
  if (!spec.contains(field) || spec[field].is_null()) {
    return std::optional<int64_t>();
  }
  const json& v = spec[field];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    return invalid(
        std::string("spec.") + field,
        fmt::format("Invalid value: {}: must be an integer in {}..{}", v.dump(), lo, hi));
  }
  return std::optional<int64_t>(v.get<int64_t>());
}

// The gang minimum KAI reads (kai.scheduler/batch-min-member), from the Job or its template: at
// most the pods it runs at once.
core::Result<int64_t> minMember(const json& job_annotations, const json& pod_annotations,
                                int64_t parallelism) {
  static constexpr const char* kKey = "kai.scheduler/batch-min-member";
  for (const json* a : {&pod_annotations, &job_annotations}) {
    if (!a->is_object() || !a->contains(kKey)) {
      continue;
    }
    const json& v = (*a)[kKey];
    int64_t n = 0;
    try {
      size_t used = 0;
      const std::string text = v.is_string() ? v.get<std::string>() : "";
      n = std::stoll(text, &used);
      if (used != text.size()) {
        n = 0;
      }
    } catch (const std::exception&) {
      n = 0;
    }
    if (n < 1 || n > parallelism) {
      return invalid(std::string(a == &pod_annotations ? "spec.template." : "") +
                         "metadata.annotations[" + kKey + "]",
                     fmt::format("Invalid value: expected a number of pods in 1..{} (the Job's "
                                 "parallelism)",
                                 parallelism));
    }
    return n;
  }
  return int64_t{1};
}

// A field the pod decoder named, as the Job's field.
std::string inTemplate(const std::string& message) {
  if (message.starts_with("spec.") || message.starts_with("metadata.")) {
    return "spec.template." + message;
  }
  return message;
}

}  // namespace

core::Result<PodSubmission> workloadFromJob(const json& job, const std::string& ns, bool strict) {
  TESSERA_ASSIGN_OR_RETURN(const json metadata, objectMetadata(job, "Job", "batch/v1", ns));
  const std::string name = metadata["name"];
  const json spec = job.value("spec", json::object());
  if (!spec.is_object()) {
    return invalid("spec", "expected an object");
  }
  std::vector<std::string> warnings;
  static const std::set<std::string> kKnown = {"template",
                                               "parallelism",
                                               "completions",
                                               "completionMode",
                                               "backoffLimit",
                                               "activeDeadlineSeconds",
                                               "ttlSecondsAfterFinished",
                                               "suspend",
                                               "selector",
                                               "manualSelector",
                                               "podReplacementPolicy"};
  static const std::set<std::string> kRefused = {
      "podFailurePolicy", "successPolicy", "backoffLimitPerIndex", "maxFailedIndexes", "managedBy"};
  for (const auto& [key, value] : spec.items()) {
    if (kRefused.contains(key)) {
      return invalid("spec." + key, "Forbidden: Tessera does not support this field");
    }
    if (!kKnown.contains(key)) {
      if (strict) {
        return invalid("spec." + key, "unknown field");
      }
      warnings.push_back("spec." + key + " is not supported by Tessera and is ignored");
    }
  }
  if (spec.contains("suspend") && !spec["suspend"].is_boolean() && !spec["suspend"].is_null()) {
    return invalid("spec.suspend", "expected true or false");
  }
  if (spec.contains("manualSelector") && spec["manualSelector"] == true) {
    return invalid("spec.manualSelector",
                   "Forbidden: Tessera selects a Job's pods by its controller-uid label");
  }
  if (spec.contains("selector")) {
    warnings.push_back(
        "spec.selector is ignored: a Job's pods are selected by "
        "batch.kubernetes.io/controller-uid");
  }
  TESSERA_ASSIGN_OR_RETURN(auto parallelism, integerField(spec, "parallelism", 1, kMaxCompletions));
  TESSERA_ASSIGN_OR_RETURN(auto completions, integerField(spec, "completions", 1, kMaxCompletions));
  TESSERA_ASSIGN_OR_RETURN(auto backoff, integerField(spec, "backoffLimit", 0, 1000));
  TESSERA_ASSIGN_OR_RETURN(auto deadline,
                           integerField(spec, "activeDeadlineSeconds", 1, 365LL * 86400));
  // Checked here; kept in the Job's spec, where retention reads it.
  TESSERA_RETURN_IF_ERROR(integerField(spec, "ttlSecondsAfterFinished", 0, 365LL * 86400).status());
  const std::string mode = textOr(spec, "completionMode", "NonIndexed");
  if (spec.contains("completionMode") && !spec["completionMode"].is_string()) {
    return invalid("spec.completionMode", "expected a string");
  }
  if (mode != "NonIndexed" && mode != "Indexed") {
    return invalid("spec.completionMode", "Unsupported value: \"" + mode +
                                              "\": supported values: \"NonIndexed\", \"Indexed\"");
  }
  if (!completions) {
    if (mode == "Indexed") {
      return invalid("spec.completions", "Required value: when completion mode is Indexed");
    }
    if (parallelism.value_or(1) > 1) {
      return invalid("spec.completions",
                     "Required value: Tessera runs Jobs of a fixed number of completions "
                     "(work-queue Jobs, with parallelism and no completions, are not supported)");
    }
    completions = 1;
  }
  if (!parallelism) {
    parallelism = 1;  // Kubernetes' default: one pod at a time.
  }
  // More at once than there are completions is the same Job; fewer run that many at a time,
  // the next index placed as one succeeds.
  parallelism = std::min(*parallelism, *completions);
  // The pod template, read as a Pod.
  if (!spec.contains("template") || !spec["template"].is_object()) {
    return invalid("spec.template", "Required value");
  }
  const json& tmpl = spec["template"];
  const json tmeta = tmpl.value("metadata", json::object());
  const json tspec = tmpl.value("spec", json::object());
  if (!tmeta.is_object() || !tspec.is_object()) {
    return invalid(!tmeta.is_object() ? "spec.template.metadata" : "spec.template.spec",
                   "expected an object");
  }
  if (!tspec.contains("restartPolicy")) {
    return invalid("spec.template.spec.restartPolicy",
                   "Required value: valid values: \"OnFailure\", \"Never\"");
  }
  const json& restart = tspec["restartPolicy"];
  if (restart != "OnFailure" && restart != "Never") {
    return invalid(
        "spec.template.spec.restartPolicy",
        "Unsupported value: " + restart.dump() + ": supported values: \"OnFailure\", \"Never\"");
  }
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"spec", tspec}};
  pod["metadata"] = {{"name", name}};
  for (const char* field : {"labels", "annotations"}) {
    if (tmeta.contains(field)) {
      pod["metadata"][field] = tmeta[field];
    }
  }
  // The queue may be on the Job (KAI's pod-grouper reads the top owner's labels).
  const json job_labels = metadata.value("labels", json::object());
  for (const char* label : {"kai.scheduler/queue", "runai/queue"}) {
    if (job_labels.contains(label) &&
        !(pod["metadata"].contains("labels") && pod["metadata"]["labels"].contains(label))) {
      pod["metadata"]["labels"][label] = job_labels[label];
    }
  }
  auto from_pod = workloadFromPod(pod, ns, strict);
  if (!from_pod.isOk()) {
    return core::invalidArgument(inTemplate(from_pod.status().message()));
  }
  PodSubmission out = std::move(from_pod).value();
  for (std::string& w : out.warnings) {
    w = inTemplate(w);
  }
  for (EnvRef& ref : out.env_refs) {
    ref.field = inTemplate(ref.field);
  }
  out.warnings.insert(out.warnings.end(), warnings.begin(), warnings.end());
  TESSERA_ASSIGN_OR_RETURN(int64_t min_available,
                           minMember(metadata.value("annotations", json::object()),
                                     tmeta.value("annotations", json::object()), *parallelism));
  json& w = out.spec;
  w["tasks"] = *completions;
  if (spec.value("suspend", json(false)) == true) {
    w["suspended"] = true;  // Created held: no pod until it is resumed.
  }
  if (*parallelism < *completions) {
    w["parallelism"] = *parallelism;
  }
  w["minAvailable"] = min_available;
  // backoffLimit, by default 6: a Job whose pods all run at once starts over whole, one that
  // runs fewer at a time retries the failed pod alone (docs/kubernetes.md); after the Job
  // controller's back-off, 10 s doubling to 6 minutes.
  w["restart"] = {
      {"attempts", backoff.value_or(6)}, {"delay", 10}, {"maxDelay", 360}, {"mode", "fail"}};
  if (mode == "Indexed") {
    w["indexEnv"] = {"JOB_COMPLETION_INDEX"};
  }
  if (deadline) {
    w["maxRuntime"] = *deadline;
  }
  // What is kept of the Job: its spec with Kubernetes' defaults, the template's spec as the pod
  // decoder kept it.
  json kept = spec;
  kept["parallelism"] = *parallelism;
  kept["completions"] = *completions;
  kept["completionMode"] = mode;
  kept["backoffLimit"] = backoff.value_or(6);
  kept.erase("suspend");  // Shown from the record: it may change (WorkloadRecord::suspended).
  kept["manualSelector"] = false;
  kept["podReplacementPolicy"] = "TerminatingOrFailed";
  kept.erase("selector");
  kept["template"] = {{"metadata", tmeta}, {"spec", out.kube["spec"]}};
  out.kube = {{"kind", "Job"}, {"namespace", ns}, {"spec", std::move(kept)}};
  for (const char* field : {"labels", "annotations"}) {
    if (metadata.contains(field)) {
      out.kube[field] = metadata[field];
    }
  }
  return out;
}

json jobObject(const std::string& tenant, const WorkloadRecord& r, const WorkloadStatus& status) {
  const std::string uid = uidOf(tenant, r);
  const bool made_as_job = r.kube.is_object() && r.kube.value("kind", "") == "Job";
  json metadata = {{"name", r.name},  {"namespace", namespaceOf(r)},
                   {"uid", uid},      {"resourceVersion", std::to_string(r.mod_revision)},
                   {"generation", 1}, {"creationTimestamp", r.submitted}};
  json labels = r.kube.is_object() ? r.kube.value("labels", json::object()) : json::object();
  labels.update(jobLabels(tenant, r));
  metadata["labels"] = std::move(labels);
  if (r.kube.is_object() && r.kube.contains("annotations") && !r.kube["annotations"].empty()) {
    metadata["annotations"] = r.kube["annotations"];
  }
  if (r.kube.is_object() && r.kube.contains("deletionTimestamp")) {
    metadata["deletionTimestamp"] = r.kube["deletionTimestamp"];
  }
  const int n = taskCount(r);
  json spec;
  if (made_as_job) {
    spec = r.kube.value("spec", json::object());
    spec["suspend"] = r.suspended;
  } else {
    // Tessera's own workload of several tasks: an Indexed Job.
    spec = {
        {"parallelism", r.spec.contains("parallelism") && r.spec["parallelism"].is_number_integer()
                            ? r.spec["parallelism"].get<int>()
                            : n},
        {"completions", n},
        {"completionMode", "Indexed"},
        {"backoffLimit", r.spec.contains("restart") && r.spec["restart"].is_object()
                             ? r.spec["restart"].value("attempts", 0)
                             : 0},
        {"suspend", r.suspended},
        {"manualSelector", false},
        {"podReplacementPolicy", "TerminatingOrFailed"},
        {"template", {{"metadata", json::object()}, {"spec", podSpecOf(r)}}}};
  }
  spec["selector"] = {{"matchLabels", {{"batch.kubernetes.io/controller-uid", uid}}}};
  json& tmeta = spec["template"]["metadata"];
  if (!tmeta.is_object()) {
    tmeta = json::object();
  }
  json tlabels = tmeta.value("labels", json::object());
  tlabels.update(jobLabels(tenant, r));
  tmeta["labels"] = std::move(tlabels);
  // Its pods, counted as the Job controller counts them.
  int active = 0;
  int ready = 0;
  int succeeded = 0;
  int failed = std::max(0, status.attempt - 1);
  int terminating = 0;
  for (const json& pod : podsOf(tenant, r, status)) {
    const std::string phase = pod["status"].value("phase", "");
    if (phase == "Succeeded") {
      ++succeeded;
    } else if (phase == "Failed") {
      ++failed;
    } else {
      ++active;
      if (phase == "Running") {
        ++ready;
      }
    }
  }
  for (const TaskStatus& t : status.tasks) {
    terminating += t.state == "terminating" ? 1 : 0;
  }
  json st = {{"active", active},
             {"ready", ready},
             {"succeeded", succeeded},
             {"failed", failed},
             {"terminating", terminating},
             {"startTime", r.submitted},
             {"uncountedTerminatedPods", json::object()}};
  for (const char* zero : {"active", "succeeded", "failed"}) {
    if (st[zero] == 0) {
      st.erase(zero);  // Omitted when zero, as upstream's omitempty does.
    }
  }
  const std::string at = r.finished.empty() ? r.submitted : r.finished;
  auto cond = [&](const char* type, const std::string& reason, const std::string& message) {
    return json{{"type", type},       {"status", "True"},    {"reason", reason},
                {"message", message}, {"lastProbeTime", at}, {"lastTransitionTime", at}};
  };
  if (r.suspended && !isFinished(status.phase)) {
    st["conditions"] = {cond("Suspended", "JobSuspended", "Job suspended")};
    st.erase("startTime");  // As the Job controller clears it.
  } else if (status.phase == WorkloadPhase::kSucceeded) {
    const std::string m = "Reached expected number of succeeded pods";
    st["completionTime"] = at;
    st["conditions"] = {cond("SuccessCriteriaMet", "CompletionsReached", m),
                        cond("Complete", "CompletionsReached", m)};
  } else if (isFinished(status.phase)) {
    const bool deadline = status.reason.find("maxRuntime") != std::string::npos ||
                          status.reason.find("deadline") != std::string::npos;
    const std::string reason = status.phase == WorkloadPhase::kCancelled ? "Cancelled"
                               : deadline                                ? "DeadlineExceeded"
                                                                         : "BackoffLimitExceeded";
    const std::string m =
        status.reason.empty() ? "Job has reached the specified backoff limit" : status.reason;
    st["conditions"] = {cond("FailureTarget", reason, m), cond("Failed", reason, m)};
  }
  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata", std::move(metadata)},
          {"spec", std::move(spec)},
          {"status", std::move(st)}};
}

namespace {

// The STATUS column, as upstream's printJob: its last condition that holds, else Running.
std::string jobStatusCell(const json& job) {
  if (job["metadata"].contains("deletionTimestamp")) {
    return "Terminating";
  }
  std::string cell = "Running";
  for (const json& c : job["status"].value("conditions", json::array())) {
    if (c.value("status", "") == "True") {
      const std::string type = c.value("type", "");
      if (type == "Complete" || type == "Failed" || type == "Suspended") {
        cell = type;
      } else if (cell == "Running") {
        cell = type;
      }
    }
  }
  return cell;
}

std::string duration(const json& job, core::WallTime now) {
  const auto start = core::parseRfc3339(job["status"].value("startTime", ""));
  if (!start) {
    return "";
  }
  const auto end = core::parseRfc3339(job["status"].value("completionTime", ""));
  return humanDuration(
      std::chrono::duration_cast<std::chrono::seconds>((end ? *end : now) - *start));
}

}  // namespace

json jobTable(const std::vector<json>& jobs, const std::string& rv, IncludeObject include,
              core::WallTime now) {
  json columns = {
      column("Name", "Name must be unique within a namespace.", 0, "name"),
      column("Status", "Status of the job."),
      column("Completions", "The completion status of the job."),
      column("Duration", "Time required to complete the job."),
      column("Age", "CreationTimestamp is a timestamp of when this object was created."),
      column("Containers", "Names of each container in the template.", 1),
      column("Images", "Images referenced by each container in the template.", 1),
      column("Selector", "Query over pods that should match the pod count.", 1)};
  json rows = json::array();
  for (const json& job : jobs) {
    const json& spec = job["spec"];
    const json tspec = spec["template"].value("spec", json::object());
    std::string containers;
    std::string images;
    for (const json& c : tspec.value("containers", json::array())) {
      containers += (containers.empty() ? "" : ",") + c.value("name", "");
      images += (images.empty() ? "" : ",") + c.value("image", "");
    }
    std::string selector;
    const json match = spec["selector"].value("matchLabels", json::object());
    for (const auto& [k, v] : match.items()) {
      selector += (selector.empty() ? "" : ",") + k + "=" + v.get<std::string>();
    }
    json cells = {
        job["metadata"]["name"],
        jobStatusCell(job),
        fmt::format("{}/{}", job["status"].value("succeeded", 0), spec.value("completions", 1)),
        duration(job, now),
        ageCell(job["metadata"], now),
        containers,
        images,
        selector};
    rows.push_back(tableRow(std::move(cells), job, include));
  }
  return makeTable(std::move(columns), std::move(rows), rv);
}

}  // namespace tessera::server::kube
