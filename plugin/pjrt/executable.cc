#include "pjrt/executable.h"

#include "pjrt/client.h"
#include "pjrt/device_assignment.h"
#include "pjrt/forwarding.h"

namespace myplugin {

StatusOr<std::unique_ptr<LoadedExecutable>> LoadedExecutable::Wrap(
    Client* client, PJRT_LoadedExecutable* engine_executable,
    std::shared_ptr<const spmd::PartitionedProgram> partitioned) {
  std::unique_ptr<LoadedExecutable> exec(new LoadedExecutable(client, engine_executable));
  exec->partitioned_ = std::move(partitioned);
  if (engine_executable == nullptr) {
    if (!exec->partitioned_ || !exec->partitioned_->local.device_order.empty()) {
      return Internal("a loaded executable without an engine executable must be a multi-process program with no "
                      "device on this process");
    }
    return exec;
  }
  MYPLUGIN_PJRT_ARGS(PJRT_LoadedExecutable_AddressableDevices_Args, args);
  args.executable = engine_executable;
  MYPLUGIN_RETURN_IF_ERROR(Engine().Consume(Engine().api()->PJRT_LoadedExecutable_AddressableDevices(&args)));
  for (size_t i = 0; i < args.num_addressable_devices; ++i) {
    Device* device = DeviceOfEngine(args.addressable_devices[i]);
    if (device == nullptr) return Internal("the XLA engine compiled for a device that myplugin does not know");
    exec->c_addressable_devices_.push_back(ToC(device));
  }
  if (exec->partitioned_) {
    // The engine compiled replicas in this order; jax must see the same.
    const auto& order = exec->partitioned_->local.device_order;
    if (order.size() != exec->c_addressable_devices_.size()) {
      return Internal("the local part of a multi-process program has " +
                      std::to_string(exec->c_addressable_devices_.size()) + " devices, expected " +
                      std::to_string(order.size()));
    }
    for (size_t i = 0; i < order.size(); ++i) {
      if (FromC(exec->c_addressable_devices_[i])->id() != order[i]) {
        return Internal("the local part of a multi-process program runs its devices in an unexpected order");
      }
    }
  }
  return exec;
}

LoadedExecutable::LoadedExecutable(Client* client, PJRT_LoadedExecutable* engine)
    : client_(client), engine_(Engine(), engine) {}

namespace {

PJRT_Error* WrapInto(Client* client, PJRT_LoadedExecutable*& slot,
                     std::shared_ptr<const spmd::PartitionedProgram> partitioned = nullptr) {
  StatusOr<std::unique_ptr<LoadedExecutable>> exec = LoadedExecutable::Wrap(client, slot, std::move(partitioned));
  if (!exec.ok()) {
    slot = nullptr;
    return ToPjrtError(exec.status());
  }
  slot = ToC(exec.take().release());
  return nullptr;
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
    const EngineExecutable* shadow = partitioned.value()->shadow.get();
    if (&shadow->engine() != &Engine()) {
      return ToPjrtError(Unimplemented(
          "this program runs only on other processes' devices, and myplugin describes such a program through its "
          "partition on the CPU engine, which cannot answer for the engine in use (" + Engine().path() + ")"));
    }
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
  {
    ScopedSwap<PJRT_Client*> client(args->client, ours->engine_client().get());
    ScopedSwap<const PJRT_Program*> prog(args->program, &program);
    ScopedSwap<const char*> opts(args->compile_options, local.compile_options.data());
    ScopedSwap<size_t> size(args->compile_options_size, local.compile_options.size());
    if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_Client_Compile, args)) return e;
  }
  return WrapInto(ours, args->executable, partitioned.take());
}

}  // namespace

PJRT_Error* PjrtClientCompile(PJRT_Client_Compile_Args* args) {
  Client* ours = FromC(args->client);
  const std::string raw(args->compile_options, args->compile_options_size);
  {
    StatusOr<std::vector<std::vector<int64_t>>> assignment = ReadCompileOptionDevices(raw);
    if (!assignment.ok()) return ToPjrtError(assignment.status());
    StatusOr<bool> across = ours->NeedsMultiProcessCompile(assignment.value());
    if (!across.ok()) return ToPjrtError(across.status());
    if (across.value()) return CompileAcrossProcesses(ours, args, raw, assignment.value());
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
  return WrapInto(ours, args->executable);
}

PJRT_Error* PjrtExecutableDeserializeAndLoad(PJRT_Executable_DeserializeAndLoad_Args* args) {
  Client* ours = FromC(args->client);
  {
    ScopedSwap<PJRT_Client*> client(args->client, ours->engine_client().get());
    if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_Executable_DeserializeAndLoad, args)) return e;
  }
  return WrapInto(ours, args->loaded_executable);
}

PJRT_Error* PjrtLoadedExecutableDestroy(PJRT_LoadedExecutable_Destroy_Args* args) {
  delete FromC(args->executable);
  return nullptr;
}

PJRT_Error* PjrtLoadedExecutableGetExecutable(PJRT_LoadedExecutable_GetExecutable_Args* args) {
  LoadedExecutable* ours = FromC(args->loaded_executable);
  // The whole program's executable answers jax's questions (shardings,
  // partitions) when it comes from the engine that our table forwards to;
  // a shadow on another engine (the CPU one under the CUDA engine) cannot.
  const EngineExecutable* global = ours->global_program();
  bool use_global = global != nullptr && &global->engine() == &Engine();
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->loaded_executable, use_global ? global->get() : ours->engine());
  return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_GetExecutable, args);
}

PJRT_Error* PjrtLoadedExecutableAddressableDevices(PJRT_LoadedExecutable_AddressableDevices_Args* args) {
  const auto& d = FromC(args->executable)->c_addressable_devices();
  args->addressable_devices = d.data();
  args->num_addressable_devices = d.size();
  return nullptr;
}

PJRT_Error* PjrtLoadedExecutableDelete(PJRT_LoadedExecutable_Delete_Args* args) {
  LoadedExecutable* ours = FromC(args->executable);
  if (!ours->has_local_part()) {
    ours->MarkDeleted();
    return nullptr;
  }
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, FromC(args->executable)->engine());
  return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_Delete, args);
}

PJRT_Error* PjrtLoadedExecutableIsDeleted(PJRT_LoadedExecutable_IsDeleted_Args* args) {
  LoadedExecutable* ours = FromC(args->executable);
  if (!ours->has_local_part()) {
    args->is_deleted = ours->deleted();
    return nullptr;
  }
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, FromC(args->executable)->engine());
  return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_IsDeleted, args);
}

PJRT_Error* PjrtLoadedExecutableExecute(PJRT_LoadedExecutable_Execute_Args* args) {
  LoadedExecutable* ours = FromC(args->executable);
  if (!ours->has_local_part()) {
    // jax launches every program on every process; one with no device here
    // has nothing to run (the processes that own its devices run it).
    bool on_device = MYPLUGIN_HAS_FIELD(args, PJRT_LoadedExecutable_Execute_Args, execute_device) &&
                     args->execute_device != nullptr;
    if (args->num_devices != 0 || on_device) {
      return ToPjrtError(InvalidArgument("this program runs only on other processes' devices; it was launched with " +
                                         std::to_string(args->num_devices) + " local device(s)"));
    }
    if (ours->deleted()) return ToPjrtError(FailedPrecondition("the executable has been deleted"));
    return nullptr;
  }
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, FromC(args->executable)->engine());
  if (MYPLUGIN_HAS_FIELD(args, PJRT_LoadedExecutable_Execute_Args, execute_device) &&
      args->execute_device != nullptr) {
    ScopedSwap<PJRT_Device*> device(args->execute_device, EngineOf(args->execute_device));
    return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_Execute, args);
  }
  return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_Execute, args);
}

PJRT_Error* PjrtLoadedExecutableFingerprint(PJRT_LoadedExecutable_Fingerprint_Args* args) {
  LoadedExecutable* ours = FromC(args->executable);
  if (!ours->has_local_part()) {
    // The whole program's (compile refused it unless the shadow is on our engine).
    ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, ours->global_program()->get());
    return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_Fingerprint, args);
  }
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, FromC(args->executable)->engine());
  return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_Fingerprint, args);
}

namespace {

// A device assignment we rewrote, with the engine's original to free.
struct RemappedAssignment {
  std::string bytes;
  PJRT_DeviceAssignmentSerialized* engine_holder;
  void (*engine_deleter)(PJRT_DeviceAssignmentSerialized*);
};

void DeleteRemappedAssignment(PJRT_DeviceAssignmentSerialized* p) {
  auto* r = reinterpret_cast<RemappedAssignment*>(p);
  if (r->engine_deleter) r->engine_deleter(r->engine_holder);
  delete r;
}

}  // namespace

PJRT_Error* PjrtLoadedExecutableGetDeviceAssignment(PJRT_LoadedExecutable_GetDeviceAssignment_Args* args) {
  LoadedExecutable* exec = FromC(args->executable);
  if (const EngineExecutable* global = exec->global_program()) {
    // The shadow engine's device ids are the global ids.
    ScopedSwap<PJRT_LoadedExecutable*> engine_exec(args->executable, global->get());
    return ToPjrtError(global->engine().Consume(
        global->engine().api()->PJRT_LoadedExecutable_GetDeviceAssignment(args)));
  }
  {
    ScopedSwap<PJRT_LoadedExecutable*> engine_exec(args->executable, exec->engine());
    if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_GetDeviceAssignment, args)) return e;
  }
  Client* client = exec->client();
  if (client->ids_are_engine_ids()) return nullptr;
  StatusOr<std::string> global = RemapDeviceAssignment(std::string(args->serialized_bytes, args->serialized_bytes_size),
                                                       [client](int64_t id) { return client->GlobalIdOf(id); });
  if (!global.ok()) {
    args->serialized_device_assignment_deleter(args->serialized_device_assignment);
    return ToPjrtError(global.status());
  }
  auto* r = new RemappedAssignment{global.take(), args->serialized_device_assignment,
                                   args->serialized_device_assignment_deleter};
  args->serialized_bytes = r->bytes.data();
  args->serialized_bytes_size = r->bytes.size();
  args->serialized_device_assignment = reinterpret_cast<PJRT_DeviceAssignmentSerialized*>(r);
  args->serialized_device_assignment_deleter = &DeleteRemappedAssignment;
  return nullptr;
}

}  // namespace myplugin
