#include "pjrt/executable.h"

#include <chrono>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "collectives/flight_recorder.h"
#include "common/log.h"
#include "pjrt/client.h"
#include "pjrt/device_assignment.h"
#include "pjrt/forwarding.h"
#include "pjrt/host_callback_targets.h"
#include "pjrt/serialized_executable.h"

namespace myplugin {
namespace {

// jax serializes the PJRT_Executable that PJRT_LoadedExecutable_GetExecutable
// gave it, which is the engine's (the shadow's, for a multi-process
// program). Each one handed out is recorded here with the loaded executable
// it came from, so that Serialize writes our whole program.
struct ExecutableOrigins {
  std::mutex mu;
  std::unordered_map<const PJRT_Executable*, const LoadedExecutable*> of;
};

ExecutableOrigins& Origins() {
  static ExecutableOrigins* origins = new ExecutableOrigins;
  return *origins;
}

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

}  // namespace

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

LoadedExecutable::~LoadedExecutable() {
  ExecutableOrigins& o = Origins();
  std::lock_guard<std::mutex> lock(o.mu);
  for (auto it = o.of.begin(); it != o.of.end();) {
    it = it->second == this ? o.of.erase(it) : std::next(it);
  }
}

StatusOr<std::string> LoadedExecutable::Serialize() const {
  if (!unserializable_.empty()) return Unimplemented("this executable cannot be serialized: " + unserializable_);
  // Its entry would serve only processes without devices in the program,
  // yet (written under jax's one key for all) keep the others from theirs.
  if (!has_local_part()) {
    return Unimplemented("this executable cannot be serialized: the program has no device on this process, so "
                         "there is no local part to keep");
  }
  SerializedExecutable out;
  out.platform_version = client_->platform_version();
  StatusOr<std::string> local = engine_.Serialize();
  if (!local.ok()) return local.status();
  out.engine_executable = local.take();
  if (partitioned_) {
    out.multiprocess = true;
    out.process_independent = partitioned_->local.process_independent;
    out.assignment = partitioned_->assignment;
    out.device_order = partitioned_->local.device_order;
    for (int64_t id : out.device_order) {
      StatusOr<int64_t> engine_id = client_->EngineIdOf(id);
      if (!engine_id.ok()) return engine_id.status();
      out.engine_ids.push_back(engine_id.value());
    }
    out.local_compile_options = partitioned_->local.compile_options;
    StatusOr<std::string> shadow = partitioned_->shadow->Serialize();
    if (!shadow.ok()) return shadow.status();
    out.shadow_executable = shadow.take();
  }
  return EncodeSerializedExecutable(out);
}

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

Status CanDescribeWithoutLocalPart(const EngineExecutable& shadow) {
  if (&shadow.engine() != &Engine()) {
    return Unimplemented(
        "this program runs only on other processes' devices, and myplugin describes such a program through its "
        "partition on the CPU engine, which cannot answer for the engine in use (" + Engine().path() + ")");
  }
  return OkStatus();
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
    ScopedSwap<PJRT_Client*> client(args->client, ours->engine_client().get());
    ScopedSwap<const PJRT_Program*> prog(args->program, &program);
    ScopedSwap<const char*> opts(args->compile_options, local.compile_options.data());
    ScopedSwap<size_t> size(args->compile_options_size, local.compile_options.size());
    if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_Client_Compile, args)) return e;
  }
  if (spmd::LogCompiles()) {
    LogLine("myplugin: multi-process compile: local part compiled in " +
            std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) + " s");
  }
  std::string unserializable = UnserializableReason(*args->program);
  if (PJRT_Error* e = WrapInto(ours, args->executable, partitioned.take())) return e;
  FromC(args->executable)->set_unserializable(std::move(unserializable));
  return nullptr;
}

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

}  // namespace

PJRT_Error* PjrtClientCompile(PJRT_Client_Compile_Args* args) {
  collectives::CompileScope compiling;  // a straggler report tells a compile from Python code
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
  std::string unserializable = UnserializableReason(*args->program);
  if (PJRT_Error* e = WrapInto(ours, args->executable)) return e;
  FromC(args->executable)->set_unserializable(std::move(unserializable));
  return nullptr;
}

PJRT_Error* PjrtExecutableDeserializeAndLoad(PJRT_Executable_DeserializeAndLoad_Args* args) {
  collectives::CompileScope compiling;  // a load from the compilation cache is jax's compile step too
  Client* ours = FromC(args->client);
  StatusOr<SerializedExecutable> blob =
      DecodeSerializedExecutable(std::string(args->serialized_executable, args->serialized_executable_size));
  if (!blob.ok()) return ToPjrtError(blob.status());
  if (blob.value().platform_version != ours->platform_version()) {
    return ToPjrtError(FailedPrecondition(
        "this serialized executable was written by '" + blob.value().platform_version + "'; this client is '" +
        ours->platform_version() + "': an executable loads only into the plugin build and engine that made it "
        "(compile the program again)"));
  }
  // jax passes the program's compile options back (global device ids).
  std::string options;
  if (args->overridden_serialized_compile_options != nullptr) {
    options.assign(args->overridden_serialized_compile_options, args->overridden_serialized_compile_options_size);
  }
  args->loaded_executable = nullptr;
  if (blob.value().multiprocess) return LoadAcrossProcesses(ours, blob.value(), options, args->loaded_executable);
  return LoadLocal(ours, blob.value(), options, args->loaded_executable);
}

PJRT_Error* PjrtExecutableSerialize(PJRT_Executable_Serialize_Args* args) {
  const LoadedExecutable* origin = nullptr;
  {
    ExecutableOrigins& o = Origins();
    std::lock_guard<std::mutex> lock(o.mu);
    auto it = o.of.find(args->executable);
    if (it != o.of.end()) origin = it->second;
  }
  if (origin == nullptr) {
    return ToPjrtError(FailedPrecondition(
        "myplugin serializes only executables obtained from its loaded executables (and still loaded)"));
  }
  StatusOr<std::string> bytes = origin->Serialize();
  if (!bytes.ok()) return ToPjrtError(bytes.status());
  auto* holder = new std::string(bytes.take());
  args->serialized_bytes = holder->data();
  args->serialized_bytes_size = holder->size();
  args->serialized_executable = reinterpret_cast<PJRT_SerializedExecutable*>(holder);
  args->serialized_executable_deleter = [](PJRT_SerializedExecutable* p) {
    delete reinterpret_cast<std::string*>(p);
  };
  return nullptr;
}

void ForgetExecutableOrigin(const PJRT_Executable* executable) {
  ExecutableOrigins& o = Origins();
  std::lock_guard<std::mutex> lock(o.mu);
  o.of.erase(executable);
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
  {
    ScopedSwap<PJRT_LoadedExecutable*> exec(args->loaded_executable, use_global ? global->get() : ours->engine());
    if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_GetExecutable, args)) return e;
  }
  ExecutableOrigins& o = Origins();
  std::lock_guard<std::mutex> lock(o.mu);
  o.of[args->executable] = ours;
  return nullptr;
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
    if (args->num_devices != 0 || args->execute_device != nullptr) {
      return ToPjrtError(InvalidArgument("this program runs only on other processes' devices; it was launched with " +
                                         std::to_string(args->num_devices) + " local device(s)"));
    }
    if (ours->deleted()) return ToPjrtError(FailedPrecondition("the executable has been deleted"));
    return nullptr;
  }
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, FromC(args->executable)->engine());
  if (args->execute_device != nullptr) {
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
