// The two steps of a multi-process compile that run in jaxlib's Python side
// (jax_plugin/spmd/compile_hooks.py): C++ has no HLO parser, jaxlib does.
// The Python module installs them at registration; this registry lives in
// the shared runtime library so that the PJRT library sees the same one.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace myplugin::spmd {

struct LocalProgramRequest {
  std::string dump_dir;         // where the shadow compile dumped its module
  std::string compile_options;  // the caller's, serialized CompileOptionsProto
  std::vector<std::vector<int64_t>> assignment;  // [replica][partition] global ids
  int num_devices = 0;                           // global devices in the job
  std::map<int64_t, int64_t> local_engine_ids;   // this process: global id -> engine id
  // The engine the local program is for: "" for this process's own, "cuda"
  // when compiling for GPUs this process need not have (pjrt/gpu_compile.h).
  std::string engine_kind;
};

// What the shadow engine compiles: the caller's program and options with
// the dump options, and, where it could be placed, a mark that ends the
// compile right after the HLO passes (see docs/architecture.md, "Multi-process
// programs": the shadow's machine code is never needed).
// The stop mark's custom-call target (a host-callback name: see
// jax_plugin/spmd/compile_hooks.py, which reads it from here). A stopped
// shadow's compile fails in its back end: an error naming it, or NOT_FOUND
// or UNIMPLEMENTED for another call it cannot emit first; any other failure
// is the program's own (a partitioner error), which stopping early must not
// hide (spmd/multiprocess_compiler.cc).
inline constexpr std::string_view kShadowStopTarget = "xla_ffi_python_cpu_callback";

struct ShadowProgram {
  std::string code;
  std::string compile_options;
  bool stops_early = false;  // the compile is expected to fail once the dump is written
  // The hook partitioned the program itself, on jaxlib's XLA (a program with
  // custom partitioning rules, spmd/jaxlib_partitioned_targets.h): the dump
  // is written, and the shadow engine compiles nothing.
  bool partitioned = false;
};

struct LocalProgram {
  std::string hlo_module_proto;          // the rewritten module
  std::string compile_options;           // for this process's devices alone
  std::vector<int64_t> device_order;     // global ids, in execution order
  // The module is the same on every process (it reads device ids at run
  // time, not from constants), so its compiled form may serve any process.
  bool process_independent = false;
  // The whole program right after SPMD partitioning (HloModuleProto, with the
  // partitioner's parameter and output shardings): what jax asks about the
  // executable is answered from it when the shadow stopped early.
  std::string partitioned_module_proto;
};

struct ProgramHooks {
  // `stop_early`: whether the compile may end after the dump (false where the
  // shadow's executable itself is wanted).
  std::function<StatusOr<ShadowProgram>(const std::string& code, const std::string& format, const std::string& options,
                                        const std::string& dump_dir, bool stop_early)>
      shadow_program;
  std::function<StatusOr<LocalProgram>(const LocalProgramRequest&)> local_program;
};

void SetProgramHooks(ProgramHooks hooks);
// Empty hooks (both null) until the Python package installed them.
ProgramHooks GetProgramHooks();

}  // namespace myplugin::spmd
