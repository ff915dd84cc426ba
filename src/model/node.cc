#include "model/node.h"

namespace tessera::model {

namespace {

bool labelChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

bool alnum(char c) { return labelChar(c) && c != '-' && c != '_' && c != '.'; }

// A name segment: 1..63 label characters, starting and ending alphanumeric.
bool labelName(std::string_view s) {
  if (s.empty() || s.size() > 63 || !alnum(s.front()) || !alnum(s.back())) {
    return false;
  }
  for (char c : s) {
    if (!labelChar(c)) {
      return false;
    }
  }
  return true;
}

}  // namespace

core::Status validateLabel(std::string_view key, std::string_view value) {
  std::string_view name = key;
  if (const size_t slash = key.find('/'); slash != std::string_view::npos) {
    const std::string_view prefix = key.substr(0, slash);
    name = key.substr(slash + 1);
    if (prefix.empty() || prefix.size() > 253 || !labelName(prefix) ||
        prefix.find('_') != std::string_view::npos) {
      return core::invalidArgument("label '" + std::string(key) +
                                   "': the prefix before '/' must be a DNS name");
    }
  }
  if (!labelName(name)) {
    return core::invalidArgument(
        "label '" + std::string(key).substr(0, 300) +
        "': a key is 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a "
        "letter or digit (optionally after a DNS prefix and '/')");
  }
  if (!value.empty() && !labelName(value)) {
    return core::invalidArgument(
        "label '" + std::string(key) + "': its value '" + std::string(value).substr(0, 100) +
        "' must be empty or 1 to 63 letters, digits, '-', '_' or '.', starting and ending with "
        "a letter or digit");
  }
  return core::Status::ok();
}

core::Status validateNode(const Node& node) {
  if (node.name.empty()) {
    return core::invalidArgument("node has an empty name");
  }
  if (node.cpu.value() < 0 || node.memory.value() < 0) {
    return core::invalidArgument("node '" + node.name + "' has negative CPU or memory");
  }
  if (static_cast<int>(node.gpus.size()) > kMaxGpusPerNode) {
    return core::invalidArgument("node '" + node.name + "' has " +
                                 std::to_string(node.gpus.size()) + " GPUs; at most " +
                                 std::to_string(kMaxGpusPerNode) + " are supported");
  }
  for (const auto& [key, value] : node.labels) {
    if (core::Status st = validateLabel(key, value); !st.isOk()) {
      return core::invalidArgument("node '" + node.name + "': " + st.message());
    }
  }
  return core::Status::ok();
}

Node makeNode(std::string name, core::MilliCpu cpu, core::MiB memory, const GpuCatalogue& catalogue,
              GpuModelId model, int count) {
  Node n{std::move(name), cpu, memory, {}, -1};
  n.gpus.assign(count, GpuDevice{model, catalogue.model(model).memory});
  return n;
}

}  // namespace tessera::model
