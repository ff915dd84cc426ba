// Which objects a Kubernetes request selects: its namespace, label selector (k=v, k==v, k!=v,
// k, !k, k in (a,b), k notin (a,b)) and field selector (k=v, k==v, k!=v over the fields a kind can
// be selected by), as lists and watches filter.
//
//   auto f = kube::PodFilter::parse("default", "app=llm", "status.phase=Running");
//   if (f.isOk() && f->matches(pod)) ...
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::server::kube {

struct LabelRequirement {
  std::string key;
  enum class Op { kEq, kNotEq, kExists, kNotExists, kIn, kNotIn } op = Op::kEq;
  std::string value;
  std::set<std::string> values;  // kIn, kNotIn.
};
struct FieldRequirement {
  std::string field;
  bool equal = true;
  std::string value;
};

// An error is a bad selector (400), saying what does not parse or which field is not
// supported (`field label not supported: spec.foo`).
core::Result<std::vector<LabelRequirement>> parseLabelSelector(const std::string& text);
core::Result<std::vector<FieldRequirement>> parseFieldSelector(const std::string& text,
                                                               const std::set<std::string>& fields);
bool matchesLabels(const std::vector<LabelRequirement>& selector, const nlohmann::json& labels);

// The fields each kind can be selected by (pods' also serve Jobs, Secrets and ConfigMaps: their
// metadata.name and metadata.namespace), and an object's value of one (a dotted path).
const std::set<std::string>& podFields();
const std::set<std::string>& eventFields();
std::string objectField(const nlohmann::json& object, const std::string& field);

struct PodFilter {
  std::string ns;  // "" : every namespace.
  std::vector<LabelRequirement> labels;
  std::vector<FieldRequirement> fields;

  static core::Result<PodFilter> parse(std::string ns, const std::string& label_selector,
                                       const std::string& field_selector,
                                       const std::set<std::string>& fields = podFields());
  bool matches(const nlohmann::json& pod) const;
};

}  // namespace tessera::server::kube
