// A fake libnvidia-ml.so.1 for tests of code that loads NVML with dlopen. It exports a subset of
// the NVML C API whose answers come from a JSON script named by FAKE_NVML_SCRIPT, read by every
// first nvmlInit_v2 (init is reference counted like NVML's; the script is re-read once the last
// nvmlShutdown has run). If the variable is unset or the script cannot be read or is invalid,
// nvmlInit_v2 returns 9 (DRIVER_NOT_LOADED) and says why on stderr (except when unset).
//
// Script reference (every key optional unless marked required):
//
//   {
//     "driver_version": "550.54.15",  // nvmlSystemGetDriverVersion; absent: 3 NOT_SUPPORTED
//     "cuda_version": 12040,          // nvmlSystemGetCudaDriverVersion_v2; absent: 3
//     "gpus": [                       // index = position; absent: no GPUs
//       {"uuid": "GPU-0d3f...",                // required
//        "name": "NVIDIA H100 80GB HBM3",      // required
//        "memory_mib": 81559, "used_mib": 0,   // default 0; free = memory - used (min 0)
//        "pci_bus_id": "00000000:18:00.0",     // default ""; domain/bus/device parsed as hex
//        "minor": 0,                           // default: the GPU's index
//        "mig": {"current": 1,                 // required; 0 = MIG disabled
//                "pending": 1,                 // default: current
//                "max_devices": 7,             // default 7; GetMaxMigDeviceCount says 0 if
//                                              // current is 0
//                "devices": [                  // looked up by "index" (gaps allowed); none
//                                              // is found while current is 0
//                  {"index": 0, "uuid": "MIG-5c2a...",                  // both required
//                   "name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb",        // required
//                   "memory_mib": 40448, "used_mib": 0,                 // default 0
//                   "gpu_instance_id": 2, "compute_instance_id": 0}],   // default 0
//                "profiles": [                 // GPU instance profiles; absent: none
//                  {"index": 2, "id": 9, "name": "3g.40gb",             // all required
//                   "compute_slices": 3, "memory_slices": 4, "memory_mib": 40448,
//                   "max_instances": 2, "starts": [0, 4]}],
//                "instances": [                // GPU instances at init, made as the calls
//                                              // below make them; needs current 1 and no
//                                              // (or an empty) "devices"
//                  {"profile_id": 9, "start": 0,                        // both required
//                   "compute": 1}]},           // default 0; 1: one compute instance as big
//                                              // as the GPU instance
//        "processes": [1234, 5678]}            // GetComputeRunningProcesses_v3; absent: none
//     ],
//     "topology": [[0, 10], [10, 0]],   // GetTopologyCommonAncestor(i, j) = [i][j]; N x N for
//                                       // N GPUs; absent: 3
//     "p2p_nvlink": [[0, 0], [0, 0]],   // GetP2PStatus(i, j, 2 = NVLINK) status = [i][j] (0 OK,
//                                       // 5 NOT_SUPPORTED, ...); N x N; absent or another
//                                       // p2pIndex: 3
//     "errors": {"nvmlDeviceGetUUID": 15, "nvmlDeviceGetMigMode#1": 3, "nvmlInit_v2": 9}
//   }
//
// "errors" maps an exported function's name to the code it returns on every call, checked right
// after the init check and before anything else. "name#N" applies only to calls about GPU N: the
// index passed to nvmlDeviceGetHandleByIndex_v2, the GPU (or MIG device's parent GPU) a handle
// belongs to, the GPU a GPU or compute instance is on, the first device of the two-device calls.
// "name#N" wins over "name", and 0 means "no error", so {"f": 15, "f#0": 0} fails f for every GPU
// but GPU 0. "nvmlShutdown" still shuts down; "nvmlInit_v2" leaves the library uninitialized.
//
// Other behaviour: every call but nvmlInit_v2 and nvmlErrorString returns 1 (UNINITIALIZED)
// before init and after shutdown; null output pointers and handles the library did not give out
// (or gave out before a shutdown) return 2 (INVALID_ARGUMENT); string getters return 7
// (INSUFFICIENT_SIZE) when length < strlen + 1; nvmlDeviceGetHandleByIndex_v2 past the count
// returns 2. MIG device handles work with GetUUID, GetName, GetMemoryInfo, GetGpuInstanceId and
// GetComputeInstanceId; every other device call returns 2 for them, and GetGpuInstanceId and
// GetComputeInstanceId return 2 for full GPUs. A GPU without "mig" returns 3 from GetMigMode,
// GetMaxMigDeviceCount and GetMigDeviceHandleByIndex; a missing MIG index returns 6 (NOT_FOUND).
// An exception (out of memory) returns 999 (UNKNOWN); none crosses the C boundary.
//
// SetMigMode (mode 0 or 1, else 2; no "mig": 3) sets pending; the GPU's "reset" makes it current
// unless the GPU has processes or, turning MIG off, GPU instances: then activationStatus is 19
// (IN_USE) and the mode stays pending. The call itself returns 0.
//
// MIG management. GetGpuInstanceProfileInfo finds a profile by "index" whatever the MIG mode
// (none, or no "mig": 3) and answers id, sliceCount = compute_slices, instanceCount =
// max_instances, memorySizeMB = memory_mib, the rest 0; the other calls take its "id" (unknown:
// 2). Without "mig" or with current 0, GetGpuInstances and CreateGpuInstanceWithPlacement return
// 3. A placement needs size = memory_slices and a start in "starts" (else 2); overlapping another
// GPU instance's [start, start + memory_slices) or exceeding max_instances returns 23
// (INSUFFICIENT_RESOURCES). GPU instance ids count up from 1 per GPU, compute instance ids from 0
// per GPU instance; neither is reused. Compute instance profiles are fixed, index = id, with 1, 2,
// 3, 4, 7, 8, 6 slices for 0-6: GetComputeInstanceProfileInfo takes engProfile 0 only (else 2)
// and returns 3 for another index or one bigger than the GPU instance's compute_slices
// (instanceCount = compute_slices / slices); CreateComputeInstance and GetComputeInstances return
// 2 for another id, and CreateComputeInstance returns 23 if the GPU instance's compute instances
// would use more than compute_slices or no MIG index below max_devices is free. Each compute
// instance is a MIG device of its GPU, at the lowest free MIG index: uuid
// "MIG-fake-g<gpu>-gi<gi id>-ci<ci id>", name "<GPU name> MIG <GPU instance profile name>",
// memory_mib the GPU instance profile's, used 0, its instance ids; destroying the compute
// instance removes the device (its handle returns 2). GpuInstanceDestroy returns 19 (IN_USE)
// while compute instances remain. The list calls (GetGpuInstances, GetComputeInstances,
// GetComputeRunningProcesses_v3) take a null count as 2; with n to list, a null array or a count
// < n sets count = n and returns 7, unless n is 0 (count = 0, success). Processes have
// usedGpuMemory 0 and instance ids 0xFFFFFFFF; MIG device handles return 2 there. GPU and compute
// instance handles work like device handles: destroyed ones, and those from before a shutdown,
// return 2.
//
// Variants: -DFAKE_NVML_NO_OPTIONAL leaves the MIG (management included), process, topology,
// P2P, PCI, minor-number and CUDA-version functions unexported (they become hidden),
// -DFAKE_NVML_NO_COUNT leaves nvmlDeviceGetCount_v2 unexported, so a loader's handling of
// missing symbols can be tested.

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

// The NVML types this fake exports, as nvml.h lays them out.
typedef int nvmlReturn_t;
typedef struct {
  struct nvmlDevice_st* handle;
} nvmlDevice_t;
typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;
typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct {
  struct nvmlGpuInstance_st* handle;
} nvmlGpuInstance_t;
typedef struct {
  struct nvmlComputeInstance_st* handle;
} nvmlComputeInstance_t;
typedef struct {
  unsigned int start;
  unsigned int size;
} nvmlGpuInstancePlacement_t;
typedef struct {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;
typedef struct {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;
typedef struct {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

#define FAKE_NVML_EXPORT extern "C" __attribute__((visibility("default")))
#define FAKE_NVML_HIDDEN extern "C" __attribute__((visibility("hidden")))
#ifdef FAKE_NVML_NO_OPTIONAL
#define FAKE_NVML_OPTIONAL FAKE_NVML_HIDDEN
#else
#define FAKE_NVML_OPTIONAL FAKE_NVML_EXPORT
#endif
#ifdef FAKE_NVML_NO_COUNT
#define FAKE_NVML_COUNT FAKE_NVML_HIDDEN
#else
#define FAKE_NVML_COUNT FAKE_NVML_EXPORT
#endif

namespace tessera::fake_nvml {
namespace {

using nlohmann::json;

constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kUninitialized = 1;
constexpr nvmlReturn_t kInvalidArgument = 2;
constexpr nvmlReturn_t kNotSupported = 3;
constexpr nvmlReturn_t kNotFound = 6;
constexpr nvmlReturn_t kInsufficientSize = 7;
constexpr nvmlReturn_t kDriverNotLoaded = 9;
constexpr nvmlReturn_t kInUse = 19;
constexpr nvmlReturn_t kInsufficientResources = 23;
constexpr nvmlReturn_t kUnknown = 999;

constexpr int kP2pIndexNvlink = 2;
constexpr unsigned long long kBytesPerMib = 1024 * 1024;
constexpr unsigned kSharedEngines = 0;  // NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED.
constexpr unsigned kNoInstance = 0xFFFFFFFF;
// The compute instance profiles by index (which the fake also uses as their ID): their slices.
constexpr unsigned kComputeProfileSlices[] = {1, 2, 3, 4, 7, 8, 6};

// A GPU instance profile from the script.
struct GpuInstanceProfile {
  unsigned index = 0;
  unsigned id = 0;
  std::string name;
  unsigned compute_slices = 0;
  unsigned memory_slices = 0;
  unsigned long long memory_mib = 0;
  unsigned max_instances = 0;
  std::vector<unsigned> starts;
};

struct GpuInstance;

// A full GPU or a MIG device; its address is the handle given out for it.
struct Device {
  bool is_mig = false;
  unsigned gpu_index = 0;  // This GPU's index, or the parent GPU's for a MIG device.
  std::string uuid;
  std::string name;
  unsigned long long memory_mib = 0;
  unsigned long long used_mib = 0;
  // Full GPUs only.
  std::string pci_bus_id;
  unsigned minor = 0;
  bool has_mig = false;
  unsigned mig_current = 0;
  unsigned mig_pending = 0;
  unsigned mig_max_devices = 0;
  std::map<unsigned, const Device*> mig_devices;  // By MIG index.
  std::vector<GpuInstanceProfile> gpu_instance_profiles;
  std::map<unsigned, GpuInstance*> gpu_instances;  // The live ones, by id.
  unsigned next_gpu_instance_id = 1;
  std::vector<unsigned> processes;
  // MIG devices only.
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;

  const GpuInstanceProfile* profileByIndex(unsigned index) const {
    for (const GpuInstanceProfile& profile : gpu_instance_profiles) {
      if (profile.index == index) {
        return &profile;
      }
    }
    return nullptr;
  }

  const GpuInstanceProfile* profileById(unsigned id) const {
    for (const GpuInstanceProfile& profile : gpu_instance_profiles) {
      if (profile.id == id) {
        return &profile;
      }
    }
    return nullptr;
  }
};

struct ComputeInstance;

// A GPU instance; its address is the handle given out for it.
struct GpuInstance {
  Device* gpu = nullptr;
  unsigned id = 0;
  const GpuInstanceProfile* profile = nullptr;  // One of gpu->gpu_instance_profiles.
  unsigned start = 0;
  std::map<unsigned, ComputeInstance*> compute_instances;  // The live ones, by id.
  unsigned next_compute_instance_id = 0;
};

// A compute instance; its address is the handle given out for it.
struct ComputeInstance {
  GpuInstance* gpu_instance = nullptr;
  unsigned id = 0;
  unsigned profile_id = 0;  // = its index in kComputeProfileSlices.
  unsigned slices = 0;
  unsigned mig_index = 0;
  const Device* mig_device = nullptr;  // The MIG device it is, at mig_index of its GPU.
};

unsigned gpuIndexOf(const GpuInstance& instance) { return instance.gpu->gpu_index; }
unsigned gpuIndexOf(const ComputeInstance& instance) { return gpuIndexOf(*instance.gpu_instance); }

using Matrix = std::vector<std::vector<int>>;

// Everything one successful nvmlInit_v2 read from the script.
struct State {
  std::optional<std::string> driver_version;
  std::optional<int> cuda_version;
  std::vector<std::unique_ptr<Device>> devices;               // Owns GPUs and MIG devices alike.
  std::vector<Device*> gpus;                                  // By GPU index.
  std::unordered_map<const nvmlDevice_st*, Device*> handles;  // The live devices.
  // Own every GPU and compute instance made since init, destroyed ones too, so that no later one
  // reuses the address (and so the handle) of a destroyed one.
  std::vector<std::unique_ptr<GpuInstance>> gpu_instances;
  std::vector<std::unique_ptr<ComputeInstance>> compute_instances;
  std::unordered_map<const nvmlGpuInstance_st*, GpuInstance*> gpu_instance_handles;  // Live.
  std::unordered_map<const nvmlComputeInstance_st*, ComputeInstance*> compute_instance_handles;
  std::optional<Matrix> topology;
  std::optional<Matrix> p2p_nvlink;
  std::map<std::string, int, std::less<>> errors;

  Device* find(nvmlDevice_t handle) const { return lookUp(handles, handle.handle); }
  GpuInstance* find(nvmlGpuInstance_t handle) const {
    return lookUp(gpu_instance_handles, handle.handle);
  }
  ComputeInstance* find(nvmlComputeInstance_t handle) const {
    return lookUp(compute_instance_handles, handle.handle);
  }

  // The code the script makes `function` fail with on calls not about one GPU; 0 for none.
  nvmlReturn_t scriptedError(std::string_view function) const {
    auto it = errors.find(function);
    return it == errors.end() ? kSuccess : it->second;
  }

  // The code the script makes `function` fail with on calls about GPU `gpu_index`; 0 for none.
  nvmlReturn_t scriptedError(std::string_view function, unsigned gpu_index) const {
    auto it = errors.find(std::string(function) + "#" + std::to_string(gpu_index));
    return it == errors.end() ? scriptedError(function) : it->second;
  }

  Device& add(Device device) {
    devices.push_back(std::make_unique<Device>(std::move(device)));
    Device* added = devices.back().get();
    handles.emplace(handleOf(*added).handle, added);
    return *added;
  }

  // Handles are opaque to callers, and only ever turned back into objects through the maps.
  static nvmlDevice_t handleOf(const Device& device) {
    return nvmlDevice_t{reinterpret_cast<nvmlDevice_st*>(const_cast<Device*>(&device))};
  }
  static nvmlGpuInstance_t handleOf(const GpuInstance& instance) {
    return nvmlGpuInstance_t{
        reinterpret_cast<nvmlGpuInstance_st*>(const_cast<GpuInstance*>(&instance))};
  }
  static nvmlComputeInstance_t handleOf(const ComputeInstance& instance) {
    return nvmlComputeInstance_t{
        reinterpret_cast<nvmlComputeInstance_st*>(const_cast<ComputeInstance*>(&instance))};
  }

 private:
  template <typename Map, typename Key>
  static typename Map::mapped_type lookUp(const Map& map, Key key) {
    auto it = map.find(key);
    return it == map.end() ? nullptr : it->second;
  }
};

// Library state, guarded by g_mutex. g_state is set while initialized.
std::mutex g_mutex;
std::optional<State> g_state;
int g_init_count = 0;
// The devices of earlier inits, kept allocated so that no later Device reuses their addresses: a
// handle kept across nvmlShutdown stays unknown (2) rather than naming some new device.
std::vector<std::unique_ptr<Device>> g_retired_devices;
std::vector<std::unique_ptr<GpuInstance>> g_retired_gpu_instances;  // Likewise.
std::vector<std::unique_ptr<ComputeInstance>> g_retired_compute_instances;

// NVML's description of a return code (what nvmlErrorString says).
const char* errorString(nvmlReturn_t result) {
  switch (result) {
    case 0:
      return "Success";
    case 1:
      return "Uninitialized";
    case 2:
      return "Invalid Argument";
    case 3:
      return "Not Supported";
    case 4:
      return "Insufficient Permissions";
    case 6:
      return "Not Found";
    case 7:
      return "Insufficient Size";
    case 9:
      return "Driver Not Loaded";
    case 13:
      return "Function Not Found";
    case 15:
      return "GPU is lost";
    case 19:
      return "In use by another client";
    case 23:
      return "Insufficient Resources";
    default:
      return "Unknown Error";
  }
}

// --- MIG management, shared by the exported calls and the script's "instances". Each returns the
// NVML code the call returns, and changes nothing when that is an error.

nvmlReturn_t createGpuInstance(State& state, Device& gpu, unsigned profile_id,
                               const nvmlGpuInstancePlacement_t& placement, GpuInstance*& created) {
  if (!gpu.has_mig || gpu.mig_current == 0) {
    return kNotSupported;
  }
  const GpuInstanceProfile* profile = gpu.profileById(profile_id);
  if (profile == nullptr || placement.size != profile->memory_slices ||
      std::find(profile->starts.begin(), profile->starts.end(), placement.start) ==
          profile->starts.end()) {
    return kInvalidArgument;
  }
  const unsigned long long start = placement.start;
  const unsigned long long end = start + placement.size;
  unsigned same_profile = 0;
  for (const auto& [id, other] : gpu.gpu_instances) {
    const unsigned long long other_start = other->start;
    if (start < other_start + other->profile->memory_slices && other_start < end) {
      return kInsufficientResources;
    }
    same_profile += other->profile == profile ? 1 : 0;
  }
  if (same_profile >= profile->max_instances) {
    return kInsufficientResources;
  }
  auto instance = std::make_unique<GpuInstance>();
  instance->gpu = &gpu;
  instance->id = gpu.next_gpu_instance_id;
  instance->profile = profile;
  instance->start = placement.start;
  GpuInstance* gi = state.gpu_instances.emplace_back(std::move(instance)).get();
  state.gpu_instance_handles.emplace(State::handleOf(*gi).handle, gi);
  gpu.gpu_instances.emplace(gi->id, gi);
  ++gpu.next_gpu_instance_id;
  created = gi;
  return kSuccess;
}

// Also makes the compute instance a MIG device of the GPU.
nvmlReturn_t createComputeInstance(State& state, GpuInstance& gi, unsigned profile_id,
                                   ComputeInstance*& created) {
  if (profile_id >= std::size(kComputeProfileSlices)) {
    return kInvalidArgument;
  }
  const unsigned slices = kComputeProfileSlices[profile_id];
  unsigned long long used = slices;
  for (const auto& [id, other] : gi.compute_instances) {
    used += other->slices;
  }
  Device& gpu = *gi.gpu;
  unsigned mig_index = 0;
  while (gpu.mig_devices.contains(mig_index)) {
    ++mig_index;
  }
  if (used > gi.profile->compute_slices || mig_index >= gpu.mig_max_devices) {
    return kInsufficientResources;
  }
  const unsigned id = gi.next_compute_instance_id;
  Device device;
  device.is_mig = true;
  device.gpu_index = gpu.gpu_index;
  device.uuid = "MIG-fake-g" + std::to_string(gpu.gpu_index) + "-gi" + std::to_string(gi.id) +
                "-ci" + std::to_string(id);
  device.name = gpu.name + " MIG " + gi.profile->name;
  device.memory_mib = gi.profile->memory_mib;
  device.gpu_instance_id = gi.id;
  device.compute_instance_id = id;
  auto instance = std::make_unique<ComputeInstance>();
  instance->gpu_instance = &gi;
  instance->id = id;
  instance->profile_id = profile_id;
  instance->slices = slices;
  instance->mig_index = mig_index;
  instance->mig_device = &state.add(std::move(device));
  ComputeInstance* ci = state.compute_instances.emplace_back(std::move(instance)).get();
  gpu.mig_devices.emplace(mig_index, ci->mig_device);
  state.compute_instance_handles.emplace(State::handleOf(*ci).handle, ci);
  gi.compute_instances.emplace(id, ci);
  ++gi.next_compute_instance_id;
  created = ci;
  return kSuccess;
}

// Forgets the compute instance and its MIG device (both stay allocated, unknown).
void destroyComputeInstance(State& state, ComputeInstance& ci) {
  ci.gpu_instance->gpu->mig_devices.erase(ci.mig_index);
  state.handles.erase(State::handleOf(*ci.mig_device).handle);
  ci.gpu_instance->compute_instances.erase(ci.id);
  state.compute_instance_handles.erase(State::handleOf(ci).handle);
}

nvmlReturn_t destroyGpuInstance(State& state, GpuInstance& gi) {
  if (!gi.compute_instances.empty()) {
    return kInUse;
  }
  gi.gpu->gpu_instances.erase(gi.id);
  state.gpu_instance_handles.erase(State::handleOf(gi).handle);
  return kSuccess;
}

// --- Reading the script. Every helper throws std::runtime_error naming what is wrong.

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

std::string stringField(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    fail(where + "." + key + ": want a string");
  }
  return it->get<std::string>();
}

unsigned long long unsignedField(const json& object, const char* key, const std::string& where,
                                 std::optional<unsigned long long> fallback) {
  auto it = object.find(key);
  if (it == object.end() && fallback) {
    return *fallback;
  }
  if (it == object.end() || !it->is_number_unsigned()) {
    fail(where + "." + key + ": want a non-negative integer");
  }
  return it->get<unsigned long long>();
}

unsigned unsigned32Field(const json& object, const char* key, const std::string& where,
                         std::optional<unsigned> fallback) {
  unsigned long long value = unsignedField(object, key, where, fallback);
  if (value > 0xffffffffULL) {
    fail(where + "." + key + ": too large");
  }
  return static_cast<unsigned>(value);
}

// An array of unsigned 32-bit integers; `fallback` when absent.
std::vector<unsigned> unsignedArrayField(const json& object, const char* key,
                                         const std::string& where,
                                         std::optional<std::vector<unsigned>> fallback) {
  auto it = object.find(key);
  if (it == object.end() && fallback) {
    return *fallback;
  }
  const std::string field = where + "." + key;
  if (it == object.end() || !it->is_array()) {
    fail(field + ": want an array of non-negative integers");
  }
  std::vector<unsigned> values;
  for (const json& value : *it) {
    if (!value.is_number_unsigned() || value.get<unsigned long long>() > 0xffffffffULL) {
      fail(field + ": want an array of non-negative 32-bit integers");
    }
    values.push_back(value.get<unsigned>());
  }
  return values;
}

int intValue(const json& value, const std::string& where) {
  if (!value.is_number_integer()) {
    fail(where + ": want an integer");
  }
  return value.get<int>();
}

// An N x N matrix of integers, one row and column per GPU.
Matrix readMatrix(const json& value, size_t gpu_count, const std::string& where) {
  const std::string shape = "want " + std::to_string(gpu_count) + " x " +
                            std::to_string(gpu_count) + " integers, one row per GPU";
  if (!value.is_array() || value.size() != gpu_count) {
    fail(where + ": " + shape);
  }
  Matrix matrix;
  for (const json& row : value) {
    if (!row.is_array() || row.size() != gpu_count) {
      fail(where + ": " + shape);
    }
    std::vector<int>& out = matrix.emplace_back();
    for (const json& cell : row) {
      out.push_back(intValue(cell, where));
    }
  }
  return matrix;
}

void readMig(const json& mig, const std::string& where, Device& gpu, State& state) {
  if (!mig.is_object()) {
    fail(where + ": want an object");
  }
  gpu.has_mig = true;
  gpu.mig_current = unsigned32Field(mig, "current", where, std::nullopt);
  gpu.mig_pending = unsigned32Field(mig, "pending", where, gpu.mig_current);
  gpu.mig_max_devices = unsigned32Field(mig, "max_devices", where, 7);
  const json devices = mig.value("devices", json::array());
  if (!devices.is_array()) {
    fail(where + ".devices: want an array");
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    const json& entry = devices[i];
    const std::string entry_where = where + ".devices[" + std::to_string(i) + "]";
    if (!entry.is_object()) {
      fail(entry_where + ": want an object");
    }
    Device device;
    device.is_mig = true;
    device.gpu_index = gpu.gpu_index;
    const unsigned index = unsigned32Field(entry, "index", entry_where, std::nullopt);
    device.uuid = stringField(entry, "uuid", entry_where);
    device.name = stringField(entry, "name", entry_where);
    device.memory_mib = unsignedField(entry, "memory_mib", entry_where, 0);
    device.used_mib = unsignedField(entry, "used_mib", entry_where, 0);
    device.gpu_instance_id = unsigned32Field(entry, "gpu_instance_id", entry_where, 0);
    device.compute_instance_id = unsigned32Field(entry, "compute_instance_id", entry_where, 0);
    if (!gpu.mig_devices.emplace(index, &state.add(std::move(device))).second) {
      fail(entry_where + ".index: " + std::to_string(index) + " appears twice");
    }
  }
  const json profiles = mig.value("profiles", json::array());
  if (!profiles.is_array()) {
    fail(where + ".profiles: want an array");
  }
  for (size_t i = 0; i < profiles.size(); ++i) {
    const json& entry = profiles[i];
    const std::string entry_where = where + ".profiles[" + std::to_string(i) + "]";
    if (!entry.is_object()) {
      fail(entry_where + ": want an object");
    }
    GpuInstanceProfile profile;
    profile.index = unsigned32Field(entry, "index", entry_where, std::nullopt);
    profile.id = unsigned32Field(entry, "id", entry_where, std::nullopt);
    profile.name = stringField(entry, "name", entry_where);
    profile.compute_slices = unsigned32Field(entry, "compute_slices", entry_where, std::nullopt);
    profile.memory_slices = unsigned32Field(entry, "memory_slices", entry_where, std::nullopt);
    profile.memory_mib = unsignedField(entry, "memory_mib", entry_where, std::nullopt);
    profile.max_instances = unsigned32Field(entry, "max_instances", entry_where, std::nullopt);
    profile.starts = unsignedArrayField(entry, "starts", entry_where, std::nullopt);
    if (gpu.profileByIndex(profile.index) != nullptr) {
      fail(entry_where + ".index: " + std::to_string(profile.index) + " appears twice");
    }
    if (gpu.profileById(profile.id) != nullptr) {
      fail(entry_where + ".id: " + std::to_string(profile.id) + " appears twice");
    }
    gpu.gpu_instance_profiles.push_back(std::move(profile));
  }
}

// The script's "instances" of `gpu`, made once the GPU has its final address.
void readInstances(const json& mig, const std::string& where, Device& gpu, State& state) {
  if (!mig.contains("instances")) {
    return;
  }
  const json& instances = mig.at("instances");
  if (!instances.is_array()) {
    fail(where + ".instances: want an array");
  }
  if (!gpu.mig_devices.empty()) {
    fail(where +
         ".devices: want none with \"instances\" (their compute instances are MIG devices)");
  }
  if (!instances.empty() && gpu.mig_current == 0) {
    fail(where + ".instances: want MIG on (\"current\": 1)");
  }
  for (size_t i = 0; i < instances.size(); ++i) {
    const json& entry = instances[i];
    const std::string entry_where = where + ".instances[" + std::to_string(i) + "]";
    if (!entry.is_object()) {
      fail(entry_where + ": want an object");
    }
    const unsigned profile_id = unsigned32Field(entry, "profile_id", entry_where, std::nullopt);
    const unsigned start = unsigned32Field(entry, "start", entry_where, std::nullopt);
    const unsigned compute = unsigned32Field(entry, "compute", entry_where, 0);
    const GpuInstanceProfile* profile = gpu.profileById(profile_id);
    if (profile == nullptr) {
      fail(entry_where + ".profile_id: no profile has id " + std::to_string(profile_id));
    }
    if (compute > 1) {
      fail(entry_where + ".compute: want 0 or 1");
    }
    GpuInstance* gi = nullptr;
    const nvmlReturn_t created =
        createGpuInstance(state, gpu, profile_id, {start, profile->memory_slices}, gi);
    if (created != kSuccess) {
      fail(entry_where + ": cannot make a " + profile->name + " GPU instance at slice " +
           std::to_string(start) + ": " + errorString(created));
    }
    if (compute == 0) {
      continue;
    }
    const unsigned* whole = std::find(std::begin(kComputeProfileSlices),
                                      std::end(kComputeProfileSlices), profile->compute_slices);
    if (whole == std::end(kComputeProfileSlices)) {
      fail(entry_where + ".compute: no compute instance profile has " +
           std::to_string(profile->compute_slices) + " slices");
    }
    ComputeInstance* ci = nullptr;
    const unsigned ci_profile = static_cast<unsigned>(whole - std::begin(kComputeProfileSlices));
    if (nvmlReturn_t rc = createComputeInstance(state, *gi, ci_profile, ci); rc != kSuccess) {
      fail(entry_where + ".compute: cannot make its compute instance: " + errorString(rc));
    }
  }
}

State readScript(const json& script) {
  if (!script.is_object()) {
    fail("want a JSON object");
  }
  State state;
  if (script.contains("driver_version")) {
    state.driver_version = stringField(script, "driver_version", "script");
  }
  if (script.contains("cuda_version")) {
    state.cuda_version = intValue(script.at("cuda_version"), "script.cuda_version");
  }
  const json gpus = script.value("gpus", json::array());
  if (!gpus.is_array()) {
    fail("script.gpus: want an array");
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    const json& entry = gpus[i];
    const std::string where = "script.gpus[" + std::to_string(i) + "]";
    if (!entry.is_object()) {
      fail(where + ": want an object");
    }
    Device gpu;
    gpu.gpu_index = static_cast<unsigned>(i);
    gpu.uuid = stringField(entry, "uuid", where);
    gpu.name = stringField(entry, "name", where);
    gpu.memory_mib = unsignedField(entry, "memory_mib", where, 0);
    gpu.used_mib = unsignedField(entry, "used_mib", where, 0);
    gpu.pci_bus_id = entry.contains("pci_bus_id") ? stringField(entry, "pci_bus_id", where) : "";
    gpu.minor = unsigned32Field(entry, "minor", where, gpu.gpu_index);
    gpu.processes = unsignedArrayField(entry, "processes", where, std::vector<unsigned>{});
    if (entry.contains("mig")) {
      readMig(entry.at("mig"), where + ".mig", gpu, state);
    }
    Device& added = state.add(std::move(gpu));
    state.gpus.push_back(&added);
    if (entry.contains("mig")) {
      readInstances(entry.at("mig"), where + ".mig", added, state);
    }
  }
  if (script.contains("topology")) {
    state.topology = readMatrix(script.at("topology"), gpus.size(), "script.topology");
  }
  if (script.contains("p2p_nvlink")) {
    state.p2p_nvlink = readMatrix(script.at("p2p_nvlink"), gpus.size(), "script.p2p_nvlink");
  }
  if (script.contains("errors")) {
    const json& errors = script.at("errors");
    if (!errors.is_object()) {
      fail("script.errors: want an object");
    }
    for (const auto& [function, code] : errors.items()) {
      state.errors.emplace(function, intValue(code, "script.errors." + function));
    }
  }
  return state;
}

// The script named by FAKE_NVML_SCRIPT, or nullopt (with the reason on stderr) if there is none.
std::optional<State> loadScript() {
  const char* path = std::getenv("FAKE_NVML_SCRIPT");
  if (path == nullptr) {
    return std::nullopt;
  }
  try {
    std::ifstream in(path);
    if (!in) {
      fail("cannot open: " + std::string(std::strerror(errno)));
    }
    return readScript(json::parse(in));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake_nvml: FAKE_NVML_SCRIPT=%s: %s\n", path, e.what());
    return std::nullopt;
  }
}

// --- Helpers for the exported functions.

nvmlReturn_t copyString(const std::string& value, char* out, unsigned length) {
  if (out == nullptr) {
    return kInvalidArgument;
  }
  if (length < value.size() + 1) {
    return kInsufficientSize;
  }
  std::memcpy(out, value.c_str(), value.size() + 1);
  return kSuccess;
}

// Copies at most size - 1 characters and always terminates.
template <size_t size>
void copyTruncated(const std::string& value, char (&out)[size]) {
  const size_t n = std::min(value.size(), size - 1);
  std::memcpy(out, value.data(), n);
  out[n] = '\0';
}

bool parseHex(std::string_view text, unsigned& out) {
  if (text.empty()) {
    return false;
  }
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out, 16);
  return error == std::errc() && end == text.data() + text.size();
}

// Parses "DDDDDDDD:BB:DD.F" (hex); leaves all three 0 unless the whole id parses.
void parseBusId(std::string_view id, unsigned& domain, unsigned& bus, unsigned& device) {
  const size_t colon1 = id.find(':');
  const size_t colon2 = id.find(':', colon1 == id.npos ? id.npos : colon1 + 1);
  const size_t dot = id.find('.', colon2 == id.npos ? id.npos : colon2 + 1);
  unsigned parsed[4];
  if (dot == id.npos || !parseHex(id.substr(0, colon1), parsed[0]) ||
      !parseHex(id.substr(colon1 + 1, colon2 - colon1 - 1), parsed[1]) ||
      !parseHex(id.substr(colon2 + 1, dot - colon2 - 1), parsed[2]) ||
      !parseHex(id.substr(dot + 1), parsed[3])) {
    return;
  }
  domain = parsed[0];
  bus = parsed[1];
  device = parsed[2];
}

// Runs `body(state)` under the lock if initialized; 1 if not, 999 if it throws.
template <typename Body>
nvmlReturn_t guarded(Body&& body) noexcept {
  try {
    std::lock_guard lock(g_mutex);
    if (!g_state) {
      return kUninitialized;
    }
    return body(*g_state);
  } catch (...) {
    return kUnknown;
  }
}

// Runs a call not about one device, after its scripted error.
template <typename Body>
nvmlReturn_t systemCall(const char* function, Body&& body) noexcept {
  return guarded([&](State& state) {
    if (nvmlReturn_t error = state.scriptedError(function); error != kSuccess) {
      return error;
    }
    return body(state);
  });
}

enum class Accepts { kAny, kGpu, kMig };

// Runs a call about `handle`: its scripted error first, then 2 unless the handle is one of ours
// and of the kind the call accepts.
template <typename Body>
nvmlReturn_t deviceCall(const char* function, nvmlDevice_t handle, Accepts accepts,
                        Body&& body) noexcept {
  return guarded([&](State& state) -> nvmlReturn_t {
    Device* device = state.find(handle);
    const nvmlReturn_t error =
        device ? state.scriptedError(function, device->gpu_index) : state.scriptedError(function);
    if (error != kSuccess) {
      return error;
    }
    if (device == nullptr || (accepts == Accepts::kGpu && device->is_mig) ||
        (accepts == Accepts::kMig && !device->is_mig)) {
      return kInvalidArgument;
    }
    return body(state, *device);
  });
}

// Runs a call about two full GPUs; the scripted error is looked up for the first.
template <typename Body>
nvmlReturn_t pairCall(const char* function, nvmlDevice_t handle1, nvmlDevice_t handle2,
                      Body&& body) noexcept {
  return deviceCall(function, handle1, Accepts::kGpu, [&](State& state, const Device& device1) {
    const Device* device2 = state.find(handle2);
    if (device2 == nullptr || device2->is_mig) {
      return kInvalidArgument;
    }
    return body(state, device1, *device2);
  });
}

// Runs a call about a GPU or compute instance `handle`: its scripted error first (for the GPU it
// is on), then 2 unless the handle names a live instance.
template <typename Handle, typename Body>
nvmlReturn_t instanceCall(const char* function, Handle handle, Body&& body) noexcept {
  return guarded([&](State& state) -> nvmlReturn_t {
    auto* instance = state.find(handle);
    const nvmlReturn_t error = instance ? state.scriptedError(function, gpuIndexOf(*instance))
                                        : state.scriptedError(function);
    if (error != kSuccess) {
      return error;
    }
    if (instance == nullptr) {
      return kInvalidArgument;
    }
    return body(state, *instance);
  });
}

// NVML's list protocol: `*count` in is the room at `out`, out the number listed (or needed).
template <typename T>
nvmlReturn_t copyList(const std::vector<T>& items, T* out, unsigned int* count) {
  if (count == nullptr) {
    return kInvalidArgument;
  }
  const auto n = static_cast<unsigned>(items.size());
  if (n == 0) {
    *count = 0;
    return kSuccess;
  }
  if (out == nullptr || *count < n) {
    *count = n;
    return kInsufficientSize;
  }
  std::copy(items.begin(), items.end(), out);
  *count = n;
  return kSuccess;
}

}  // namespace

// The exported functions: C linkage, so the namespace does not change their symbol names.

FAKE_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  try {
    std::lock_guard lock(g_mutex);
    if (g_state) {
      ++g_init_count;
      return kSuccess;
    }
    std::optional<State> state = loadScript();
    if (!state) {
      return kDriverNotLoaded;
    }
    if (nvmlReturn_t error = state->scriptedError(__func__); error != kSuccess) {
      return error;
    }
    g_state = std::move(state);
    g_init_count = 1;
    return kSuccess;
  } catch (...) {
    return kUnknown;
  }
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
  const char* function = __func__;
  return guarded([&](State& state) {
    const nvmlReturn_t error = state.scriptedError(function);
    if (--g_init_count == 0) {
      std::move(state.devices.begin(), state.devices.end(), std::back_inserter(g_retired_devices));
      std::move(state.gpu_instances.begin(), state.gpu_instances.end(),
                std::back_inserter(g_retired_gpu_instances));
      std::move(state.compute_instances.begin(), state.compute_instances.end(),
                std::back_inserter(g_retired_compute_instances));
      g_state.reset();  // `state` dangles from here on.
    }
    return error;
  });
}

FAKE_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) { return errorString(result); }

FAKE_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return systemCall(__func__, [&](const State& state) {
    if (version == nullptr) {
      return kInvalidArgument;
    }
    if (!state.driver_version) {
      return kNotSupported;
    }
    return copyString(*state.driver_version, version, length);
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion) {
  return systemCall(__func__, [&](const State& state) {
    if (cudaDriverVersion == nullptr) {
      return kInvalidArgument;
    }
    if (!state.cuda_version) {
      return kNotSupported;
    }
    *cudaDriverVersion = *state.cuda_version;
    return kSuccess;
  });
}

FAKE_NVML_COUNT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  return systemCall(__func__, [&](const State& state) {
    if (deviceCount == nullptr) {
      return kInvalidArgument;
    }
    *deviceCount = static_cast<unsigned>(state.gpus.size());
    return kSuccess;
  });
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                            nvmlDevice_t* device) {
  const char* function = __func__;  // In the lambda, __func__ would be "operator()".
  return guarded([&](const State& state) {
    if (nvmlReturn_t error = state.scriptedError(function, index); error != kSuccess) {
      return error;
    }
    if (device == nullptr || index >= state.gpus.size()) {
      return kInvalidArgument;
    }
    *device = State::handleOf(*state.gpus[index]);
    return kSuccess;
  });
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                unsigned int length) {
  return deviceCall(__func__, device, Accepts::kAny, [&](const State&, const Device& d) {
    return copyString(d.uuid, uuid, length);
  });
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                unsigned int length) {
  return deviceCall(__func__, device, Accepts::kAny, [&](const State&, const Device& d) {
    return copyString(d.name, name, length);
  });
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  return deviceCall(__func__, device, Accepts::kAny, [&](const State&, const Device& d) {
    if (memory == nullptr) {
      return kInvalidArgument;
    }
    memory->total = d.memory_mib * kBytesPerMib;
    memory->used = d.used_mib * kBytesPerMib;
    memory->free = memory->total > memory->used ? memory->total - memory->used : 0;
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return deviceCall(__func__, device, Accepts::kGpu, [&](const State&, const Device& d) {
    if (pci == nullptr) {
      return kInvalidArgument;
    }
    *pci = nvmlPciInfo_t{};
    copyTruncated(d.pci_bus_id, pci->busId);
    copyTruncated(d.pci_bus_id, pci->busIdLegacy);
    parseBusId(d.pci_bus_id, pci->domain, pci->bus, pci->device);
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device,
                                                         unsigned int* minorNumber) {
  return deviceCall(__func__, device, Accepts::kGpu, [&](const State&, const Device& d) {
    if (minorNumber == nullptr) {
      return kInvalidArgument;
    }
    *minorNumber = d.minor;
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                                     unsigned int* pendingMode) {
  return deviceCall(__func__, device, Accepts::kGpu, [&](const State&, const Device& d) {
    if (currentMode == nullptr || pendingMode == nullptr) {
      return kInvalidArgument;
    }
    if (!d.has_mig) {
      return kNotSupported;
    }
    *currentMode = d.mig_current;
    *pendingMode = d.mig_pending;
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                                     nvmlReturn_t* activationStatus) {
  return deviceCall(__func__, device, Accepts::kGpu, [&](State&, Device& d) {
    if (activationStatus == nullptr || mode > 1) {
      return kInvalidArgument;
    }
    if (!d.has_mig) {
      return kNotSupported;
    }
    // The reset that makes the mode current needs an idle GPU (and, to turn it off, no GPU
    // instances): otherwise the mode stays pending and the activation says IN_USE.
    d.mig_pending = mode;
    if (!d.processes.empty() || (mode == 0 && !d.gpu_instances.empty())) {
      *activationStatus = kInUse;
      return kSuccess;
    }
    d.mig_current = mode;
    *activationStatus = kSuccess;
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                                               unsigned int* count) {
  return deviceCall(__func__, device, Accepts::kGpu, [&](const State&, const Device& d) {
    if (count == nullptr) {
      return kInvalidArgument;
    }
    if (!d.has_mig) {
      return kNotSupported;
    }
    *count = d.mig_current == 0 ? 0 : d.mig_max_devices;
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                                    unsigned int index,
                                                                    nvmlDevice_t* migDevice) {
  return deviceCall(__func__, device, Accepts::kGpu, [&](const State&, const Device& d) {
    if (migDevice == nullptr) {
      return kInvalidArgument;
    }
    if (!d.has_mig) {
      return kNotSupported;
    }
    auto it = d.mig_devices.find(index);
    if (d.mig_current == 0 || it == d.mig_devices.end()) {
      return kNotFound;
    }
    *migDevice = State::handleOf(*it->second);
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  return deviceCall(__func__, device, Accepts::kMig, [&](const State&, const Device& d) {
    if (id == nullptr) {
      return kInvalidArgument;
    }
    *id = d.gpu_instance_id;
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                                               unsigned int* id) {
  return deviceCall(__func__, device, Accepts::kMig, [&](const State&, const Device& d) {
    if (id == nullptr) {
      return kInvalidArgument;
    }
    *id = d.compute_instance_id;
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1,
                                                                    nvmlDevice_t device2,
                                                                    int* pathInfo) {
  return pairCall(__func__, device1, device2,
                  [&](const State& state, const Device& d1, const Device& d2) {
                    if (pathInfo == nullptr) {
                      return kInvalidArgument;
                    }
                    if (!state.topology) {
                      return kNotSupported;
                    }
                    *pathInfo = (*state.topology)[d1.gpu_index][d2.gpu_index];
                    return kSuccess;
                  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                                       int p2pIndex, int* p2pStatus) {
  return pairCall(__func__, device1, device2,
                  [&](const State& state, const Device& d1, const Device& d2) {
                    if (p2pStatus == nullptr) {
                      return kInvalidArgument;
                    }
                    if (p2pIndex != kP2pIndexNvlink || !state.p2p_nvlink) {
                      return kNotSupported;
                    }
                    *p2pStatus = (*state.p2p_nvlink)[d1.gpu_index][d2.gpu_index];
                    return kSuccess;
                  });
}

// --- MIG management.

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t* info) {
  return deviceCall(__func__, device, Accepts::kGpu, [&](const State&, const Device& d) {
    if (info == nullptr) {
      return kInvalidArgument;
    }
    const GpuInstanceProfile* found = d.profileByIndex(profile);
    if (found == nullptr) {
      return kNotSupported;
    }
    *info = nvmlGpuInstanceProfileInfo_t{};
    info->id = found->id;
    info->sliceCount = found->compute_slices;
    info->instanceCount = found->max_instances;
    info->memorySizeMB = found->memory_mib;
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device,
                                                          unsigned int profileId,
                                                          nvmlGpuInstance_t* gpuInstances,
                                                          unsigned int* count) {
  return deviceCall(__func__, device, Accepts::kGpu, [&](const State&, const Device& d) {
    if (count == nullptr) {
      return kInvalidArgument;
    }
    if (!d.has_mig || d.mig_current == 0) {
      return kNotSupported;
    }
    const GpuInstanceProfile* profile = d.profileById(profileId);
    if (profile == nullptr) {
      return kInvalidArgument;
    }
    std::vector<nvmlGpuInstance_t> found;
    for (const auto& [id, gi] : d.gpu_instances) {
      if (gi->profile == profile) {
        found.push_back(State::handleOf(*gi));
      }
    }
    return copyList(found, gpuInstances, count);
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* gpuInstance) {
  return deviceCall(__func__, device, Accepts::kGpu, [&](State& state, Device& d) {
    if (placement == nullptr || gpuInstance == nullptr) {
      return kInvalidArgument;
    }
    GpuInstance* created = nullptr;
    const nvmlReturn_t rc = createGpuInstance(state, d, profileId, *placement, created);
    if (rc == kSuccess) {
      *gpuInstance = State::handleOf(*created);
    }
    return rc;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance,
                                                       nvmlGpuInstanceInfo_t* info) {
  return instanceCall(__func__, gpuInstance, [&](const State&, const GpuInstance& gi) {
    if (info == nullptr) {
      return kInvalidArgument;
    }
    *info = nvmlGpuInstanceInfo_t{};
    info->device = State::handleOf(*gi.gpu);
    info->id = gi.id;
    info->profileId = gi.profile->id;
    info->placement = {gi.start, gi.profile->memory_slices};
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
  return instanceCall(__func__, gpuInstance,
                      [&](State& state, GpuInstance& gi) { return destroyGpuInstance(state, gi); });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t* info) {
  return instanceCall(__func__, gpuInstance, [&](const State&, const GpuInstance& gi) {
    if (info == nullptr || engProfile != kSharedEngines) {
      return kInvalidArgument;
    }
    if (profile >= std::size(kComputeProfileSlices) ||
        kComputeProfileSlices[profile] > gi.profile->compute_slices) {
      return kNotSupported;
    }
    const unsigned slices = kComputeProfileSlices[profile];
    *info = nvmlComputeInstanceProfileInfo_t{};
    info->id = profile;
    info->sliceCount = slices;
    info->instanceCount = gi.profile->compute_slices / slices;
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t* computeInstance) {
  return instanceCall(__func__, gpuInstance, [&](State& state, GpuInstance& gi) {
    if (computeInstance == nullptr) {
      return kInvalidArgument;
    }
    ComputeInstance* created = nullptr;
    const nvmlReturn_t rc = createComputeInstance(state, gi, profileId, created);
    if (rc == kSuccess) {
      *computeInstance = State::handleOf(*created);
    }
    return rc;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t
nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                   nvmlComputeInstance_t* computeInstances, unsigned int* count) {
  return instanceCall(__func__, gpuInstance, [&](const State&, const GpuInstance& gi) {
    if (count == nullptr || profileId >= std::size(kComputeProfileSlices)) {
      return kInvalidArgument;
    }
    std::vector<nvmlComputeInstance_t> found;
    for (const auto& [id, ci] : gi.compute_instances) {
      if (ci->profile_id == profileId) {
        found.push_back(State::handleOf(*ci));
      }
    }
    return copyList(found, computeInstances, count);
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
  return instanceCall(__func__, computeInstance, [&](State& state, ComputeInstance& ci) {
    destroyComputeInstance(state, ci);
    return kSuccess;
  });
}

FAKE_NVML_OPTIONAL nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                        unsigned int* infoCount,
                                                                        nvmlProcessInfo_t* infos) {
  return deviceCall(__func__, device, Accepts::kGpu, [&](const State&, const Device& d) {
    std::vector<nvmlProcessInfo_t> found;
    for (unsigned pid : d.processes) {
      found.push_back({pid, 0, kNoInstance, kNoInstance});
    }
    return copyList(found, infos, infoCount);
  });
}

}  // namespace tessera::fake_nvml
