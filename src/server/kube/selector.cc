#include "server/kube/selector.h"

#include <algorithm>
#include <cctype>

namespace tessera::server::kube {

using nlohmann::json;

namespace {

std::string trimmed(std::string s) {
  const char* ws = " \t";
  const size_t first = s.find_first_not_of(ws);
  if (first == std::string::npos) {
    return "";
  }
  return s.substr(first, s.find_last_not_of(ws) - first + 1);
}

// A label key or value: letters, digits, '-', '_', '.', and in a key '/' (a prefix).
bool labelText(const std::string& s, bool key) {
  return std::all_of(s.begin(), s.end(), [key](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.' ||
           (key && c == '/');
  });
}

}  // namespace

// The requirements, comma-joined (a comma inside the parentheses of `in` or `notin` separates
// values): k=v, k==v, k!=v, k, !k, k in (a,b), k notin (a,b).
core::Result<std::vector<LabelRequirement>> parseLabelSelector(const std::string& text) {
  std::vector<LabelRequirement> out;
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    }
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  if (depth != 0) {
    return core::invalidArgument("unable to parse requirement: unbalanced parentheses in '" + text +
                                 "'");
  }
  if (!text.empty()) {
    parts.push_back(current);
  }
  for (const std::string& raw : parts) {
    const std::string part = trimmed(raw);
    if (part.empty()) {
      return core::invalidArgument("unable to parse requirement: empty requirement");
    }
    LabelRequirement r;
    const size_t open = part.find('(');
    if (open != std::string::npos) {
      // k in (a,b) / k notin (a,b)
      std::string head = trimmed(part.substr(0, open));
      if (part.back() != ')') {
        return core::invalidArgument("unable to parse requirement: '" + part + "'");
      }
      const size_t space = head.find_last_of(" \t");
      const std::string op = space == std::string::npos ? "" : head.substr(space + 1);
      r.key = trimmed(head.substr(0, space == std::string::npos ? 0 : space));
      if (op == "in") {
        r.op = LabelRequirement::Op::kIn;
      } else if (op == "notin") {
        r.op = LabelRequirement::Op::kNotIn;
      } else {
        return core::invalidArgument("unable to parse requirement: '" + part +
                                     "': expected 'in' or 'notin' before '('");
      }
      std::string values = part.substr(open + 1, part.size() - open - 2);
      size_t start = 0;
      while (start <= values.size()) {
        const size_t comma = values.find(',', start);
        const std::string v = trimmed(
            values.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        start = comma == std::string::npos ? values.size() + 1 : comma + 1;
        if (!labelText(v, false)) {
          return core::invalidArgument("unable to parse requirement: invalid value '" + v + "'");
        }
        r.values.insert(v);
      }
    } else if (part.front() == '!') {
      r.key = trimmed(part.substr(1));
      r.op = LabelRequirement::Op::kNotExists;
    } else if (size_t ne = part.find("!="); ne != std::string::npos) {
      r.key = trimmed(part.substr(0, ne));
      r.op = LabelRequirement::Op::kNotEq;
      r.value = trimmed(part.substr(ne + 2));
    } else if (size_t eq = part.find('='); eq != std::string::npos) {
      r.key = trimmed(part.substr(0, eq));
      r.op = LabelRequirement::Op::kEq;
      r.value = trimmed(part.substr(part.compare(eq, 2, "==") == 0 ? eq + 2 : eq + 1));
    } else {
      r.key = part;
      r.op = LabelRequirement::Op::kExists;
    }
    if (r.key.empty() || !labelText(r.key, true) || !labelText(r.value, false)) {
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
      case LabelRequirement::Op::kIn:
        if (!has || !r.values.contains(value)) {
          return false;
        }
        break;
      case LabelRequirement::Op::kNotIn:  // An object without the label matches, as upstream.
        if (has && r.values.contains(value)) {
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

std::string objectField(const json& object, const std::string& field) {
  // A dotted path into the object ("status.phase", "involvedObject.uid"); "" where it is not a
  // string (or not there).
  const json* at = &object;
  size_t start = 0;
  while (true) {
    const size_t dot = field.find('.', start);
    const std::string part = field.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!at->is_object()) {
      return "";
    }
    auto it = at->find(part);
    if (it == at->end()) {
      return "";
    }
    at = &*it;
    if (dot == std::string::npos) {
      return at->is_string() ? at->get<std::string>() : "";
    }
    start = dot + 1;
  }
}

const std::set<std::string>& podFields() {
  static const std::set<std::string> kFields = {"metadata.name",      "metadata.namespace",
                                                "status.phase",       "spec.nodeName",
                                                "spec.restartPolicy", "spec.schedulerName"};
  return kFields;
}

const std::set<std::string>& eventFields() {
  static const std::set<std::string> kFields = {"metadata.name",
                                                "metadata.namespace",
                                                "involvedObject.kind",
                                                "involvedObject.name",
                                                "involvedObject.namespace",
                                                "involvedObject.uid",
                                                "involvedObject.apiVersion",
                                                "involvedObject.fieldPath",
                                                "involvedObject.resourceVersion",
                                                "reason",
                                                "reportingComponent",
                                                "source",
                                                "type"};
  return kFields;
}

core::Result<PodFilter> PodFilter::parse(std::string ns, const std::string& label_selector,
                                         const std::string& field_selector,
                                         const std::set<std::string>& fields) {
  PodFilter f;
  f.ns = std::move(ns);
  TESSERA_ASSIGN_OR_RETURN(f.labels, parseLabelSelector(label_selector));
  TESSERA_ASSIGN_OR_RETURN(f.fields, parseFieldSelector(field_selector, fields));
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
    if ((objectField(pod, f.field) == f.value) != f.equal) {
      return false;
    }
  }
  return true;
}

}  // namespace tessera::server::kube
