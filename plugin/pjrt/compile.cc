// PJRT_Client_Compile: a program of this process's devices goes to the
// engine with its device ids mapped; one that spans processes (or calls
// custom partitioning rules) is partitioned on the shadow engine (or by
// jaxlib) and its local part compiled (spmd/multiprocess_compiler.h).
#include <chrono>
#include <string>
#include <string_view>

#include "collectives/flight_recorder.h"
#include "common/log.h"
#include "common/profile_spans.h"
#include "pjrt/client.h"
#include "pjrt/device_assignment.h"
#include "pjrt/executable.h"
#include "pjrt/forwarding.h"
#include "pjrt/host_callback_targets.h"
#include "spmd/jaxlib_partitioned_targets.h"

namespace myplugin {
namespace {

// A program that calls a Python host callback (host_callback_targets.h)
// cannot be serialized for another process or a later run. The target names
// appear verbatim in StableHLO text and bytecode alike (a
// bytecode keeps its strings in one plain section), and in HLO protos.
std::string UnserializableReason(const PJRT_Program& program) {
  std::string_view code(program.code, program.code_size);
  for (std::string_view target : kProcessLocalTargets) {
    if (code.find(target) != std::string_view::npos) {
      return "the program calls " + std::string(target) +
             " (a Python host callback), whose callable exists only in the process that compiled it";
    }
  }
  return "";
}

// A program over other processes' devices too: partition it on the shadow
// engine, then compile this process's rewritten part on the real one.
PJRT_Error* CompileAcrossProcesses(Client* ours, PJRT_Client_Compile_Args* args, const std::string& options,
                                   const std::vector<std::vector<int64_t>>& assignment) {
  StatusOr<std::string> key = CanonicalCompileOptions(options);
  if (!key.ok()) return ToPjrtError(key.status());
  StatusOr<std::shared_ptr<const spmd::PartitionedProgram>> partitioned =
      ours->multiprocess_compiler().Partition(*args->program, options, key.value(), assignment);
  if (!partitioned.ok()) return ToPjrtError(partitioned.status());
  const spmd::LocalProgram& local = partitioned.value()->local;
  if (local.device_order.empty()) {
    // None of the program's devices is ours: as on jax's CPU backend, this
    // process takes part without local work. jax still asks the executable
    // about the whole program, which only a shadow on our own engine answers.
    if (!partitioned.value()->shadow) return ToPjrtError(spmd::NoWholeExecutable());
    if (Status st = CanDescribeWithoutLocalPart(*partitioned.value()->shadow); !st.ok()) return ToPjrtError(st);
    args->executable = nullptr;
    return WrapInto(ours, args->executable, partitioned.take());
  }
  static constexpr char kHlo[] = "hlo";
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = const_cast<char*>(local.hlo_module_proto.data());
  program.code_size = local.hlo_module_proto.size();
  program.format = kHlo;
  program.format_size = sizeof(kHlo) - 1;
  auto start = std::chrono::steady_clock::now();
  {
    profile::Span span("compile the local part");
    ScopedSwap<PJRT_Client*> client(args->client, ours->engine_client().get());
    ScopedSwap<const PJRT_Program*> prog(args->program, &program);
    ScopedSwap<const char*> opts(args->compile_options, local.compile_options.data());
    ScopedSwap<size_t> size(args->compile_options_size, local.compile_options.size());
    if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_Client_Compile, args)) return e;
  }
  if (ours->settings().spmd_log) {
    LogLine("myplugin: multi-process compile: local part compiled in " +
            std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) + " s");
  }
  std::string unserializable = UnserializableReason(*args->program);
  if (PJRT_Error* e = WrapInto(ours, args->executable, partitioned.take())) return e;
  FromC(args->executable)->set_unserializable(std::move(unserializable));
  return nullptr;
}

size_t DeviceCount(const std::vector<std::vector<int64_t>>& assignment) {
  size_t count = 0;
  for (const auto& replica : assignment) count += replica.size();
  return count;
}

}  // namespace

PJRT_Error* PjrtClientCompile(PJRT_Client_Compile_Args* args) {
  collectives::CompileScope compiling;  // a straggler report tells a compile from Python code
  profile::Span span("compile");
  Client* ours = FromC(args->client);
  const std::string raw(args->compile_options, args->compile_options_size);
  {
    StatusOr<std::vector<std::vector<int64_t>>> assignment = ReadCompileOptionDevices(raw);
    if (!assignment.ok()) return ToPjrtError(assignment.status());
    StatusOr<bool> across = ours->NeedsMultiProcessCompile(assignment.value());
    if (!across.ok()) return ToPjrtError(across.status());
    // A program with custom partitioning rules over several devices, even of
    // this process alone, is partitioned where jax keeps those rules
    // (spmd/jaxlib_partitioned_targets.h), then compiled as a multi-process
    // program's local part.
    const bool custom_rules = DeviceCount(assignment.value()) > 1 &&
                              spmd::CallsJaxlibPartitionedTarget({args->program->code, args->program->code_size});
    if (span.on()) {
      span.Add(profile::Stat::Int("devices", static_cast<int64_t>(DeviceCount(assignment.value()))));
      span.Add(profile::Stat::Int("across_processes", across.value() ? 1 : 0));
    }
    if (across.value() || custom_rules) return CompileAcrossProcesses(ours, args, raw, assignment.value());
  }
  // In a multi-process job jax names devices by global id; the engine by its own.
  std::string options;
  if (!ours->ids_are_engine_ids()) {
    StatusOr<std::string> remapped = RemapCompileOptionDevices(raw, [ours](int64_t id) { return ours->EngineIdOf(id); });
    if (!remapped.ok()) return ToPjrtError(remapped.status());
    options = remapped.take();
  }
  {
    ScopedSwap<PJRT_Client*> client(args->client, ours->engine_client().get());
    ScopedSwap<const char*> opts(args->compile_options, ours->ids_are_engine_ids() ? args->compile_options
                                                                                    : options.data());
    ScopedSwap<size_t> size(args->compile_options_size,
                            ours->ids_are_engine_ids() ? args->compile_options_size : options.size());
    if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_Client_Compile, args)) return e;
  }
  std::string unserializable = UnserializableReason(*args->program);
  if (PJRT_Error* e = WrapInto(ours, args->executable)) return e;
  FromC(args->executable)->set_unserializable(std::move(unserializable));
  return nullptr;
}

}  // namespace myplugin
