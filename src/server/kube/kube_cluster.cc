// Events and Nodes through the Kubernetes API (docs/kubernetes.md, "Events", "Nodes"): read-only
// views, events of the tenant's workloads from the one registry (watched as pods are), and the
// nodes it may use.
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/kube/objects.h"

namespace tessera::server {

using nlohmann::json;

HttpResponse ControlPlane::kubeClusterObjects(Request& r, const kube::KubeTarget& t, bool table) {
  const std::string tenant = *r.scope.tenant;
  const core::WallTime now = clock_.wallNow();
  const auto include = kube::includeObject(kube::queryParam(r.scope.query, "includeObject"));
  const bool events = t.resource == "events";
  if (t.verb != "get" && t.verb != "list" && t.verb != "watch") {
    return kube::statusResponse(
        405, "the server does not allow this method on the requested resource (" + t.resource +
                 " are read-only" + (t.verb == "watch" ? ", and not watched yet)" : ")"));
  }
  const std::string* ls = kube::queryParam(r.scope.query, "labelSelector");
  const std::string* fs = kube::queryParam(r.scope.query, "fieldSelector");
  auto filter =
      kube::PodFilter::parse(events ? t.ns : "", ls == nullptr ? "" : *ls, fs == nullptr ? "" : *fs,
                             events ? kube::eventFields() : kube::podFields());
  if (!filter.isOk()) {
    return kube::statusResponse(400, filter.status().message());
  }
  if (t.verb == "watch") {
    // Events come from the workloads' changes, as pods do: the same stream. Nodes are compared
    // each second.
    return kubeWatch(r, std::move(filter).value(), table,
                     events ? KubeWatchKind::kEvents : KubeWatchKind::kNodes);
  }
  std::vector<json> items;
  std::string rv = std::to_string(registry_.revision());
  if (events) {
    auto [records, at] = registry_.snapshot(tenant);
    rv = std::to_string(at);
    for (const WorkloadPtr& w : records) {
      for (json& e : kube::eventsOf(tenant, *w, w->status)) {
        if (filter->matches(e) && (t.name.empty() || e["metadata"]["name"] == t.name)) {
          items.push_back(std::move(e));
        }
      }
    }
    std::stable_sort(items.begin(), items.end(), [](const json& a, const json& b) {
      return a.value("lastTimestamp", "") < b.value("lastTimestamp", "");
    });
  } else {
    for (auto& [name, node] : kubeNodes(tenant)) {
      if (filter->matches(node) && (t.name.empty() || name == t.name)) {
        items.push_back(std::move(node));
      }
    }
  }
  const std::string kind = events ? "Event" : "Node";
  if (!t.name.empty()) {
    if (items.empty()) {
      return kube::statusResponse(404, t.resource + " \"" + t.name + "\" not found",
                                  {{"name", t.name}, {"kind", t.resource}});
    }
    items.resize(1);
  }
  if (table) {
    return api::reply(200, events ? kube::eventTable(items, rv, include, now)
                                  : kube::nodeTable(items, rv, include, now));
  }
  if (!t.name.empty()) {
    return api::reply(200, items[0]);
  }
  return api::reply(200, kube::list(kind + "List", "v1", std::move(items), rv));
}

std::map<std::string, json> ControlPlane::kubeNodes(const std::string& tenant) const {
  std::map<std::string, json> out;
  for (const NodeState& s : driver_.nodeStates()) {
    if (!s.dedicated_to.empty() && s.dedicated_to != tenant) {
      continue;  // Another tenant's pool: not a node this tenant may use.
    }
    const std::string product =
        s.node.gpus.empty() ? "" : "NVIDIA-" + catalogue_.model(s.node.gpus[0].model).name;
    out.emplace(s.name, kube::nodeObject(s, product));
  }
  return out;
}

}  // namespace tessera::server
