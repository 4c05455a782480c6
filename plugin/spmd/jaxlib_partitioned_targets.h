// Custom calls whose SPMD partitioning rules jax registers only in jaxlib's
// own XLA: jax.experimental.custom_partitioning (its rules are Python
// callables, looked up by the key in the call's backend_config) and
// jax.debug.inspect_array_sharding; partitioned=True host callbacks; and
// every target registered as batch partitionable (jax's LAPACK calls, a
// program's own register_ffi_target_as_batch_partitionable), whose rule
// runs the call once per shard of its batch. jax offers them to a C API
// plugin through the PJRT custom-partitioner extension, which the CPU
// engine (the shadow that partitions) lacks, so the engine's partitioner
// knows none of them: it all-gathered a batch sharded over 8 devices and
// ran the whole call on each. A program that holds one is partitioned by
// jaxlib's XLA instead (jax_plugin/spmd/compile_hooks.py), then rewritten
// and compiled like a multi-process program (docs/architecture.md,
// "Custom partitioning"). jax_plugin reads the names through the bound
// jaxlib_partitioned_targets(); the state lives in the runtime library,
// which the plugin and the Python module share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace myplugin::spmd {

// jax's name for a partitioned=True host callback: jaxlib's partitioner
// keeps the call, its name and attributes, and runs it on every shard.
// myplugin's handler serves it under this name too (pjrt/host_callback_targets.h).
inline constexpr std::string_view kPartitionedHostCallbackTarget = "xla_ffi_partitioned_python_cpu_callback";
inline constexpr std::string_view kJaxlibPartitionedTargets[] = {"CustomSPMDPartitioning", "InspectSharding",
                                                                 kPartitionedHostCallbackTarget};

// A target jax registered as batch partitionable (PJRT_Register_Batch_Partitionable,
// pjrt/engine_extensions.cc). Thread-safe; a name given twice is kept once.
void AddBatchPartitionableTarget(const std::string& name);

// The fixed targets above, then the batch-partitionable ones registered so far.
std::vector<std::string> JaxlibPartitionedTargets();

// Whether a program (StableHLO text or bytecode, or an HloModuleProto: each
// keeps target names as plain strings) calls one of them.
bool CallsJaxlibPartitionedTarget(std::string_view code);

}  // namespace myplugin::spmd
