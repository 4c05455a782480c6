// Compiling for NVIDIA GPUs that this machine need not have: jax's
// compile-only topologies (jax.experimental.topologies.get_topology_desc
// with platform="myplugin", topology="1x2x8", gpu="h100").
//
// The compiler is XLA's CUDA engine (CompileEngine()), through its topology
// and PJRT_Compile alone: no client, so no CUDA driver or GPU is touched.
// A program of one process's GPUs compiles as it is (the engine's own
// collectives serve it, as at run time). A program over several processes
// goes the way a multi-process job compiles it at run time: partitioned on
// the CPU shadow engine, its collectives rewritten into our NCCL FFI calls
// (for CUDA: no fences, device ids as constants), and each process's local
// program compiled for one host's GPUs. The result carries every process's
// local program, so that one serialized artifact serves the whole job.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine_library.h"
#include "pjrt/device.h"
#include "pjrt/gpu_target_options.h"
#include "pjrt/topology.h"
#include "pjrt_c_api.h"
#include "spmd/multiprocess_compiler.h"

namespace myplugin {

// An engine's PJRT_Executable (compiled, never loaded), owned.
class UnloadedExecutable {
 public:
  UnloadedExecutable(const EngineLibrary& engine, PJRT_Executable* executable)
      : engine_(engine), executable_(executable) {}
  ~UnloadedExecutable();
  UnloadedExecutable(const UnloadedExecutable&) = delete;
  UnloadedExecutable& operator=(const UnloadedExecutable&) = delete;
  PJRT_Executable* get() const { return executable_; }
  StatusOr<std::string> Serialize() const;

 private:
  const EngineLibrary& engine_;
  PJRT_Executable* executable_;
};

// What PJRT_Compile returns for a compile-only GPU topology: jax sees it as
// a PJRT_Executable and asks it everything through our table, which routes
// the questions to the CUDA engine (TargetExecutableOf).
class TargetExecutable {
 public:
  struct ProcessPart {
    std::unique_ptr<UnloadedExecutable> executable;  // null: no device of this process in the program
    std::vector<int64_t> device_order;                // global ids, in replica order
    std::vector<int64_t> engine_ids;                  // their ids in the local compile's options
    std::string compile_options;                      // the local compile's
  };

  TargetExecutable(const EngineLibrary& engine, GpuTargetOptions target, std::string writer);
  ~TargetExecutable();
  TargetExecutable(const TargetExecutable&) = delete;
  TargetExecutable& operator=(const TargetExecutable&) = delete;

  const EngineLibrary& engine() const { return engine_; }
  // The engine executable that answers for the code (outputs, memory, cost,
  // fingerprint): the program, or the first process's local program.
  PJRT_Executable* primary() const;
  bool multiprocess() const { return multiprocess_; }
  const std::vector<std::vector<int64_t>>& assignment() const { return assignment_; }

  void SetSingle(std::unique_ptr<UnloadedExecutable> executable);
  void SetMultiProcess(std::vector<ProcessPart> parts, std::vector<std::vector<int64_t>> assignment,
                       std::string partitioned_module);

  // The optimized program jax shows (as_text) and reads shardings from: for
  // a multi-process program the first local program (our collectives in
  // it) with the whole program's counts and shardings.
  StatusOr<std::string> OptimizedProgram(std::string* format) const;
  // Our envelope (serialized_executable.h) with the target and every part.
  StatusOr<std::string> Serialize() const;

 private:
  const EngineLibrary& engine_;
  GpuTargetOptions target_;
  std::string writer_;
  bool multiprocess_ = false;
  std::unique_ptr<UnloadedExecutable> single_;
  std::vector<ProcessPart> parts_;
  std::vector<std::vector<int64_t>> assignment_;
  std::string partitioned_module_;
};

inline PJRT_Executable* ToC(TargetExecutable* e) { return reinterpret_cast<PJRT_Executable*>(e); }
// The TargetExecutable that `executable` is, or null (an engine's own).
TargetExecutable* TargetExecutableOf(const PJRT_Executable* executable);

// What a compile-only GPU topology compiles with; shared by the topology
// jax holds.
class GpuCompileTarget {
 public:
  // The topology for jax's options (pjrt/gpu_target_options.h): the CUDA
  // engine's, described as ours (platform "myplugin").
  static StatusOr<std::unique_ptr<Topology>> CreateTopology(const std::string& topology_name,
                                                            const PJRT_NamedValue* options, size_t num_options);
  ~GpuCompileTarget();
  GpuCompileTarget(const GpuCompileTarget&) = delete;
  GpuCompileTarget& operator=(const GpuCompileTarget&) = delete;

  StatusOr<std::unique_ptr<TargetExecutable>> Compile(const PJRT_Program& program, const std::string& options) const;

 private:
  GpuCompileTarget(const EngineLibrary& engine, GpuTargetOptions target)
      : engine_(engine), target_(std::move(target)) {}
  StatusOr<std::unique_ptr<UnloadedExecutable>> CompileOnEngine(const PJRT_Program& program,
                                                                const std::string& options,
                                                                PJRT_TopologyDescription* topology) const;
  StatusOr<std::unique_ptr<TargetExecutable>> CompileAcrossProcesses(
      const PJRT_Program& program, const std::string& options,
      const std::vector<std::vector<int64_t>>& assignment) const;

  const EngineLibrary& engine_;
  GpuTargetOptions target_;
  std::string version_;                                 // our topology's platform version
  PJRT_TopologyDescription* whole_ = nullptr;           // the engine's, every process
  PJRT_TopologyDescription* one_host_ = nullptr;        // the engine's, 1x1x<GPUs per host>: local programs
  std::vector<std::unique_ptr<DeviceDescription>> devices_;
  std::unique_ptr<spmd::MultiProcessCompiler> partitioner_;
};

// The writer's name in a target's serialized executables, and what a
// client on the CUDA engine must be to load one: this build, over a CUDA
// engine of the same C API.
std::string TargetWriter(const EngineLibrary& cuda_engine);

}  // namespace myplugin
