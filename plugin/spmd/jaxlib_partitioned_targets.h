// Custom calls whose SPMD partitioning rules jax registers only in jaxlib's
// own XLA: jax.experimental.custom_partitioning (its rules are Python
// callables, looked up by the key in the call's backend_config) and
// jax.debug.inspect_array_sharding; partitioned=True host callbacks. jax offers them to a C API plugin
// through the PJRT custom-partitioner extension, which the CPU engine
// lacks, so the engine's partitioner knows neither. A program that holds
// one is partitioned by jaxlib's XLA instead (jax_plugin/spmd/
// compile_hooks.py), then rewritten and compiled like a multi-process
// program (docs/architecture.md, "Custom partitioning").
// jax_plugin reads the names through the bound jaxlib_partitioned_targets().
#pragma once

#include <string_view>

namespace myplugin::spmd {

// jax's name for a partitioned=True host callback: jaxlib's partitioner
// keeps the call, its name and attributes, and runs it on every shard.
// myplugin's handler serves it under this name too (pjrt/host_callback_targets.h).
inline constexpr std::string_view kPartitionedHostCallbackTarget = "xla_ffi_partitioned_python_cpu_callback";
inline constexpr std::string_view kJaxlibPartitionedTargets[] = {"CustomSPMDPartitioning", "InspectSharding",
                                                                 kPartitionedHostCallbackTarget};

// Whether a program (StableHLO text or bytecode, or an HloModuleProto: each
// keeps target names as plain strings) calls one of them.
inline bool CallsJaxlibPartitionedTarget(std::string_view code) {
  for (std::string_view target : kJaxlibPartitionedTargets) {
    if (code.find(target) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace myplugin::spmd
