// What a compile-only GPU topology is asked to be: the keyword options of
// jax.experimental.topologies.get_topology_desc(platform="myplugin", ...),
// which jax hands to PJRT_TopologyDescription_Create as named values.
#pragma once

#include <string>

#include "common/status.h"
#include "engine/gpu_target.h"
#include "pjrt_c_api.h"

namespace myplugin {

struct GpuTargetOptions {
  GpuTopologyShape shape;
  GpuTargetId id;
  std::string target_config;  // GpuTargetConfigProto text, as the CUDA engine reads it
};

// topology="<slices>x<hosts>x<GPUs per host>" (or the positional topology
// name in that form), and either gpu="<name>" (engine/gpu_target.h) or
// target_config="<GpuTargetConfigProto text>", as jax's CUDA plugin takes
// it. `cuda_major` is the CUDA of the engine that will compile (its
// runtime_version). Unknown options, wrong types, both or neither of gpu
// and target_config are INVALID_ARGUMENT errors that say what is accepted.
StatusOr<GpuTargetOptions> ParseGpuTargetOptions(const std::string& topology_name, const PJRT_NamedValue* values,
                                                 size_t count, int cuda_major);

}  // namespace myplugin
