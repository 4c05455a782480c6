#include "pjrt/executable.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "collectives/process_runtime.h"
#include "common/profile_spans.h"
#include "engine/buffer_holds.h"
#include "pjrt/client.h"
#include "pjrt/device_assignment.h"
#include "pjrt/forwarding.h"
#include "pjrt/gpu_compile.h"
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

// The engine's name of its program; empty where it gives none.
std::string EngineProgramName(PJRT_LoadedExecutable* loaded) {
  MYPLUGIN_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, get);
  get.loaded_executable = loaded;
  if (!Engine().Consume(Engine().api()->PJRT_LoadedExecutable_GetExecutable(&get)).ok()) return "";
  MYPLUGIN_PJRT_ARGS(PJRT_Executable_Name_Args, name);
  name.executable = get.executable;
  std::string out;
  if (Engine().Consume(Engine().api()->PJRT_Executable_Name(&name)).ok()) {
    out.assign(name.executable_name, name.executable_name_size);
  }
  MYPLUGIN_PJRT_ARGS(PJRT_Executable_Destroy_Args, destroy);
  destroy.executable = get.executable;
  (void)Engine().Consume(Engine().api()->PJRT_Executable_Destroy(&destroy));
  return out;
}

// A program's run on one device, from its launch until the engine says
// that device is done, for a profile: on a line of its own, since runs
// overlap each other and the launches.
struct ProfiledRun {
  std::string program;
  int64_t launched_ns;
  int device;
};

constexpr int64_t kRunsLine = -1;  // not a thread id

void RunDone(PJRT_Error* error, void* arg) {
  std::unique_ptr<ProfiledRun> run(static_cast<ProfiledRun*>(arg));
  const bool ok = error == nullptr;
  (void)Engine().Consume(error);
  profile::SpanRecord span;
  span.name = run->program + " (run)";
  span.start_ns = run->launched_ns;
  span.end_ns = profile::MonotonicNowNanos();
  span.thread = kRunsLine - run->device;
  span.line = "runs on local device " + std::to_string(run->device);
  span.stats.push_back(profile::Stat::Int("device", run->device));
  span.stats.push_back(profile::Stat::Text("state", ok ? "done" : "failed"));
  profile::Record(std::move(span));
}

// `events`: the engine's, which jax asked for and will destroy.
void ProfileRuns(const std::string& program, int64_t launched_ns, PJRT_Event** events, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (events[i] == nullptr) continue;
    auto run = std::make_unique<ProfiledRun>(ProfiledRun{program.empty() ? "program" : program, launched_ns,
                                                         static_cast<int>(i)});
    MYPLUGIN_PJRT_ARGS(PJRT_Event_OnReady_Args, on_ready);
    on_ready.event = events[i];
    on_ready.callback = RunDone;
    on_ready.user_arg = run.get();
    if (Engine().Consume(Engine().api()->PJRT_Event_OnReady(&on_ready)).ok()) run.release();  // RunDone frees it
  }
}

// A device part of a multi-process program, counted in flight until its
// completion event fires (collectives/executions_in_flight.h).
struct TrackedRun {
  PJRT_Event* own_event;  // ours to destroy (jax asked for no events), or null
};

// Events of ours whose runs ended: destroyed at the next launch, on jax's
// thread, not inside their own callback.
struct EndedEvents {
  std::mutex mu;
  std::vector<PJRT_Event*> events;  // under mu
};

EndedEvents& Ended() {
  static EndedEvents& ended = collectives::ProcessRuntime::Get().Attached<EndedEvents>();  // never replaced
  return ended;
}

void RunEnded(PJRT_Error* error, void* arg) {
  if (error != nullptr) Engine().Consume(error);  // the program's own error reaches jax through its results
  std::unique_ptr<TrackedRun> run(static_cast<TrackedRun*>(arg));
  if (run->own_event != nullptr) {
    EndedEvents& ended = Ended();
    std::lock_guard<std::mutex> lock(ended.mu);
    ended.events.push_back(run->own_event);
  }
  collectives::ProcessRuntime::Get().executions_in_flight().Ended();
}

void DestroyEndedEvents() {
  std::vector<PJRT_Event*> events;
  {
    EndedEvents& ended = Ended();
    std::lock_guard<std::mutex> lock(ended.mu);
    events.swap(ended.events);
  }
  for (PJRT_Event* event : events) {
    MYPLUGIN_PJRT_ARGS(PJRT_Event_Destroy_Args, destroy);
    destroy.event = event;
    (void)Engine().Consume(Engine().api()->PJRT_Event_Destroy(&destroy));
  }
}

// Counts each device part of a launch in flight until its event fires.
void TrackRuns(PJRT_Event** events, size_t count, bool own) {
  collectives::ExecutionsInFlight& in_flight = collectives::ProcessRuntime::Get().executions_in_flight();
  for (size_t i = 0; i < count; ++i) {
    if (events[i] == nullptr) continue;
    in_flight.Launched();
    auto run = std::make_unique<TrackedRun>(TrackedRun{own ? events[i] : nullptr});
    MYPLUGIN_PJRT_ARGS(PJRT_Event_OnReady_Args, on_ready);
    on_ready.event = events[i];
    on_ready.callback = RunEnded;
    on_ready.user_arg = run.get();
    if (Engine().Consume(Engine().api()->PJRT_Event_OnReady(&on_ready)).ok()) {
      run.release();  // RunEnded frees it
    } else {
      in_flight.Ended();
    }
  }
}

ExecutableOrigins& Origins() {
  static ExecutableOrigins& origins = collectives::ProcessRuntime::Get().Attached<ExecutableOrigins>();  // once: the owner never replaces what it holds
  return origins;
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
  exec->name_ = EngineProgramName(engine_executable);
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
    // The shadow's executable answers for the program after a load (on a
    // process with no device in it too); a partition that stopped early has
    // none yet, so the entry pays for the whole compile now.
    StatusOr<const EngineExecutable*> whole = WholeProgramExecutable();
    if (!whole.ok()) return whole.status();
    StatusOr<std::string> shadow = whole.value()->Serialize();
    if (!shadow.ok()) return shadow.status();
    out.shadow_executable = shadow.take();
  }
  return EncodeSerializedExecutable(out);
}

PJRT_Error* WrapInto(Client* client, PJRT_LoadedExecutable*& slot,
                     std::shared_ptr<const spmd::PartitionedProgram> partitioned) {
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

const LoadedExecutable* OriginOf(const PJRT_Executable* executable) {
  ExecutableOrigins& o = Origins();
  std::lock_guard<std::mutex> lock(o.mu);
  auto it = o.of.find(executable);
  return it == o.of.end() ? nullptr : it->second;
}

namespace {

const spmd::PartitionedProgram* StoodInFor(const PJRT_Executable* executable) {
  const LoadedExecutable* origin = OriginOf(executable);
  return origin ? origin->stood_in_for() : nullptr;
}

}  // namespace

StatusOr<std::string> LoadedExecutable::WholeOptimizedProgram() const {
  std::lock_guard<std::mutex> lock(whole_mu_);
  if (!whole_optimized_.empty()) return whole_optimized_;
  const spmd::PartitionedProgram* whole = stood_in_for();
  if (whole == nullptr || whole->local.partitioned_module_proto.empty()) {
    return FailedPrecondition("this executable has no partitioned whole program to describe");
  }
  StatusOr<std::string> local = engine_.OptimizedProgram();
  if (!local.ok()) return local.status();
  StatusOr<std::string> out =
      WholeProgramModule(local.value(), whole->local.partitioned_module_proto, whole->assignment.size(),
                         whole->assignment.empty() ? 0 : whole->assignment[0].size());
  if (!out.ok()) return out.status();
  whole_optimized_ = out.take();
  return whole_optimized_;
}

StatusOr<const EngineExecutable*> LoadedExecutable::WholeProgramExecutable() const {
  if (!partitioned_) return FailedPrecondition("this executable is not a multi-process program");
  if (partitioned_->shadow) return partitioned_->shadow.get();
  std::lock_guard<std::mutex> lock(whole_mu_);
  if (!whole_executable_) {
    StatusOr<std::unique_ptr<EngineExecutable>> c = client_->multiprocess_compiler().CompileWholeProgram(*partitioned_);
    if (!c.ok()) return c.status();
    whole_executable_ = c.take();
  }
  return whole_executable_.get();
}

// A compile-only GPU program (pjrt/gpu_compile.h) over several processes
// answers for the whole program; one of a single process is the engine's.
template <typename Args, typename Fn>
PJRT_Error* ForTarget(TargetExecutable* target, Args* args, Fn fn, const char* name) {
  ScopedSwap<decltype(args->executable)> executable(args->executable, target->primary());
  return CallLibrary(target->engine(), fn, args, name);
}

PJRT_Error* PjrtExecutableNumReplicas(PJRT_Executable_NumReplicas_Args* args) {
  if (TargetExecutable* target = TargetExecutableOf(args->executable)) {
    if (!target->multiprocess()) {
      return ForTarget(target, args, target->engine().api()->PJRT_Executable_NumReplicas, "NumReplicas");
    }
    args->num_replicas = target->assignment().size();
    return nullptr;
  }
  if (const spmd::PartitionedProgram* whole = StoodInFor(args->executable)) {
    args->num_replicas = whole->assignment.size();
    return nullptr;
  }
  return MYPLUGIN_CALL_ENGINE(PJRT_Executable_NumReplicas, args);
}

PJRT_Error* PjrtExecutableNumPartitions(PJRT_Executable_NumPartitions_Args* args) {
  if (TargetExecutable* target = TargetExecutableOf(args->executable)) {
    if (!target->multiprocess()) {
      return ForTarget(target, args, target->engine().api()->PJRT_Executable_NumPartitions, "NumPartitions");
    }
    args->num_partitions = target->assignment().empty() ? 0 : target->assignment()[0].size();
    return nullptr;
  }
  if (const spmd::PartitionedProgram* whole = StoodInFor(args->executable)) {
    args->num_partitions = whole->assignment.empty() ? 0 : whole->assignment[0].size();
    return nullptr;
  }
  return MYPLUGIN_CALL_ENGINE(PJRT_Executable_NumPartitions, args);
}

PJRT_Error* PjrtExecutableOptimizedProgram(PJRT_Executable_OptimizedProgram_Args* args) {
  StatusOr<std::string> whole = Internal("no program");
  if (TargetExecutable* target = TargetExecutableOf(args->executable)) {
    if (!target->multiprocess()) {
      return ForTarget(target, args, target->engine().api()->PJRT_Executable_OptimizedProgram, "OptimizedProgram");
    }
    std::string format;
    whole = target->OptimizedProgram(&format);
  } else {
    const LoadedExecutable* origin = OriginOf(args->executable);
    if (origin == nullptr || origin->stood_in_for() == nullptr ||
        origin->stood_in_for()->local.partitioned_module_proto.empty()) {
      return MYPLUGIN_CALL_ENGINE(PJRT_Executable_OptimizedProgram, args);
    }
    whole = origin->WholeOptimizedProgram();
  }
  if (!whole.ok()) return ToPjrtError(whole.status());
  static const char kFormat[] = "hlo_with_config";
  PJRT_Program* program = args->program;
  program->format = kFormat;
  program->format_size = sizeof(kFormat) - 1;
  if (program->code == nullptr) {
    program->code_size = whole.value().size();
    return nullptr;
  }
  if (program->code_size < whole.value().size()) {
    return ToPjrtError(InvalidArgument("the buffer for the optimized program is too small"));
  }
  std::memcpy(program->code, whole.value().data(), whole.value().size());
  program->code_size = whole.value().size();
  return nullptr;
}

PJRT_Error* PjrtExecutableSerialize(PJRT_Executable_Serialize_Args* args) {
  StatusOr<std::string> bytes = Internal("no executable");
  if (TargetExecutable* target = TargetExecutableOf(args->executable)) {
    bytes = target->Serialize();
  } else {
    const LoadedExecutable* origin = OriginOf(args->executable);
    if (origin == nullptr) {
      return ToPjrtError(FailedPrecondition(
          "myplugin serializes only executables obtained from its loaded executables (and still loaded)"));
    }
    bytes = origin->Serialize();
  }
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
  // The launch; the engine runs the program after it returns.
  profile::Span span(ours->name().empty() ? "program" : ours->name().c_str());
  const int64_t launched = span.on() ? profile::MonotonicNowNanos() : 0;
  if (span.on()) {
    span.Add(profile::Stat::Int("devices", args->execute_device != nullptr ? 1 : static_cast<int64_t>(args->num_devices)));
  }
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, FromC(args->executable)->engine());
  // An argument that a send, a receive or an export of ours holds is not
  // donated (engine/buffer_holds.h): its memory is in use.
  std::vector<int64_t> keep;
  std::vector<char> options;
  std::optional<ScopedSwap<PJRT_ExecuteOptions*>> swapped;
  const size_t devices = args->execute_device != nullptr ? 1 : args->num_devices;
  if (args->options != nullptr &&
      args->options->struct_size >= offsetof(PJRT_ExecuteOptions, num_non_donatable_input_indices) + sizeof(size_t) &&
      collectives::ProcessRuntime::Get().buffer_holds().HeldArguments(args->argument_lists, devices, args->num_args, &keep)) {
    const PJRT_ExecuteOptions* given = args->options;
    keep.insert(keep.end(), given->non_donatable_input_indices,
                given->non_donatable_input_indices + given->num_non_donatable_input_indices);
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    options.assign(reinterpret_cast<const char*>(given), reinterpret_cast<const char*>(given) + given->struct_size);
    auto* ours = reinterpret_cast<PJRT_ExecuteOptions*>(options.data());
    ours->non_donatable_input_indices = keep.data();
    ours->num_non_donatable_input_indices = keep.size();
    swapped.emplace(args->options, ours);
  }
  // A multi-process program's device parts are counted until they end: a
  // process enters shutdown only once its devices have finished what its
  // peers wait for (collectives/executions_in_flight.h). Where jax asks for
  // no completion events, the engine makes ours.
  const bool track = ours->multi_process();
  std::vector<PJRT_Event*> own_events;
  std::optional<ScopedSwap<PJRT_Event**>> events_swapped;
  if (track) {
    DestroyEndedEvents();
    if (args->device_complete_events == nullptr) {
      own_events.assign(devices, nullptr);
      events_swapped.emplace(args->device_complete_events, own_events.data());
    }
  }
  PJRT_Error* error;
  if (args->execute_device != nullptr) {
    ScopedSwap<PJRT_Device*> device(args->execute_device, EngineOf(args->execute_device));
    error = MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_Execute, args);
  } else {
    error = MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_Execute, args);
  }
  if (track && error == nullptr) TrackRuns(args->device_complete_events, devices, !own_events.empty());
  events_swapped.reset();
  if (span.on() && error == nullptr && args->device_complete_events != nullptr) {
    ProfileRuns(ours->name(), launched, args->device_complete_events,
                args->execute_device != nullptr ? 1 : args->num_devices);
  }
  return error;
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
  if (const spmd::PartitionedProgram* whole = exec->stood_in_for()) {
    auto* r = new RemappedAssignment{WriteDeviceAssignment(whole->assignment), nullptr, nullptr};
    args->serialized_bytes = r->bytes.data();
    args->serialized_bytes_size = r->bytes.size();
    args->serialized_device_assignment = reinterpret_cast<PJRT_DeviceAssignmentSerialized*>(r);
    args->serialized_device_assignment_deleter = &DeleteRemappedAssignment;
    return nullptr;
  }
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
