// NVIDIA GPUs that myplugin compiles for without one (compile-only
// topologies), and what XLA's CUDA engine needs to hear about them.
//
// The CUDA engine's PJRT_TopologyDescription_Create takes the target as a
// `target_config` option: an stream_executor GpuTargetConfigProto in
// protobuf *text* format (its parser is TextFormat; unknown fields fail).
// Without one it looks for a GPU. This is the one place where the named
// GPUs' figures live; tests/cpp/gpu_target_unit_tests.cc pins them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace myplugin {

struct GpuSpec {
  std::string name;         // what users pass: gpu="h100"
  std::string device_kind;  // the name CUDA reports, which the engine uses as the device kind
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int fp32_cores_per_sm = 0;
  int64_t memory_bytes = 0;
  double memory_bandwidth_bytes_per_s = 0;
  int64_t l2_cache_bytes = 0;
  double boost_clock_ghz = 0;
  int64_t shared_memory_per_block = 0;        // without opt-in
  int64_t shared_memory_per_block_optin = 0;  // the most a kernel may ask for
  int64_t shared_memory_per_sm = 0;
  int registers_per_sm = 0;
  int registers_per_block = 0;
  int threads_per_block = 0;
  int threads_per_sm = 0;
  int threads_per_warp = 0;
  int64_t block_dim_x = 0, block_dim_y = 0, block_dim_z = 0;  // grid size limits
};

// The named GPUs, in a fixed order.
const std::vector<GpuSpec>& KnownGpus();
// The spec called `name` (case-insensitive), or an error listing the known ones.
StatusOr<GpuSpec> FindGpu(const std::string& name);

// The GpuTargetConfigProto text for `spec` (CUDA runtime `cuda_major`.0).
std::string TargetConfigText(const GpuSpec& spec, int cuda_major);

// What a compiled program is for: the GPU (its CUDA name and compute
// capability) and the topology. It travels in serialized executables and is
// checked when one is loaded.
struct GpuTargetId {
  std::string device_kind;
  int cc_major = 0, cc_minor = 0;
  std::string ToString() const;  // "NVIDIA H100 80GB HBM3 (sm_90)"
  bool operator==(const GpuTargetId& o) const {
    return device_kind == o.device_kind && cc_major == o.cc_major && cc_minor == o.cc_minor;
  }
};

// The GPU that a user's target_config text describes: its
// device_description_str and cuda_compute_capability, which must be there.
StatusOr<GpuTargetId> TargetIdOfConfig(const std::string& target_config_text);

// "<slices>x<hosts>x<GPUs per host>", every number positive.
struct GpuTopologyShape {
  int slices = 0, hosts = 0, gpus_per_host = 0;
  int processes() const { return slices * hosts; }
  int devices() const { return processes() * gpus_per_host; }
  std::string ToString() const;
};
StatusOr<GpuTopologyShape> ParseGpuTopology(const std::string& text);

}  // namespace myplugin
