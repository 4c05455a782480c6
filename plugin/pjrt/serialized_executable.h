// The bytes of PJRT_Executable_Serialize, as jax's persistent compilation
// cache stores them. An envelope of ours around the engine's own serialized
// executables: it names the build that wrote it (the client's platform
// version), so that a blob of another build or engine is refused instead of
// loaded, and for a multi-process program it carries what the load needs
// without a new partition: the local program's executable and options, the
// shadow's executable, and whose devices the local program was made for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace myplugin {

struct SerializedExecutable {
  std::string platform_version;   // of the client that wrote it
  std::string engine_executable;  // the engine's bytes (the local part of a multi-process program)
  bool multiprocess = false;

  // Multi-process programs only.
  // True when the local program is the same on every process (device ids
  // are read at run time): any process may load it. Otherwise it loads only
  // on a process with the writer's devices.
  bool process_independent = false;
  std::vector<std::vector<int64_t>> assignment;  // the whole program's [replica][partition] global ids
  std::vector<int64_t> device_order;             // the writer's local devices (global ids), in replica order
  std::vector<int64_t> engine_ids;               // the same devices' engine ids on the writer
  std::string local_compile_options;             // as the writer compiled the local program
  std::string shadow_executable;                 // the whole program, compiled on the shadow engine

  // Compiled ahead of time for GPUs (a compile-only topology, pjrt/gpu_compile.h):
  // it loads only on a job of those GPUs in that topology, which the load checks.
  bool for_target = false;
  std::string target_device_kind;  // as CUDA names the GPU
  int64_t target_cc_major = 0, target_cc_minor = 0;
  std::string target_topology;  // "<slices>x<hosts>x<GPUs per host>"
  // A multi-process program: each process's local program (index = process),
  // and its devices (global ids, in replica order). `engine_executable` is
  // then empty.
  std::vector<std::string> process_executables;
  std::vector<std::vector<int64_t>> process_device_orders;
  std::vector<std::vector<int64_t>> process_engine_ids;  // the same devices' ids in the local compile's options
  std::vector<std::string> process_compile_options;       // each local program's
};

std::string EncodeSerializedExecutable(const SerializedExecutable& e);

// Where a GPU target's executable (for_target) is being loaded.
struct TargetLoadSite {
  bool cuda_engine = false;         // the client runs on XLA's CUDA engine
  std::string engine_description;   // the client's engine, for the message
  std::string writer;               // TargetWriter() of this build and engine (cuda_engine only)
  std::string device_kind;          // of this process's GPUs
  int processes = 0;                // in the job
  int devices_per_process = 0;
};
// OK when `e` (for_target) may load at `site`: this build, a CUDA client,
// the GPU it was compiled for, a job of its topology. Each refusal names
// both sides.
Status CheckTargetFits(const SerializedExecutable& e, const TargetLoadSite& site);
// Refuses bytes that are not ours, or of another version of this format.
StatusOr<SerializedExecutable> DecodeSerializedExecutable(const std::string& bytes);

}  // namespace myplugin
