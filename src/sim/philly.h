// Replaying the Microsoft Philly job table (the Pollux artifact's per-job CSV:
// timestamp,duration,num_gpus,gpu_time,cluster) through the fair-share scheduler.
//
// Each `cluster` value (a hashed virtual cluster) becomes a tenant queue under one organisation.
// Quotas are proportional to each tenant's GPU-time in the trace (largest remainder, whole GPUs)
// unless a quota file gives them (CSV: queue,gpus). A job of n GPUs becomes a gang of
// ceil(n/8) tasks of ceil(n/tasks) GPUs, all needed at once; jobs are preemptible and restart
// from zero when evicted. Philly has no CPU or memory columns: tasks ask for none.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "sim/scenario.h"

namespace tessera::sim {

struct PhillyJob {
  int64_t submit_s = 0;  // Seconds since the first submission.
  int64_t duration_s = 0;
  int gpus = 0;
  std::string tenant;
};

// Errors name the file and line.
core::Result<std::vector<PhillyJob>> readPhillyTrace(const std::string& path);

struct PhillyOptions {
  std::string cluster = "dgx-h100:250";  // PROFILE:COUNT, or NODESxGPUS (e.g. 250x8, H100).
  std::string quota_file;                // Optional queue,gpus CSV.
  bool fair_share = true;
  size_t max_jobs = 0;  // 0 = all.
  core::Duration min_runtime = std::chrono::seconds(300);
  core::Duration checkpoint_every{0};  // 0: an evicted job restarts from zero.
  sched::ReclaimTo reclaim_to = sched::ReclaimTo::kFairShare;
  core::Duration max_unsaved_gpu_time = std::chrono::hours(1);  // Per eviction (GPU-time).
  core::Duration reclaim_patience{0};
};

core::Result<Scenario> phillyScenario(const std::vector<PhillyJob>& jobs,
                                      const PhillyOptions& options);

}  // namespace tessera::sim
