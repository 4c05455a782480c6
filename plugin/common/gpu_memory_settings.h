// jax's GPU memory settings, read as jax's own CUDA backend reads them
// (jaxlib's xla_client.generate_pjrt_gpu_plugin_options: the same
// variables, defaults and meaning) and given to the CUDA engine as its
// client's create options. jax hands them only to its own CUDA plugin, so
// without this myplugin's CUDA engine would take the engine's defaults
// (75 % of the GPU, preallocated) whatever the user set.
//
// Read on every engine, so that a malformed value is an error at start
// naming the variable; only the CUDA engine is given them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace myplugin {

// XLA_PYTHON_CLIENT_ALLOCATOR when unset: the engine's own choice (BFC).
inline constexpr const char* kDefaultGpuAllocator = "default";
// The allocators any supported jaxlib names (0.11.2 added "address"); the
// engine refuses one its release lacks.
inline constexpr const char* kGpuAllocators[] = {"default", "platform", "bfc", "cuda_async", "vmm", "address"};

struct GpuMemorySettings {
  std::string allocator = kDefaultGpuAllocator;    // XLA_PYTHON_CLIENT_ALLOCATOR, lower-cased
  std::optional<double> memory_fraction;           // XLA_CLIENT_MEM_FRACTION (or the older XLA_PYTHON_CLIENT_MEM_FRACTION)
  std::optional<bool> preallocate;                 // XLA_PYTHON_CLIENT_PREALLOCATE
  std::optional<int64_t> collective_memory_bytes;  // XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB, in bytes
};

// Each setter takes the text as a user wrote it and `source`, what the
// error names: the variable, or the client option.
Status SetGpuAllocator(const std::string& text, const std::string& source, GpuMemorySettings* s);
// A number in (0, 1]: the share of the GPU's memory the engine may take.
Status SetGpuMemoryFraction(const std::string& text, const std::string& source, GpuMemorySettings* s);
Status SetGpuMemoryFractionValue(double value, const std::string& source, GpuMemorySettings* s);
// jax's rule: every value but "false", "False" and "0" preallocates.
void SetGpuPreallocate(const std::string& text, GpuMemorySettings* s);
// Whole MiB, 0 or more (the variable), or bytes (the client option).
Status SetGpuCollectiveMemoryMiB(const std::string& text, const std::string& source, GpuMemorySettings* s);
Status SetGpuCollectiveMemoryBytes(int64_t bytes, const std::string& source, GpuMemorySettings* s);

// The smallest share of a GPU the CUDA engine is given: below it, its own
// workspaces (cuBLAS, autotuning) and the smallest program do not fit.
inline constexpr int64_t kMinGpuMemoryShareBytes = int64_t{256} << 20;

// FAILED_PRECONDITION when the engine's memory limit on a GPU
// (`bytes_limit`, what its allocator may hold) is below
// kMinGpuMemoryShareBytes, naming the fraction that made it so.
Status CheckGpuMemoryShare(int64_t bytes_limit, const GpuMemorySettings& s);

}  // namespace myplugin
