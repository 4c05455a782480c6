// The custom-call targets of jax's Python host callbacks. myplugin serves
// them under jax's own names, because XLA's Shardy recognises a callback
// only by its target name. A program that calls one names callables of the
// process that compiled it, so it is never serialized (executable.cc).
// jax_plugin reads the names through the bound host_callback_targets().
#pragma once

#include <string_view>

namespace myplugin {

inline constexpr std::string_view kHostCallbackTarget = "xla_ffi_python_cpu_callback";
inline constexpr std::string_view kCudaHostCallbackTarget = "xla_ffi_python_gpu_callback";
// jax's partitioned=True form, which myplugin never emits but a program
// lowered elsewhere may carry.
inline constexpr std::string_view kProcessLocalTargets[] = {
    kHostCallbackTarget, kCudaHostCallbackTarget, "xla_ffi_partitioned_python_cpu_callback",
    "xla_ffi_partitioned_python_gpu_callback"};

}  // namespace myplugin
