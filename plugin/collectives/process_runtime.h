// The process's runtime: the one owner of the state that lives once per process,
// shared by the PJRT library and the Python module (they link one libmyplugin_runtime.so).
//
// What it owns, made with it in this order (the flight recorder and the
// engines on their first use):
//   settings           parsed where a client is created or a job joined (common/settings.h)
//   library choice     the engine, shadow engine, NCCL that jax_plugin chose (engine/library_choice.h)
//   distributed        the job: coordination client, membership, topology (coordination/runtime.h)
//   flight recorder    this process's recent calls, sized by the settings of its first use;
//                      beside it the compiles in progress and each barrier's uses
//   local rendezvous   where this process's devices meet for a collective
//   executions         the multi-process programs' device parts launched and not yet ended
//   buffer holds       what keeps engine buffers' memory for our sends, receives, exports
//                      (engine/buffer_holds.h)
//   device ids         the global id of each local device ordinal, set by the client
//   communicators      one per process group and membership epoch
//   straggler watch    the current job's watch state (its threads hold it too)
//   engines            the engine libraries the PJRT library loads: main, shadow, compile
//   pack buffers       the combined calls' buffers, kept per device (pack_buffers.h)
//   NCCL               the device groups (their communicators), made on first
//                      use, the in-process key-value store that a job of
//                      one process bootstraps them through (nccl_ffi_handlers.h),
//                      and the watchdog that polls their communicators
//                      (nccl_watchdog.h; its thread starts with the first)
//   attachments        the floors above, one object per type, made on first
//                      use (Attached<T>, attachments.h): pjrt/'s engine-object
//                      map (client.cc), live compile targets (gpu_compile.cc),
//                      cost-analysis table, executables' origins
//                      (executable.cc), the running engine's FFI probe
//                      (ffi_extension.cc), the transfer endpoint of the
//                      current job and epoch (cross_host_transfers.cc),
//                      the lock of engine buffers' external references
//                      (forwarding.cc);
//                      spmd/'s hook slots (program_hooks.cc,
//                      cost_analysis_hook.cc)
// The floors above reach theirs through Attached<T>, keyed by type: the owner
// names none of their types, so no include runs up a floor, and each is held
// here with the runtime's lifetime and teardown order.
//
// Lifetime: the runtime, and all it owns, is made on first use and never
// destroyed. Engine threads, the coordination client's threads and the
// straggler watch's detached threads may still run a collective, record a
// call or read the membership while static destructors run at exit, and an
// engine library cannot be unloaded under objects jax still holds; a
// destructor at exit would pull these out from under them. So teardown is
// not destruction but these steps, in this order, while the process lives:
//   1. a failure that the service reports aborts the communicators' calls in
//      flight (each communicator's failure callback, and the NCCL device
//      groups' for theirs);
//   2. a membership agreement that changes the members (AgreeMembership,
//      in-place recovery) drops the communicators of the old membership;
//      they are rebuilt for the new epoch on their next use (the NCCL device
//      groups drop theirs when they see the new epoch), and the straggler
//      watch follows the new epoch;
//   3. the job's end (ShutdownJob) lets go of the coordination client: the
//      communicators made on it are dropped when the next job asks for one,
//      as is the transfer endpoint (its threads joined), the straggler
//      watch's threads end, and the NCCL watchdog's thread is joined (a
//      communicator made later starts it again);
//   4. the flight recorder, the local rendezvous, the settings, the library
//      choice, the engines, the pack buffers, the in-process key-value store
//      and the attachments stay until the process exits (a PJRT object's
//      entry in an attachment goes when jax destroys the object).
//
// Not held here, each made once and never destroyed, for the reason given:
//   the FFI handler adapters' slots (engine/ffi_handler_adapter.cc), a floor
//     below the owner: trampolines fixed at compile time read them with no
//     context to find an owner by; a slot, once given, never changes;
//   the GIL calls (common/gil_aware_mutex.cc), a floor below the owner: three
//     function pointers the Python module sets at its import.
// and these, which hold no state that changes once made:
//   the PJRT_Api table and its extension chain (FFI, cross-host transfers;
//     api_table.cc, ffi_extension.cc, cross_host_transfers.cc): function
//     pointers filled once;
//   the SIGUSR1 pipe of the straggler watch (straggler_watch.cc): two ints,
//     made once, all a signal handler may touch;
//   the known GPUs (engine/gpu_target.cc), the FFI version pairs, the
//     settings' names (common/settings.cc): constant tables.
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "collectives/attachments.h"
#include "collectives/communicator_cache.h"
#include "collectives/device_ids.h"
#include "collectives/executions_in_flight.h"
#include "collectives/flight_recorder.h"
#include "collectives/in_process_key_values.h"
#include "collectives/local_rendezvous.h"
#include "collectives/nccl_watchdog.h"
#include "collectives/pack_buffers.h"
#include "common/settings.h"
#include "common/status.h"
#include "coordination/runtime.h"
#include "engine/buffer_holds.h"
#include "engine/library_choice.h"

namespace myplugin {
class EngineLibrary;
}

namespace myplugin::collectives {

struct WatchState;
class NcclDeviceGroups;

class ProcessRuntime {
 public:
  static ProcessRuntime& Get();

  // The settings of the process's collectives, straggler watch and flight
  // recorder: parsed where a client is created or a job joined (the
  // environment can only be wrong there), the defaults before either.
  std::shared_ptr<const Settings> settings();
  void UseSettings(const Settings& settings);
  // ParseSettings(ProcessEnvironment), then UseSettings; the parse error
  // (INVALID_ARGUMENT naming the variable) when a value is malformed.
  StatusOr<Settings> LoadSettings();

  // jax_plugin's choice, handed over before it registers the PJRT library;
  // the default one (no engine, CPU, the system's NCCL) before. Replacing it
  // leaves libraries already loaded as they are.
  LibraryChoice library_choice();
  void SetLibraryChoice(LibraryChoice choice);

  coordination::DistributedRuntime& distributed() { return distributed_; }
  // The job's end: the shutdown barrier (distributed().Shutdown), then the
  // NCCL watchdog's thread is joined (teardown step 3 above).
  Status ShutdownJob(double timeout_s);
  FlightRecorder& flight_recorder();
  LocalRendezvous& local_rendezvous() { return local_rendezvous_; }
  LocalDeviceIds& device_ids() { return device_ids_; }
  CompileStarts& compile_starts() { return compile_starts_; }
  BarrierUses& barrier_uses() { return barrier_uses_; }
  // The multi-process programs' device parts launched here and not yet
  // ended; ShutdownJob waits for them first.
  ExecutionsInFlight& executions_in_flight() { return executions_in_flight_; }
  // The holds on engine buffers that our entry points, transfers and DLPack
  // exports consult (engine/buffer_holds.h).
  BufferHolds& buffer_holds() { return buffer_holds_; }
  CommunicatorCache& communicators() { return communicators_; }
  KeptPackBuffers& pack_buffers() { return pack_buffers_; }
  InProcessKeyValues& in_process_key_values() { return in_process_key_values_; }
  // NCCL's device groups (nccl_ffi_handlers.h, built where NCCL's headers
  // are): made by `make` the first time they are asked for; a failure is
  // kept and reported every time.
  StatusOr<NcclDeviceGroups*> nccl_device_groups(const std::function<StatusOr<NcclDeviceGroups*>()>& make);
  NcclWatchdog& nccl_watchdog() { return nccl_watchdog_; }
  // The straggler watch of the current job (straggler_watch.h); null before
  // the first StartWatch.
  std::shared_ptr<WatchState> watch();
  void set_watch(std::shared_ptr<WatchState> watch);

  // In-place recovery: the membership agreement (DistributedRuntime::Agree),
  // then, on a verdict that changes the membership (a new epoch), the
  // communicators of the old one dropped, so that every collective from now
  // on rendezvouses anew among the members.
  StatusOr<coordination::msg::Membership> AgreeMembership(double timeout_s);

  // An engine library the PJRT library loaded (engine/engine_library.h,
  // made and deleted by that library's code), or why it is not there.
  struct LoadedEngine {
    std::shared_ptr<const EngineLibrary> library;
    Status status;
  };
  enum class EngineRole { kMain, kShadow, kCompile, kCount };
  // The engine of `role`, loaded by `load` the first time it is asked for;
  // a failed load is kept and reported every time.
  const LoadedEngine& Engine(EngineRole role, const std::function<LoadedEngine()>& load);

  // The one T of the process, for a floor above this one (pjrt/, spmd/),
  // whose types the owner cannot name: made (default-constructed) on its
  // first use from any thread, then the same object on every call, with
  // the runtime's lifetime (never destroyed). attachments.h.
  template <class T>
  T& Attached() {
    return attachments_.Get<T>();
  }

 private:
  ProcessRuntime();
  ProcessRuntime(const ProcessRuntime&) = delete;
  ProcessRuntime& operator=(const ProcessRuntime&) = delete;

  std::mutex mu_;
  std::shared_ptr<const Settings> settings_;  // under mu_
  LibraryChoice library_choice_;             // under mu_
  coordination::DistributedRuntime distributed_;
  std::once_flag recorder_once_;
  std::unique_ptr<FlightRecorder> recorder_;
  CompileStarts compile_starts_;
  BarrierUses barrier_uses_;
  ExecutionsInFlight executions_in_flight_;
  BufferHolds buffer_holds_;
  LocalRendezvous local_rendezvous_;
  LocalDeviceIds device_ids_;
  CommunicatorCache communicators_;
  std::shared_ptr<WatchState> watch_;  // under mu_
  std::once_flag engine_once_[static_cast<int>(EngineRole::kCount)];
  LoadedEngine engines_[static_cast<int>(EngineRole::kCount)];
  KeptPackBuffers pack_buffers_;
  InProcessKeyValues in_process_key_values_;
  std::once_flag nccl_once_;
  NcclDeviceGroups* nccl_device_groups_ = nullptr;  // never deleted, as the runtime is not
  Status nccl_error_;
  NcclWatchdog nccl_watchdog_;
  Attachments attachments_;
};

}  // namespace myplugin::collectives
