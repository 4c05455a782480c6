// PJRT_Executable_DeserializeAndLoad: our serialized executables
// (serialized_executable.h) loaded back, a single-process program on this
// process's devices, a multi-process one as its local part plus the whole
// program on the shadow engine.
#include <string>
#include <unordered_map>

#include "collectives/flight_recorder.h"
#include "pjrt/client.h"
#include "pjrt/device_assignment.h"
#include "pjrt/engine_instance.h"
#include "pjrt/error.h"
#include "pjrt/executable.h"
#include "pjrt/gpu_compile.h"
#include "pjrt/serialized_executable.h"

namespace myplugin {
namespace {

// A program with no device on this process: its whole program, loaded on the
// shadow engine, is all that jax asks about; nothing runs here.
PJRT_Error* LoadWithoutLocalPart(Client* ours, const std::string& whole_program, const std::string& options,
                                 std::vector<std::vector<int64_t>> assignment, PJRT_LoadedExecutable*& slot) {
  StatusOr<std::unique_ptr<EngineExecutable>> shadow = ours->multiprocess_compiler().LoadShadow(whole_program, options);
  if (!shadow.ok()) return ToPjrtError(shadow.status());
  if (Status st = CanDescribeWithoutLocalPart(*shadow.value()); !st.ok()) return ToPjrtError(st);
  auto partitioned = std::make_shared<spmd::PartitionedProgram>();
  partitioned->assignment = std::move(assignment);
  partitioned->shadow = shadow.take();
  slot = nullptr;
  return WrapInto(ours, slot, std::move(partitioned));
}

bool HasLocalDevice(Client* ours, const std::vector<std::vector<int64_t>>& assignment) {
  for (const auto& replica : assignment) {
    for (int64_t id : replica) {
      Device* d = ours->LookupDevice(static_cast<int>(id));
      if (d != nullptr && d->addressable()) return true;
    }
  }
  return false;
}

// A serialized single-process program: the engine's executable, on this
// process's devices.
PJRT_Error* LoadLocal(Client* ours, const SerializedExecutable& blob, const std::string& options,
                      PJRT_LoadedExecutable*& slot) {
  std::string engine_options = options;
  if (!options.empty()) {
    StatusOr<std::vector<std::vector<int64_t>>> assignment = ReadCompileOptionDevices(options);
    if (!assignment.ok()) return ToPjrtError(assignment.status());
    StatusOr<bool> across = ours->NeedsMultiProcessCompile(assignment.value());
    if (!across.ok()) return ToPjrtError(across.status());
    if (across.value()) {
      // Another process's program (jax's key is the same for every process):
      // for a process outside it, the engine's executable is the whole program.
      if (!HasLocalDevice(ours, assignment.value())) {
        return LoadWithoutLocalPart(ours, blob.engine_executable, options, assignment.take(), slot);
      }
      return ToPjrtError(FailedPrecondition(
          "this serialized executable is a program of one process's devices, but the compile options name "
          "devices of this and other processes: it cannot run this program"));
    }
    if (!ours->ids_are_engine_ids()) {
      StatusOr<std::string> remapped =
          RemapCompileOptionDevices(options, [ours](int64_t id) { return ours->EngineIdOf(id); });
      if (!remapped.ok()) return ToPjrtError(remapped.status());
      engine_options = remapped.take();
    }
  }
  StatusOr<std::unique_ptr<EngineExecutable>> exec =
      EngineExecutable::Deserialize(Engine(), ours->engine_client().get(), blob.engine_executable, engine_options);
  if (!exec.ok()) return ToPjrtError(exec.status());
  slot = exec.value()->release();
  return WrapInto(ours, slot);
}

std::string IdList(const std::vector<int64_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

// A serialized multi-process program: its local part on this process's
// devices, and the whole program on the shadow engine, with no partition.
PJRT_Error* LoadAcrossProcesses(Client* ours, SerializedExecutable& blob, const std::string& options,
                                PJRT_LoadedExecutable*& slot) {
  if (!options.empty()) {
    StatusOr<std::vector<std::vector<int64_t>>> assignment = ReadCompileOptionDevices(options);
    if (!assignment.ok()) return ToPjrtError(assignment.status());
    if (!assignment.value().empty() && assignment.value() != blob.assignment) {
      return ToPjrtError(FailedPrecondition(
          "this serialized multi-process executable was made for another device assignment than the compile "
          "options name: it cannot run this program"));
    }
  }
  // jax hands this process's arguments over in the order of the assignment.
  std::vector<int64_t> order;
  for (const auto& replica : blob.assignment) {
    for (int64_t id : replica) {
      Device* d = ours->LookupDevice(static_cast<int>(id));
      if (d == nullptr) {
        return ToPjrtError(FailedPrecondition("this serialized multi-process executable names device " +
                                              std::to_string(id) + ", which this job does not have"));
      }
      if (d->addressable()) order.push_back(id);
    }
  }
  if (order.empty()) {
    // Nothing runs here: the whole program, for jax's questions, is all this
    // process needs of the entry.
    return LoadWithoutLocalPart(ours, blob.shadow_executable, options, std::move(blob.assignment), slot);
  }
  if (order.size() != blob.device_order.size() || (!blob.process_independent && order != blob.device_order)) {
    return ToPjrtError(FailedPrecondition(
        "this serialized multi-process executable holds the local program of the process with devices " +
        IdList(blob.device_order) + "; this process runs devices " + IdList(order) +
        (blob.process_independent ? ", a different number"
                                  : ", and that program reads device ids as constants (CUDA engine)") +
        ": it cannot run here"));
  }
  // The writer's engine ids, position by position, become this process's.
  std::unordered_map<int64_t, int64_t> engine_id_of;
  for (size_t i = 0; i < order.size(); ++i) {
    StatusOr<int64_t> id = ours->EngineIdOf(order[i]);
    if (!id.ok()) return ToPjrtError(id.status());
    engine_id_of[blob.engine_ids[i]] = id.value();
  }
  StatusOr<std::string> local_options =
      RemapCompileOptionDevices(blob.local_compile_options, [&engine_id_of](int64_t id) -> StatusOr<int64_t> {
        auto it = engine_id_of.find(id);
        if (it == engine_id_of.end()) {
          return InvalidArgument("the serialized local program names engine device " + std::to_string(id) +
                                 ", which is none of its devices");
        }
        return it->second;
      });
  if (!local_options.ok()) return ToPjrtError(local_options.status());
  StatusOr<std::unique_ptr<EngineExecutable>> shadow =
      ours->multiprocess_compiler().LoadShadow(blob.shadow_executable, options);
  if (!shadow.ok()) {
    return ToPjrtError(Status(shadow.status().code(), "loading the whole program of a serialized multi-process "
                                                      "executable on the shadow engine: " +
                                                          shadow.status().message()));
  }
  StatusOr<std::unique_ptr<EngineExecutable>> local = EngineExecutable::Deserialize(
      Engine(), ours->engine_client().get(), blob.engine_executable, local_options.value());
  if (!local.ok()) return ToPjrtError(local.status());
  auto partitioned = std::make_shared<spmd::PartitionedProgram>();
  partitioned->local.compile_options = local_options.take();
  partitioned->local.device_order = std::move(order);
  partitioned->local.process_independent = blob.process_independent;
  partitioned->assignment = std::move(blob.assignment);
  partitioned->shadow = shadow.take();
  slot = local.value()->release();
  return WrapInto(ours, slot, std::move(partitioned));
}

// A program compiled ahead of time for GPUs (pjrt/gpu_compile.h), checked
// against this process before anything is loaded: on a client of another
// engine (the CPU one) it is refused there, and no CUDA client is ever made.
PJRT_Error* LoadForTarget(Client* ours, const SerializedExecutable& blob, const std::string& options,
                          PJRT_LoadedExecutable*& slot) {
  TargetLoadSite site;
  site.cuda_engine = CurrentEngineKind() == EngineKind::kCuda;
  site.engine_description = std::string("XLA's ") + (site.cuda_engine ? "CUDA" : "CPU") + " engine (" +
                            Engine().path() + ")";
  if (site.cuda_engine) site.writer = TargetWriter(Engine());
  site.devices_per_process = static_cast<int>(ours->c_addressable_devices().size());
  if (!ours->c_addressable_devices().empty()) {
    site.device_kind = FromC(ours->c_addressable_devices()[0])->description().kind();
  }
  site.processes = site.devices_per_process == 0
                       ? 0
                       : static_cast<int>(ours->c_devices().size()) / site.devices_per_process;
  if (Status st = CheckTargetFits(blob, site); !st.ok()) return ToPjrtError(st);
  if (!blob.multiprocess) return LoadLocal(ours, blob, options, slot);
  const int p = ours->process_index();
  if (p >= static_cast<int>(blob.process_executables.size()) || blob.process_executables[p].empty()) {
    return ToPjrtError(Unimplemented("this executable has no part for process " + std::to_string(p) +
                                     " (none of its devices is in the program)"));
  }
  std::vector<int64_t> order;
  for (const auto& replica : blob.assignment) {
    for (int64_t id : replica) {
      Device* d = ours->LookupDevice(static_cast<int>(id));
      if (d != nullptr && d->addressable()) order.push_back(id);
    }
  }
  if (order != blob.process_device_orders[p]) {
    return ToPjrtError(FailedPrecondition("this executable's part for process " + std::to_string(p) +
                                          " runs devices " + IdList(blob.process_device_orders[p]) +
                                          "; this process has " + IdList(order)));
  }
  std::unordered_map<int64_t, int64_t> engine_id_of;
  for (size_t i = 0; i < order.size(); ++i) {
    StatusOr<int64_t> id = ours->EngineIdOf(order[i]);
    if (!id.ok()) return ToPjrtError(id.status());
    engine_id_of[blob.process_engine_ids[p][i]] = id.value();
  }
  StatusOr<std::string> local_options = RemapCompileOptionDevices(
      blob.process_compile_options[p], [&engine_id_of](int64_t id) -> StatusOr<int64_t> {
        auto it = engine_id_of.find(id);
        if (it == engine_id_of.end()) return InvalidArgument("the local program names an unknown engine device");
        return it->second;
      });
  if (!local_options.ok()) return ToPjrtError(local_options.status());
  StatusOr<std::unique_ptr<EngineExecutable>> local = EngineExecutable::Deserialize(
      Engine(), ours->engine_client().get(), blob.process_executables[p], local_options.value());
  if (!local.ok()) return ToPjrtError(local.status());
  auto partitioned = std::make_shared<spmd::PartitionedProgram>();
  partitioned->local.compile_options = local_options.take();
  partitioned->local.device_order = std::move(order);
  partitioned->assignment = blob.assignment;
  slot = local.value()->release();
  return WrapInto(ours, slot, std::move(partitioned));
}

}  // namespace

PJRT_Error* PjrtExecutableDeserializeAndLoad(PJRT_Executable_DeserializeAndLoad_Args* args) {
  collectives::CompileScope compiling;  // a load from the compilation cache is jax's compile step too
  Client* ours = FromC(args->client);
  StatusOr<SerializedExecutable> blob =
      DecodeSerializedExecutable(std::string(args->serialized_executable, args->serialized_executable_size));
  if (!blob.ok()) return ToPjrtError(blob.status());
  std::string options;
  if (args->overridden_serialized_compile_options != nullptr) {
    options.assign(args->overridden_serialized_compile_options, args->overridden_serialized_compile_options_size);
  }
  args->loaded_executable = nullptr;
  if (blob.value().for_target) return LoadForTarget(ours, blob.value(), options, args->loaded_executable);
  if (blob.value().platform_version != ours->platform_version()) {
    return ToPjrtError(FailedPrecondition(
        "this serialized executable was written by '" + blob.value().platform_version + "'; this client is '" +
        ours->platform_version() + "': an executable loads only into the plugin build and engine that made it "
        "(compile the program again)"));
  }
  // jax passes the program's compile options back (global device ids).
  if (blob.value().multiprocess) return LoadAcrossProcesses(ours, blob.value(), options, args->loaded_executable);
  return LoadLocal(ours, blob.value(), options, args->loaded_executable);
}

}  // namespace myplugin
