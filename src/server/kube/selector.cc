#include "server/kube/selector.h"

namespace tessera::server::kube {

using nlohmann::json;

// A label selector of the equality forms (k=v, k==v, k!=v, k, !k), comma-joined; set-based
// forms are refused with 400 for now. Nullopt: it does not parse.

core::Result<std::vector<LabelRequirement>> parseLabelSelector(const std::string& text) {
  std::vector<LabelRequirement> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    while (!part.empty() && part.front() == ' ') {
      part.erase(part.begin());
    }
    while (!part.empty() && part.back() == ' ') {
      part.pop_back();
    }
    if (part.empty()) {
      if (text.empty()) {
        break;
      }
      return core::invalidArgument("unable to parse requirement: empty requirement");
    }
    if (part.find(" in ") != std::string::npos || part.find(" notin ") != std::string::npos ||
        part.find('(') != std::string::npos) {
      return core::invalidArgument("set-based label selectors ('" + part +
                                   "') are not supported yet; use k=v, k!=v, k or !k");
    }
    LabelRequirement r;
    if (part.front() == '!') {
      r.key = part.substr(1);
      r.op = LabelRequirement::Op::kNotExists;
    } else if (size_t ne = part.find("!="); ne != std::string::npos) {
      r.key = part.substr(0, ne);
      r.op = LabelRequirement::Op::kNotEq;
      r.value = part.substr(ne + 2);
    } else if (size_t eq = part.find('='); eq != std::string::npos) {
      r.key = part.substr(0, eq);
      r.op = LabelRequirement::Op::kEq;
      r.value = part.substr(part.compare(eq, 2, "==") == 0 ? eq + 2 : eq + 1);
    } else {
      r.key = part;
      r.op = LabelRequirement::Op::kExists;
    }
    if (r.key.empty()) {
      return core::invalidArgument("unable to parse requirement: '" + part + "'");
    }
    out.push_back(std::move(r));
  }
  return out;
}

bool matchesLabels(const std::vector<LabelRequirement>& selector, const json& labels) {
  for (const LabelRequirement& r : selector) {
    const bool has = labels.is_object() && labels.contains(r.key) && labels[r.key].is_string();
    const std::string value = has ? labels[r.key].get<std::string>() : "";
    switch (r.op) {
      case LabelRequirement::Op::kEq:
        if (!has || value != r.value) {
          return false;
        }
        break;
      case LabelRequirement::Op::kNotEq:
        if (has && value == r.value) {
          return false;
        }
        break;
      case LabelRequirement::Op::kExists:
        if (!has) {
          return false;
        }
        break;
      case LabelRequirement::Op::kNotExists:
        if (has) {
          return false;
        }
        break;
    }
  }
  return true;
}

core::Result<std::vector<FieldRequirement>> parseFieldSelector(
    const std::string& text, const std::set<std::string>& fields) {
  std::vector<FieldRequirement> out;
  if (text.empty()) {
    return out;
  }
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    FieldRequirement f;
    size_t op = part.find("!=");
    size_t skip = 2;
    if (op == std::string::npos) {
      op = part.find("==");
      skip = 2;
      if (op == std::string::npos) {
        op = part.find('=');
        skip = 1;
      }
    } else {
      f.equal = false;
    }
    if (op == std::string::npos || op == 0) {
      return core::invalidArgument("invalid selector: '" + part + "'; can't understand '" + part +
                                   "'");
    }
    f.field = part.substr(0, op);
    f.value = part.substr(op + skip);
    if (!fields.contains(f.field)) {
      return core::invalidArgument("field label not supported: " + f.field);
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::string podField(const json& pod, const std::string& field) {
  if (field == "metadata.name") {
    return pod["metadata"].value("name", "");
  }
  if (field == "metadata.namespace") {
    return pod["metadata"].value("namespace", "");
  }
  if (field == "status.phase") {
    return pod["status"].value("phase", "");
  }
  if (field == "spec.nodeName") {
    return pod["spec"].value("nodeName", "");
  }
  if (field == "spec.restartPolicy") {
    return pod["spec"].value("restartPolicy", "");
  }
  if (field == "spec.schedulerName") {
    return pod["spec"].value("schedulerName", "");
  }
  return "";
}

const std::set<std::string>& podFields() {
  static const std::set<std::string> kFields = {"metadata.name",      "metadata.namespace",
                                                "status.phase",       "spec.nodeName",
                                                "spec.restartPolicy", "spec.schedulerName"};
  return kFields;
}

core::Result<PodFilter> PodFilter::parse(std::string ns, const std::string& label_selector,
                                         const std::string& field_selector) {
  PodFilter f;
  f.ns = std::move(ns);
  TESSERA_ASSIGN_OR_RETURN(f.labels, parseLabelSelector(label_selector));
  TESSERA_ASSIGN_OR_RETURN(f.fields, parseFieldSelector(field_selector, podFields()));
  return f;
}

bool PodFilter::matches(const json& pod) const {
  const json& m = pod["metadata"];
  if (!ns.empty() && m.value("namespace", "") != ns) {
    return false;
  }
  if (!matchesLabels(labels, m.value("labels", json::object()))) {
    return false;
  }
  for (const FieldRequirement& f : fields) {
    if ((podField(pod, f.field) == f.value) != f.equal) {
      return false;
    }
  }
  return true;
}

}  // namespace tessera::server::kube
