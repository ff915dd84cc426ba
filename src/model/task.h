// What one task asks of the cluster: CPU, memory and GPUs, with the constraints it accepts.
//
// GPU forms (exactly one, or none for a CPU-only task):
//   - whole GPUs:   gpu_count = k >= 1, gpu_milli = 1000;
//   - one shared GPU: gpu_count = 1, gpu_milli < 1000 and/or gpu_memory > 0;
//   - a MIG slice:  gpu_count = 1, mig_profile = "3g.40gb" (gpu_milli is then ignored).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "model/gpu_catalogue.h"
#include "model/ids.h"

namespace tessera::model {

// The isolation a task needs from whoever else is on its GPU.
enum class Isolation : uint8_t {
  kHardware,  // Exclusive GPU or MIG slice: nothing else shares its SMs or memory.
  kProcess,   // MPS or interposer caps: others share the GPU under enforced limits.
  kNone,      // Time slicing: others share the GPU with no limits.
};

std::string_view isolationName(Isolation i);

struct TaskRequest {
  TenantId tenant{0};
  core::MilliCpu cpu{0};
  core::MiB memory{0};
  int gpu_count = 0;
  core::MilliGpu gpu_milli{0};  // Per GPU.
  core::MiB gpu_memory{0};      // Per GPU; 0 = the GPU's memory in proportion to gpu_milli.
  // A time-sliced share's burst limit (gpu.milliLimit): the most GPU time it may use while the
  // GPU has time no share is guaranteed; 0 = none. Placement counts gpu_milli only.
  core::MilliGpu gpu_milli_limit{0};
  std::vector<GpuModelId> models;  // Accepted models; empty = any.
  std::string mig_profile;         // Empty = not a MIG request.
  Isolation isolation = Isolation::kHardware;
  // Labels a node must carry, each with this value (sorted by key; empty: any node).
  std::vector<std::pair<std::string, std::string>> node_selector;

  bool isCpuOnly() const { return gpu_count == 0; }
  bool isMig() const { return !mig_profile.empty(); }
  bool isFractional() const { return !isMig() && gpu_count == 1 && gpu_milli < core::kWholeGpu; }
};

// Checks the request's internal consistency (not whether the cluster can satisfy it). The error
// names the offending field.
core::Status validateTaskRequest(const TaskRequest& req);

// A workload's container image (its spec's `image`, `tessera run --image`):
//   oci:/path/to/layout[:tag]   an OCI image layout folder on the node (tag: its index's
//                               org.opencontainers.image.ref.name; none: the only image there);
//   oci-archive:/path/to.tar    the same layout as a tar file;
//   anything else, like registry.example.com/team/image:tag, nvcr.io/nvidia/pytorch@sha256:...
//   or docker://busybox: a registry reference, read as Docker reads one: the first part is the
//   registry if it holds a '.' or ':' or is "localhost", else the image is Docker Hub's
//   ("docker.io", "library/" before a one-part name); no tag and no digest: ":latest".
struct ImageRef {
  enum class Kind : uint8_t { kOciLayout, kOciArchive, kRegistry };
  Kind kind = Kind::kOciLayout;
  std::string path;        // kOciLayout, kOciArchive: absolute, normalised (no "." or ".." parts).
  std::string tag;         // kOciLayout: "" when none was given. kRegistry: "" with a digest only.
  std::string reference;   // kRegistry: the reference as given (without "docker://").
  std::string registry;    // kRegistry: "host[:port]" ("docker.io" for Docker Hub).
  std::string repository;  // kRegistry: "team/image" ("library/busybox" for "busybox").
  std::string digest;      // kRegistry: "sha256:<64 hex>" when given, else "".
};

// Parses an image reference; the error says what is wrong with it (to be prefixed with where).
core::Result<ImageRef> parseImageRef(const std::string& ref);

}  // namespace tessera::model
