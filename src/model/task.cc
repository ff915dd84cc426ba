#include "model/task.h"

#include <algorithm>
#include <cctype>

#include "model/node.h"

namespace tessera::model {

std::string_view isolationName(Isolation i) {
  switch (i) {
    case Isolation::kHardware:
      return "hardware";
    case Isolation::kProcess:
      return "process";
    case Isolation::kNone:
      return "none";
  }
  return "unknown";
}

core::Status validateTaskRequest(const TaskRequest& req) {
  for (size_t i = 0; i < req.node_selector.size(); ++i) {
    const auto& [key, value] = req.node_selector[i];
    TESSERA_RETURN_IF_ERROR(validateLabel(key, value));
    if (i > 0 && req.node_selector[i - 1].first >= key) {
      return core::invalidArgument("node selector: keys must be sorted and distinct");
    }
  }
  if (req.cpu.value() < 0) {
    return core::invalidArgument("cpu must not be negative");
  }
  if (req.memory.value() < 0) {
    return core::invalidArgument("memory must not be negative");
  }
  if (req.gpu_count < 0 || req.gpu_count > 64) {
    return core::invalidArgument("gpu count " + std::to_string(req.gpu_count) +
                                 " is outside 0..64");
  }
  if (req.gpu_memory.value() < 0) {
    return core::invalidArgument("gpu memory must not be negative");
  }
  if (req.gpu_count == 0) {
    if (req.gpu_milli.value() != 0 || req.gpu_memory.value() != 0 || req.isMig()) {
      return core::invalidArgument(
          "a task with no GPUs cannot ask for GPU share, GPU memory or a "
          "MIG profile");
    }
    return core::Status::ok();
  }
  if (req.isMig()) {
    if (req.gpu_count != 1) {
      return core::invalidArgument("a MIG request takes exactly one slice (gpu count 1)");
    }
    return core::Status::ok();
  }
  if (req.gpu_milli.value() <= 0 || req.gpu_milli > core::kWholeGpu) {
    return core::invalidArgument("gpu share " + std::to_string(req.gpu_milli.value()) +
                                 " milli is outside 1..1000");
  }
  if (req.gpu_milli < core::kWholeGpu && req.gpu_count != 1) {
    return core::invalidArgument("a fractional GPU share (" +
                                 std::to_string(req.gpu_milli.value()) +
                                 " milli) is only allowed with gpu count 1");
  }
  if (req.isFractional() && req.isolation == Isolation::kHardware) {
    return core::invalidArgument(
        "a fractional GPU cannot give hardware isolation; ask for a MIG "
        "profile or a whole GPU, or accept 'process' isolation");
  }
  return core::Status::ok();
}

namespace {

// Whether `path` is absolute and plain: no empty, "." or ".." parts (so what admission checked is
// what the agent opens), no control characters.
bool plainAbsolutePath(const std::string& path) {
  if (path.size() < 2 || path.front() != '/' || path.back() == '/' || path.size() > 4096) {
    return false;
  }
  if (std::any_of(path.begin(), path.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    return false;
  }
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) {
      end = path.size();
    }
    const std::string part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return false;
    }
    start = end + 1;
  }
  return true;
}

}  // namespace

core::Result<ImageRef> parseImageRef(const std::string& ref) {
  if (ref.empty() || ref.size() > 4096) {
    return core::invalidArgument("an image reference must be 1 to 4096 characters");
  }
  ImageRef out;
  if (ref.starts_with("oci:")) {
    out.kind = ImageRef::Kind::kOciLayout;
    std::string rest = ref.substr(4);
    // The tag follows the last ':' after the last '/': a folder name may hold ':' only if a tag
    // follows it.
    const size_t slash = rest.rfind('/');
    const size_t colon = rest.rfind(':');
    if (colon != std::string::npos && slash != std::string::npos && colon > slash) {
      out.tag = rest.substr(colon + 1);
      rest = rest.substr(0, colon);
      const bool tag_ok = !out.tag.empty() && out.tag.size() <= 128 &&
                          std::all_of(out.tag.begin(), out.tag.end(), [](char c) {
                            return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' ||
                                   c == '.' || c == '-';
                          });
      if (!tag_ok) {
        return core::invalidArgument("image '" + ref + "': the tag '" + out.tag +
                                     "' is not 1 to 128 of [A-Za-z0-9_.-]");
      }
    }
    if (!plainAbsolutePath(rest)) {
      return core::invalidArgument("image '" + ref +
                                   "': expected oci:/absolute/path[:tag] (an OCI image layout "
                                   "folder on the node, without '.', '..' or empty parts)");
    }
    out.path = rest;
    return out;
  }
  if (ref.starts_with("oci-archive:")) {
    out.kind = ImageRef::Kind::kOciArchive;
    out.path = ref.substr(12);
    if (!plainAbsolutePath(out.path)) {
      return core::invalidArgument("image '" + ref +
                                   "': expected oci-archive:/absolute/path.tar (an OCI image "
                                   "layout as a tar file on the node)");
    }
    return out;
  }
  std::string reference = ref.starts_with("docker://") ? ref.substr(9) : ref;
  // A registry reference: [host[:port]/]name[:tag][@sha256:hex] (the distribution spec's
  // grammar: lower-case name parts of [a-z0-9] joined by '.', '_', '__' or '-').
  const auto bad = [&](const std::string& why) {
    return core::invalidArgument(
        "image '" + ref + "': " + why +
        " (expected oci:/path[:tag], oci-archive:/path.tar, or a registry reference like "
        "registry.example.com/team/image:tag or team/image@sha256:<64 hex digits>)");
  };
  const bool chars_ok =
      !reference.empty() && std::all_of(reference.begin(), reference.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
               std::string_view("._-/:@").find(c) != std::string_view::npos;
      });
  if (!chars_ok || reference.front() == '/' || reference.back() == '/' ||
      reference.find("//") != std::string::npos || reference.back() == ':' ||
      reference.back() == '@') {
    return bad("not an image reference");
  }
  out.kind = ImageRef::Kind::kRegistry;
  out.reference = reference;
  std::string name = reference;
  if (const size_t at = name.find('@'); at != std::string::npos) {
    out.digest = name.substr(at + 1);
    name = name.substr(0, at);
    const std::string hex = out.digest.starts_with("sha256:") ? out.digest.substr(7) : "";
    if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return bad("the digest '" + out.digest.substr(0, 80) +
                 "' is not sha256:<64 lower-case hex digits>");
    }
  }
  // The tag follows the last ':' after the last '/' (a ':' before it is the registry's port).
  const size_t slash = name.rfind('/');
  const size_t colon = name.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
    out.tag = name.substr(colon + 1);
    name = name.substr(0, colon);
    const bool tag_ok = !out.tag.empty() && out.tag.size() <= 128 && out.tag.front() != '.' &&
                        out.tag.front() != '-' &&
                        std::all_of(out.tag.begin(), out.tag.end(), [](char c) {
                          return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' ||
                                 c == '.' || c == '-';
                        });
    if (!tag_ok) {
      return bad("the tag '" + out.tag.substr(0, 140) + "' is not 1 to 128 of [A-Za-z0-9_.-]");
    }
  } else if (out.digest.empty()) {
    out.tag = "latest";
  }
  const size_t first = name.find('/');
  const std::string head = first == std::string::npos ? "" : name.substr(0, first);
  if (!head.empty() && (head.find_first_of(".:") != std::string::npos || head == "localhost")) {
    out.registry = head;
    out.repository = name.substr(first + 1);
  } else {
    out.registry = "docker.io";
    out.repository = name.find('/') == std::string::npos ? "library/" + name : name;
  }
  if (out.registry.find('@') != std::string::npos ||
      std::count(out.registry.begin(), out.registry.end(), ':') > 1 || out.registry.back() == ':' ||
      out.registry.front() == ':') {
    return bad("the registry '" + out.registry + "' is not host[:port]");
  }
  if (const size_t c = out.registry.find(':'); c != std::string::npos) {
    const std::string port = out.registry.substr(c + 1);
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos) {
      return bad("the registry '" + out.registry + "' has no valid port");
    }
  }
  // Repository parts: [a-z0-9]+ joined by one '.', '_', '__' or one or more '-'.
  size_t start = 0;
  while (start <= out.repository.size()) {
    size_t end = out.repository.find('/', start);
    if (end == std::string::npos) {
      end = out.repository.size();
    }
    const std::string part = out.repository.substr(start, end - start);
    bool ok = !part.empty() && std::isalnum(static_cast<unsigned char>(part.front())) != 0 &&
              std::isalnum(static_cast<unsigned char>(part.back())) != 0 &&
              part.find_first_of(":@") == std::string::npos &&
              part.find("..") == std::string::npos && part.find("___") == std::string::npos;
    for (char c : part) {
      ok = ok && std::isupper(static_cast<unsigned char>(c)) == 0;
    }
    if (!ok) {
      return bad("the name part '" + part.substr(0, 80) +
                 "' is not lower-case letters and digits joined by '.', '_' or '-'");
    }
    start = end + 1;
  }
  if (out.repository.size() > 255) {
    return bad("the name is over 255 characters");
  }
  return out;
}

}  // namespace tessera::model
