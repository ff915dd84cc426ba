#include "agent/mig_manager.h"

#include <string.h>

#include <algorithm>
#include <map>
#include <set>

#include "agent/nvml_library.h"
#include "agent/sim_discovery.h"

namespace tessera::agent {
namespace {

constexpr unsigned kSharedEngines = 0;  // NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED.
constexpr unsigned kMaxInstances = 8;   // GPU or compute instances of one profile on a GPU.
constexpr int kComputeProfileCount = 7;

// The model's entry, and the layout checked against its MIG rules.
core::Result<const model::GpuModelInfo*> checkLayout(const model::GpuCatalogue& catalogue,
                                                     const std::string& name,
                                                     const std::vector<model::MigInstance>& layout,
                                                     int gpu) {
  const std::optional<model::GpuModelId> id = catalogue.find(name);
  if (!id || !catalogue.model(*id).supportsMig()) {
    return core::invalidArgument("mig: GPU " + std::to_string(gpu) + ": '" + name +
                                 "' has no MIG profiles");
  }
  const model::GpuModelInfo& info = catalogue.model(*id);
  if (core::Status s = model::validateMigLayout(info, layout); !s.isOk()) {
    return s.withContext("mig: GPU " + std::to_string(gpu));
  }
  return &info;
}

// The compute instances of GPU instance `gi`, over every compute profile.
core::Result<std::vector<NvmlComputeInstance>> computeInstances(const NvmlLibrary& lib,
                                                                NvmlGpuInstance gi,
                                                                const std::string& where) {
  std::vector<NvmlComputeInstance> out;
  for (int c = 0; c < kComputeProfileCount; ++c) {
    NvmlComputeInstanceProfileInfo ci{};
    if (lib.ci_profile(gi, static_cast<unsigned>(c), kSharedEngines, &ci) != kNvmlSuccess) {
      continue;  // A profile bigger than the instance.
    }
    NvmlComputeInstance cis[kMaxInstances] = {};
    unsigned n = kMaxInstances;
    if (NvmlReturn rc = lib.ci_list(gi, ci.id, cis, &n); rc != kNvmlSuccess) {
      return core::unavailable(where + lib.explain("nvmlGpuInstanceGetComputeInstances", rc));
    }
    out.insert(out.end(), cis, cis + std::min(n, kMaxInstances));
  }
  return out;
}

// Destroys GPU instance `gi`, its compute instances first; `what` names it in errors.
core::Status destroyGpuInstance(const NvmlLibrary& lib, NvmlGpuInstance gi,
                                const std::string& where, const std::string& what) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<NvmlComputeInstance> cis, computeInstances(lib, gi, where));
  for (NvmlComputeInstance ci : cis) {
    if (NvmlReturn rc = lib.ci_destroy(ci); rc != kNvmlSuccess) {
      return core::unavailable(where + lib.explain("nvmlComputeInstanceDestroy", rc));
    }
  }
  if (NvmlReturn rc = lib.gi_destroy(gi); rc != kNvmlSuccess) {
    return core::unavailable(where + lib.explain("nvmlGpuInstanceDestroy", rc) + what +
                             (rc == kNvmlInUse ? " (a process still uses it)" : ""));
  }
  return core::Status::ok();
}

}  // namespace

int nvmlGpuInstanceProfileIndex(int catalogue_profile) {
  static constexpr int kIndex[] = {0, 7, 9, 1, 2, 3, 4};
  return catalogue_profile >= 0 && catalogue_profile < 7 ? kIndex[catalogue_profile] : -1;
}

int nvmlComputeInstanceProfileIndex(int compute_slices) {
  switch (compute_slices) {
    case 1:
      return 0;
    case 2:
      return 1;
    case 3:
      return 2;
    case 4:
      return 3;
    case 7:
      return 4;
    case 8:
      return 5;
    case 6:
      return 6;
    default:
      return -1;
  }
}

NvmlMigManager::NvmlMigManager(std::string library, const model::GpuCatalogue& catalogue)
    : library_(std::move(library)), catalogue_(catalogue) {}

NvmlMigManager::~NvmlMigManager() = default;

core::Result<NvmlDevice> NvmlMigManager::device(int gpu) {
  if (lib_ == nullptr) {
    TESSERA_ASSIGN_OR_RETURN(lib_, NvmlLibrary::open(library_));
  }
  const NvmlLibrary& lib = *lib_;
  if (!lib.hasMigManagement() || lib.mig_mode == nullptr) {
    return core::failedPrecondition("nvml: " + library_ +
                                    " cannot manage MIG instances (a driver older than R470?)");
  }
  if (session_ == nullptr) {  // Kept for the manager's life, as an agent keeps NVML open.
    TESSERA_ASSIGN_OR_RETURN(session_, NvmlSession::begin(lib));
  }
  NvmlDevice dev{};
  if (NvmlReturn rc = lib.by_index(static_cast<unsigned>(gpu), &dev); rc != kNvmlSuccess) {
    return core::unavailable("nvml: GPU " + std::to_string(gpu) + ": " +
                             lib.explain("nvmlDeviceGetHandleByIndex_v2", rc));
  }
  return dev;
}

core::Status NvmlMigManager::setMigMode(int gpu, const std::string& model, bool on) {
  TESSERA_ASSIGN_OR_RETURN(NvmlDevice dev, device(gpu));
  const NvmlLibrary& lib = *lib_;
  const std::string where = "nvml: GPU " + std::to_string(gpu) + ": ";
  const char* const mode = on ? "on" : "off";
  unsigned current = 0;
  unsigned pending = 0;
  if (NvmlReturn rc = lib.mig_mode(dev, &current, &pending); rc != kNvmlSuccess) {
    return core::failedPrecondition(where + lib.explain("nvmlDeviceGetMigMode", rc));
  }
  if (current == (on ? 1U : 0U)) {
    return core::Status::ok();
  }
  if (lib.set_mig_mode == nullptr) {
    return core::failedPrecondition(where + "cannot turn MIG mode " + mode + ": " + library_ +
                                    " lacks nvmlDeviceSetMigMode");
  }
  // The reset needs an idle GPU: say who holds it rather than leave the mode pending.
  unsigned processes = 0;
  if (NvmlReturn rc = lib.processes(dev, &processes, nullptr);
      rc != kNvmlSuccess && rc != kNvmlInsufficientSize) {
    return core::unavailable(where + lib.explain("nvmlDeviceGetComputeRunningProcesses_v3", rc));
  }
  if (processes > 0) {
    return core::failedPrecondition(
        where + "MIG mode stays " + (on ? "off" : "on") + ": " + std::to_string(processes) +
        " process(es) use the GPU, and turning it " + mode + " resets the GPU");
  }
  if (!on) {
    // Its instances go first: MIG mode cannot go off while one exists.
    const model::GpuModelInfo* info = nullptr;
    if (auto id = catalogue_.find(model)) {
      info = &catalogue_.model(*id);
    }
    if (info != nullptr) {
      for (size_t p = 0; p < info->mig_profiles.size(); ++p) {
        NvmlGpuInstanceProfileInfo pi{};
        if (lib.gi_profile(dev,
                           static_cast<unsigned>(nvmlGpuInstanceProfileIndex(static_cast<int>(p))),
                           &pi) != kNvmlSuccess) {
          continue;
        }
        NvmlGpuInstance gis[kMaxInstances] = {};
        unsigned n = kMaxInstances;
        if (NvmlReturn rc = lib.gi_list(dev, pi.id, gis, &n); rc != kNvmlSuccess) {
          return core::unavailable(where + lib.explain("nvmlDeviceGetGpuInstances", rc));
        }
        for (unsigned i = 0; i < n && i < kMaxInstances; ++i) {
          TESSERA_RETURN_IF_ERROR(
              destroyGpuInstance(lib, gis[i], where, " for " + info->mig_profiles[p].name));
        }
      }
    }
  }
  NvmlReturn activation = kNvmlSuccess;
  if (NvmlReturn rc = lib.set_mig_mode(dev, on ? 1 : 0, &activation); rc != kNvmlSuccess) {
    return core::failedPrecondition(where + lib.explain("nvmlDeviceSetMigMode", rc));
  }
  if (activation != kNvmlSuccess) {
    return core::failedPrecondition(where + "MIG mode " + mode + " is pending: the reset failed, " +
                                    lib.explain("nvmlDeviceSetMigMode (activation)", activation));
  }
  if (NvmlReturn rc = lib.mig_mode(dev, &current, &pending); rc != kNvmlSuccess) {
    return core::failedPrecondition(where + lib.explain("nvmlDeviceGetMigMode", rc));
  }
  if (current != (on ? 1U : 0U)) {
    return core::failedPrecondition(where + "MIG mode " + mode + " is still pending a GPU reset");
  }
  return core::Status::ok();
}

core::Result<MigUuids> NvmlMigManager::apply(int gpu, const std::string& model,
                                             const std::vector<model::MigInstance>& layout) {
  TESSERA_ASSIGN_OR_RETURN(const model::GpuModelInfo* info,
                           checkLayout(catalogue_, model, layout, gpu));
  TESSERA_ASSIGN_OR_RETURN(NvmlDevice dev, device(gpu));
  const NvmlLibrary& lib = *lib_;
  const std::string where = "nvml: GPU " + std::to_string(gpu) + ": ";
  unsigned current = 0;
  unsigned pending = 0;
  if (NvmlReturn rc = lib.mig_mode(dev, &current, &pending); rc != kNvmlSuccess) {
    return core::failedPrecondition(where + lib.explain("nvmlDeviceGetMigMode", rc));
  }
  if (current != 1) {
    return core::failedPrecondition(where + "MIG mode is off; turn it on first (nvidia-smi -i " +
                                    std::to_string(gpu) + " -mig 1, which resets the GPU)");
  }
  // What is there now: GPU instances by (catalogue profile, start).
  struct Existing {
    model::MigInstance instance;
    NvmlGpuInstance handle;
  };
  std::vector<Existing> existing;
  std::vector<unsigned> profile_ids(info->mig_profiles.size(), 0);
  std::vector<bool> supported(info->mig_profiles.size(), false);
  for (size_t p = 0; p < info->mig_profiles.size(); ++p) {
    NvmlGpuInstanceProfileInfo pi{};
    const int index = nvmlGpuInstanceProfileIndex(static_cast<int>(p));
    const NvmlReturn prc = lib.gi_profile(dev, static_cast<unsigned>(index), &pi);
    if (prc == kNvmlNotSupported) {
      continue;  // This GPU does not offer it: there are none to find, and none may be made.
    }
    if (prc != kNvmlSuccess) {
      return core::unavailable(where + lib.explain("nvmlDeviceGetGpuInstanceProfileInfo", prc) +
                               " for " + info->mig_profiles[p].name);
    }
    supported[p] = true;
    profile_ids[p] = pi.id;
    NvmlGpuInstance gis[kMaxInstances] = {};
    unsigned n = kMaxInstances;
    if (NvmlReturn rc = lib.gi_list(dev, pi.id, gis, &n); rc != kNvmlSuccess) {
      return core::unavailable(where + lib.explain("nvmlDeviceGetGpuInstances", rc));
    }
    for (unsigned i = 0; i < n && i < kMaxInstances; ++i) {
      NvmlGpuInstanceInfo gi{};
      if (NvmlReturn rc = lib.gi_info(gis[i], &gi); rc != kNvmlSuccess) {
        return core::unavailable(where + lib.explain("nvmlGpuInstanceGetInfo", rc));
      }
      existing.push_back({{static_cast<int>(p), static_cast<int>(gi.placement.start)}, gis[i]});
    }
  }
  const std::set<model::MigInstance> wanted(layout.begin(), layout.end());
  // Destroy what is in the way of the layout (compute instances first). An instance the layout
  // does not name but whose slices it leaves alone stays: one a task left, ready for the next
  // task of its profile with no re-layout (the scheduler prefers it: docs/agent.md "MIG").
  unsigned wanted_slices = 0;
  for (const model::MigInstance& m : wanted) {
    wanted_slices |= model::migSlices(*info, m.profile, m.start);
  }
  std::set<model::MigInstance> kept;
  std::vector<const Existing*> idle;  // Out of the layout's way: they stay.
  for (const Existing& e : existing) {
    if (wanted.contains(e.instance)) {
      kept.insert(e.instance);
      continue;
    }
    if ((model::migSlices(*info, e.instance.profile, e.instance.start) & wanted_slices) == 0) {
      idle.push_back(&e);
      continue;
    }
    TESSERA_RETURN_IF_ERROR(destroyGpuInstance(
        lib, e.handle, where,
        " for " + info->mig_profiles[static_cast<size_t>(e.instance.profile)].name + " at slice " +
            std::to_string(e.instance.start)));
  }
  // A kept instance without a compute instance gets one, like a new one.
  auto add_compute = [&](NvmlGpuInstance gi, const model::MigProfile& profile) -> core::Status {
    NvmlComputeInstanceProfileInfo ci{};
    const int c = nvmlComputeInstanceProfileIndex(profile.compute_slices);
    if (NvmlReturn rc = lib.ci_profile(gi, static_cast<unsigned>(c), kSharedEngines, &ci);
        rc != kNvmlSuccess) {
      return core::unavailable(where +
                               lib.explain("nvmlGpuInstanceGetComputeInstanceProfileInfo", rc) +
                               " for " + profile.name);
    }
    NvmlComputeInstance handle{};
    if (NvmlReturn rc = lib.ci_create(gi, ci.id, &handle); rc != kNvmlSuccess) {
      return core::unavailable(where + lib.explain("nvmlGpuInstanceCreateComputeInstance", rc) +
                               " for " + profile.name);
    }
    return core::Status::ok();
  };
  // GPU instance id -> instance, to name each MIG device at the end.
  std::map<unsigned, model::MigInstance> by_id;
  auto remember = [&](NvmlGpuInstance gi, const model::MigInstance& m) -> core::Status {
    NvmlGpuInstanceInfo info_out{};
    if (NvmlReturn rc = lib.gi_info(gi, &info_out); rc != kNvmlSuccess) {
      return core::unavailable(where + lib.explain("nvmlGpuInstanceGetInfo", rc));
    }
    by_id[info_out.id] = m;
    return core::Status::ok();
  };
  for (const Existing& e : existing) {
    if (!kept.contains(e.instance)) {
      continue;
    }
    TESSERA_RETURN_IF_ERROR(remember(e.handle, e.instance));
    TESSERA_ASSIGN_OR_RETURN(std::vector<NvmlComputeInstance> cis,
                             computeInstances(lib, e.handle, where));
    if (cis.empty()) {
      TESSERA_RETURN_IF_ERROR(
          add_compute(e.handle, info->mig_profiles[static_cast<size_t>(e.instance.profile)]));
    }
  }
  for (const Existing* e : idle) {
    TESSERA_RETURN_IF_ERROR(remember(e->handle, e->instance));
  }
  for (const model::MigInstance& m : wanted) {
    if (kept.contains(m)) {
      continue;
    }
    const model::MigProfile& profile = info->mig_profiles[static_cast<size_t>(m.profile)];
    if (!supported[static_cast<size_t>(m.profile)]) {
      return core::failedPrecondition(where + "the GPU does not offer MIG profile " + profile.name);
    }
    const NvmlGpuInstancePlacement placement{static_cast<unsigned>(m.start),
                                             static_cast<unsigned>(profile.memory_slices)};
    NvmlGpuInstance gi{};
    if (NvmlReturn rc =
            lib.gi_create(dev, profile_ids[static_cast<size_t>(m.profile)], &placement, &gi);
        rc != kNvmlSuccess) {
      return core::unavailable(where + lib.explain("nvmlDeviceCreateGpuInstanceWithPlacement", rc) +
                               " for " + profile.name + " at slice " + std::to_string(m.start));
    }
    TESSERA_RETURN_IF_ERROR(add_compute(gi, profile));
    TESSERA_RETURN_IF_ERROR(remember(gi, m));
  }
  // Each instance's MIG device (one compute instance each), by its GPU instance id.
  if (lib.max_mig == nullptr || lib.mig_by_index == nullptr || lib.gi_id == nullptr) {
    return core::failedPrecondition("nvml: " + library_ + " cannot list MIG devices");
  }
  unsigned max_devices = 0;
  if (NvmlReturn rc = lib.max_mig(dev, &max_devices); rc != kNvmlSuccess) {
    return core::unavailable(where + lib.explain("nvmlDeviceGetMaxMigDeviceCount", rc));
  }
  MigUuids uuids;
  for (unsigned i = 0; i < max_devices; ++i) {
    NvmlDevice mig{};
    if (lib.mig_by_index(dev, i, &mig) != kNvmlSuccess) {
      continue;  // No MIG device at this index.
    }
    unsigned id = 0;
    if (NvmlReturn rc = lib.gi_id(mig, &id); rc != kNvmlSuccess) {
      return core::unavailable(where + lib.explain("nvmlDeviceGetGpuInstanceId", rc));
    }
    char buf[96] = {};
    if (NvmlReturn rc = lib.uuid(mig, buf, sizeof buf); rc != kNvmlSuccess) {
      return core::unavailable(where + lib.explain("nvmlDeviceGetUUID", rc));
    }
    if (auto it = by_id.find(id); it != by_id.end()) {
      MigDevice& d = uuids[it->second];
      d.index = static_cast<int>(i);
      d.uuid = std::string(buf, strnlen(buf, sizeof buf));
      d.profile = info->mig_profiles[static_cast<size_t>(it->second.profile)].name;
      d.gpu_instance_id = static_cast<int>(id);
      unsigned ci = 0;
      if (lib.ci_id != nullptr && lib.ci_id(mig, &ci) == kNvmlSuccess) {
        d.compute_instance_id = static_cast<int>(ci);
      }
    }
  }
  for (const model::MigInstance& m : wanted) {
    if (!uuids.contains(m)) {
      return core::unavailable(where + "no MIG device for " +
                               info->mig_profiles[static_cast<size_t>(m.profile)].name +
                               " at slice " + std::to_string(m.start) + " after it was made");
    }
  }
  for (const Existing* e : idle) {
    uuids.try_emplace(e->instance);  // Listed even without a MIG device (no compute instance).
  }
  return uuids;
}

core::Result<MigUuids> RecordingMigManager::apply(int gpu, const std::string& model,
                                                  const std::vector<model::MigInstance>& layout) {
  TESSERA_ASSIGN_OR_RETURN(const model::GpuModelInfo* info,
                           checkLayout(catalogue_, model, layout, gpu));
  std::vector<model::MigInstance> sorted = layout;
  {
    // As on a real GPU: what was there and is out of the new instances' way stays.
    unsigned wanted = 0;
    for (const model::MigInstance& m : layout) {
      wanted |= model::migSlices(*info, m.profile, m.start);
    }
    std::lock_guard lock(mu_);
    for (const model::MigInstance& m : layouts_[gpu]) {
      if ((model::migSlices(*info, m.profile, m.start) & wanted) == 0) {
        sorted.push_back(m);
      }
    }
  }
  std::sort(sorted.begin(), sorted.end());
  MigUuids uuids;
  for (const model::MigInstance& m : sorted) {
    MigDevice& d = uuids[m];
    d.profile =
        catalogue_.model(*catalogue_.find(model)).mig_profiles[static_cast<size_t>(m.profile)].name;
    // Stable like a simulated GPU's UUID, named by the node, the GPU and the instance.
    d.uuid = "MIG-" +
             simGpuUuid(node_ + "/mig/" + std::to_string(m.profile) + "@" + std::to_string(m.start),
                        gpu)
                 .substr(4);  // Past "GPU-".
  }
  std::lock_guard lock(mu_);
  layouts_[gpu] = std::move(sorted);
  return uuids;
}

core::Status RecordingMigManager::setMigMode(int gpu, const std::string& /*model*/, bool on) {
  std::lock_guard lock(mu_);
  if (auto it = modes_.find(gpu); it != modes_.end() && it->second == on) {
    return core::Status::ok();
  }
  modes_[gpu] = on;
  ++mode_changes_;
  if (!on) {
    layouts_.erase(gpu);
  }
  return core::Status::ok();
}

std::map<int, bool> RecordingMigManager::modes() const {
  std::lock_guard lock(mu_);
  return modes_;
}

int RecordingMigManager::modeChanges() const {
  std::lock_guard lock(mu_);
  return mode_changes_;
}

std::map<int, std::vector<model::MigInstance>> RecordingMigManager::layouts() const {
  std::lock_guard lock(mu_);
  return layouts_;
}

}  // namespace tessera::agent
