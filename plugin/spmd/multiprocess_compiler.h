// Multi-process compile by partition, then rewrite (see docs/architecture.md,
// "Multi-process programs"). jax hands every process the same global
// program; the engine can neither run other processes' devices nor
// collectives between processes, so:
//   1. a shadow engine client with every global device compiles the program
//      and dumps it right after SPMD partitioning (per-device HLO);
//   2. the Python hook rewrites its collectives into our FFI calls and
//      makes compile options for this process's devices alone;
//   3. the caller compiles that module on the real engine client.
// Steps 1 and 2 are cached by the exact program and options.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/settings.h"
#include "common/status.h"
#include "engine/engine_client.h"
#include "engine/engine_executable.h"
#include "spmd/program_hooks.h"

namespace myplugin::spmd {

struct PartitionedProgram {
  LocalProgram local;
  std::vector<std::vector<int64_t>> assignment;  // the whole program's [replica][partition] global ids
  // The global program as the shadow compiled it, or null where the shadow
  // stopped after its HLO passes (a program with a local part): then the
  // local executable and `local.partitioned_module_proto` answer what jax
  // asks about the executable (shardings, device assignment, partitions).
  std::unique_ptr<EngineExecutable> shadow;
  // What the shadow compiled (the caller's program and options), kept so
  // that the whole executable can be compiled when one is needed after all
  // (a compilation-cache entry).
  std::string code, format, options;
};

// Why a program that jaxlib partitioned (spmd/jaxlib_partitioned_targets.h)
// has no whole executable on the engine.
Status NoWholeExecutable();

class MultiProcessCompiler {
 public:
  // `shadow_engine` gives the (CPU) engine library that partitions, loaded
  // on first need.
  // `settings`: where the shadow's dumps go (temp_dir) and whether each
  // step is logged (spmd_log).
  MultiProcessCompiler(std::function<StatusOr<const EngineLibrary*>()> shadow_engine, int num_devices,
                       std::map<int64_t, int64_t> local_engine_ids, const Settings& settings)
      : shadow_engine_(std::move(shadow_engine)),
        num_devices_(num_devices),
        local_engine_ids_(std::move(local_engine_ids)),
        log_(settings.spmd_log),
        temp_dir_(settings.temp_dir) {}

  // `assignment` is [replica][partition] global device ids; `cache_key`
  // identifies the options (equal options, equal key).
  StatusOr<std::shared_ptr<const PartitionedProgram>> Partition(const PJRT_Program& program,
                                                                const std::string& options,
                                                                const std::string& cache_key,
                                                                const std::vector<std::vector<int64_t>>& assignment);

  // For a compile-only GPU target (pjrt/gpu_compile.h): one partition of
  // the program, then the local program of every process in `processes`
  // (each its global id -> engine id map), rewritten for `engine_kind`.
  // `whole` gets the partitioned whole program (empty where the shadow did
  // not stop early). Not cached: each compile-only compile is jax's own call.
  StatusOr<std::vector<LocalProgram>> PartitionForProcesses(const PJRT_Program& program, const std::string& options,
                                                            const std::vector<std::vector<int64_t>>& assignment,
                                                            const std::vector<std::map<int64_t, int64_t>>& processes,
                                                            const std::string& engine_kind);

  // The whole program's executable on the shadow engine, compiled now for a
  // program whose partition stopped early.
  StatusOr<std::unique_ptr<EngineExecutable>> CompileWholeProgram(const PartitionedProgram& program);

  // The whole program from its serialized shadow executable (a compilation
  // cache entry), loaded into the shadow client with `options` (global ids).
  StatusOr<std::unique_ptr<EngineExecutable>> LoadShadow(const std::string& bytes, const std::string& options);

 private:
  StatusOr<EngineClient*> Shadow();
  StatusOr<std::shared_ptr<const PartitionedProgram>> PartitionUncached(
      const PJRT_Program& program, const std::string& options, const std::vector<std::vector<int64_t>>& assignment,
      bool stop_early);
  struct ShadowCompile {
    Status status;                              // the engine's verdict
    std::unique_ptr<EngineExecutable> executable;  // when it compiled
    bool stopped_early = false;                 // it was meant to end once the dump was written
  };
  // What the local_program hook is asked for one process's devices.
  LocalProgramRequest Request(const std::string& dump_dir, const std::string& options,
                              const std::vector<std::vector<int64_t>>& assignment,
                              const std::map<int64_t, int64_t>& local_ids, const std::string& engine_kind) const;
  // Called with mu_ held. An error where the compile failed other than by
  // its stop mark (ShadowCompile::status is then OK, or the mark's).
  StatusOr<ShadowCompile> PartitionOnShadow(const std::string& code, const std::string& format,
                                            const std::string& options, const std::string& dump_dir,
                                            bool stop_early);
  // Called with mu_ held.
  StatusOr<ShadowCompile> CompileShadow(const std::string& code, const std::string& format,
                                        const std::string& options, const std::string& dump_dir, bool stop_early);

  std::function<StatusOr<const EngineLibrary*>()> shadow_engine_;
  const EngineLibrary* engine_ = nullptr;  // the shadow's, once loaded
  const int num_devices_;
  const std::map<int64_t, int64_t> local_engine_ids_;
  const bool log_;
  const std::string temp_dir_;
  std::mutex mu_;  // one partition at a time: they share the shadow client and the cache
  std::unique_ptr<EngineClient> shadow_;
  std::unordered_map<std::string, std::shared_ptr<const PartitionedProgram>> cache_;
};

}  // namespace myplugin::spmd
