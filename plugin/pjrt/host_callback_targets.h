// The custom-call targets of jax's Python host callbacks. myplugin serves
// them under jax's own names, because XLA's Shardy recognises a callback
// only by its target name. A program that calls one names callables of the
// process that compiled it, so it is never serialized (executable.cc).
// jax_plugin reads the names through the bound host_callback_targets().
//
// One name on both engines, jax's CPU one: the CUDA engine's handler
// registry is shared by every client of that library in the process, and
// jax's own CUDA plugin registers its handler under the GPU name there
// (jax_plugins/xla_cuda13 initialize()); a second registration of that name
// fails, and took down the rest of jax's CUDA plugin initialization when
// both were installed (seen on an H200, 2026-11-26). Shardy accepts either.
#pragma once

#include <string_view>

#include "spmd/jaxlib_partitioned_targets.h"

namespace myplugin {

inline constexpr std::string_view kHostCallbackTarget = "xla_ffi_python_cpu_callback";
// Every name jax gives a callback: a program lowered elsewhere may carry
// the GPU ones; myplugin emits the partitioned CPU one in a partitioned jit
// (jaxlib partitions it: spmd/jaxlib_partitioned_targets.h).
inline constexpr std::string_view kProcessLocalTargets[] = {
    kHostCallbackTarget, "xla_ffi_python_gpu_callback", spmd::kPartitionedHostCallbackTarget,
    "xla_ffi_partitioned_python_gpu_callback"};

}  // namespace myplugin
