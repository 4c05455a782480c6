// What myplugin's PJRT_Api offers of the engine's extensions, type by type
// (the numbers of XLA's PJRT_Extension_Type): forwarded (ours chained, each
// entry calling the engine's with our objects swapped for the engine's and
// its errors made ours), answered by myplugin (it must see the call), or
// not needed, each with the reason (docs/gpus.md, "The engine's
// extensions"). A type the table does not name is never chained: its
// entries could take our objects where the engine expects its own.
//
// The argument structs below are the ABI facts of XLA's
// pjrt_c_api_gpu_extension.h (version 3), pjrt_c_api_stream_extension.h
// (0), pjrt_c_api_triton_extension.h (2) and
// pjrt_c_api_custom_partitioner_extension.h (1), which the header we build
// against does not ship.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "engine/engine_library.h"
#include "pjrt_c_api.h"

namespace myplugin {

enum class ExtensionPlan { kForwarded, kAnswered, kNotNeeded };

struct ExtensionDecision {
  int type;
  const char* name;
  ExtensionPlan plan;
  const char* why;
};

// The decision for `type`; null for a type the table does not know.
const ExtensionDecision* DecideExtension(int type);

// ---- Type 0: GPU custom calls (registers a custom-call target) ----
struct GpuRegisterCustomCallArgs {
  size_t struct_size;
  const char* function_name;
  size_t function_name_size;
  int api_version;  // 0 untyped, 1 typed FFI
  void* handler_instantiate;
  void* handler_prepare;
  void* handler_initialize;
  void* handler_execute;
  uint32_t traits;  // version 3
};
struct GpuCustomCallExtension {
  PJRT_Extension_Base base;
  PJRT_Error* (*custom_call)(GpuRegisterCustomCallArgs* args);
  bool custom_call_handles_traits;  // version 3
};

// ---- Type 2: the custom partitioner (jax's custom_partitioning rules) ----
struct JaxCustomCallPartitionerCallbacks;  // jaxlib's; opaque to us
struct RegisterCustomPartitionerArgs {
  size_t struct_size;
  const char* name;
  size_t name_size;
  JaxCustomCallPartitionerCallbacks* callbacks;
};
struct RegisterBatchPartitionableArgs {
  size_t struct_size;
  const char* name;
  size_t name_size;
};
struct CustomPartitionerExtension {
  PJRT_Extension_Base base;
  PJRT_Error* (*register_custom_partitioner)(RegisterCustomPartitionerArgs* args);
  PJRT_Error* (*register_batch_partitionable)(RegisterBatchPartitionableArgs* args);
};

// ---- Type 3: streams (DLPack with a consumer stream) ----
struct GetStreamArgs {
  size_t struct_size;
  PJRT_Device* device;
  intptr_t stream;  // out
};
struct WaitStreamArgs {
  size_t struct_size;
  intptr_t stream;
  PJRT_Buffer* buffer;
};
struct StreamExtension {
  PJRT_Extension_Base base;
  PJRT_Error* (*get_stream)(GetStreamArgs* args);
  PJRT_Error* (*wait_stream)(WaitStreamArgs* args);
};

// ---- Type 7: Triton (compiles a Triton kernel to PTX) ----
struct TritonCompileArgs {
  size_t struct_size;
  const char* module;
  size_t module_size;
  const char* arch_name;
  size_t arch_name_size;
  int num_warps;
  int num_ctas;
  int num_stages;
  const char* out_asm;  // owned by the caller
  size_t out_asm_size;
  int64_t out_smem_bytes;
  const char* out_path;  // owned by the caller
  size_t out_path_size;
};
struct TritonExtension {
  PJRT_Extension_Base base;
  PJRT_Error* (*compile)(TritonCompileArgs* args);
};

// Our forwarders of `engine`'s extensions of forwarded types, chained before
// `next`; `next` itself when the engine offers none. Called once, for the
// engine myplugin runs.
PJRT_Extension_Base* ForwardEngineExtensions(const EngineLibrary& engine, PJRT_Extension_Base* next);

// Our custom-partitioner extension, in the chain from the start: jax
// registers its partitioners with every plugin right after plugin
// discovery, before any engine is loaded. Each registration is kept and
// handed to every engine that has the extension, now (AddPartitioningEngine)
// or when it loads later (the CUDA engine that compiles for GPU targets).
PJRT_Extension_Base* OurCustomPartitionerExtension(PJRT_Extension_Base* next);

// A loaded engine: when it has a custom-partitioner extension, it is given
// every registration made so far and every later one. Once per library
// (the same library twice changes nothing).
Status AddPartitioningEngine(const EngineLibrary& engine);

}  // namespace myplugin
