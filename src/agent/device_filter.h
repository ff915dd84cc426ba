// cgroup v2's device rule: an eBPF program (BPF_PROG_TYPE_CGROUP_DEVICE) attached to a task's
// group that allows only the task's own character devices and the harmless ones every process
// needs. v2 has no devices.allow file; runc and systemd do the same.
//
//   TESSERA_RETURN_IF_ERROR(attachDeviceFilter("/sys/fs/cgroup/tessera/t-1", {{195, 0}}));
#pragma once

#include <string>
#include <vector>

#include "agent/cgroups.h"
#include "core/status.h"

namespace tessera::agent {

// Devices every task may open: null, zero, full, random, urandom, tty, ptmx, and the ptys
// (major 136, any minor: `minor_any`).
struct AllowedDevice {
  unsigned major = 0;
  unsigned minor = 0;
  bool minor_any = false;
};
const std::vector<AllowedDevice>& basicDevices();

// Loads the filter for `allowed` (plus basicDevices()) and attaches it to the cgroup v2
// directory `dir`. The attachment lives as long as the group.
core::Status attachDeviceFilter(const std::string& dir, const std::vector<DeviceRule>& allowed);

// Whether this process may load such a program at all (root, a kernel with cgroup BPF); the
// error says why not.
core::Status probeDeviceFilter();

}  // namespace tessera::agent
