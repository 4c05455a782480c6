// The process's communicators, one per process group, made on first use through
// the coordination service and aborted when it reports a failure.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/defaults.h"
#include "collectives/gloo_communicator.h"
#include "collectives/once_per_key.h"
#include "common/status.h"

namespace myplugin::collectives {

class CommunicatorCache {
 public:
  static CommunicatorCache& Get();

  // The communicator of `process_group` (process ids in rank order; empty means all
  // processes) for the device group `devices` (global device ids; empty
  // for process-level calls). Every process of the process group must ask for it.
  StatusOr<std::shared_ptr<Communicator>> ForProcessGroup(std::vector<int> process_group, const std::vector<int>& devices = {});

  // The settings below come from the environment; their defaults are in
  // collectives/defaults.h.
  // MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS: how long a call waits for every
  // process to reach it.
  static double TimeoutSeconds();
  // That, MYPLUGIN_COLLECTIVE_STALL_SECONDS and MYPLUGIN_COLLECTIVE_CAP_SECONDS
  // (call_clock.h).
  static WaitLimits Limits();
  // MYPLUGIN_PEER_EXIT_GRACE_SECONDS: how long a call may still wait for a
  // process that has finished before the call counts as stuck.
  static double PeerExitGraceSeconds();
  // MYPLUGIN_STRAGGLER_SECONDS: how long a process may wait in a collective
  // or barrier before the job prints a straggler report; 0 is off.
  // INVALID_ARGUMENT for a value that is not a number of seconds.
  static StatusOr<double> StragglerSeconds();
  // MYPLUGIN_TRACE_BUFFER: the calls each flight recorder keeps.
  static StatusOr<size_t> TraceBufferSize();
  // MYPLUGIN_TRACE_DIR: where flight recorders are written; empty means a
  // per-job folder under the temp dir.
  static std::string TraceDir();
  // MYPLUGIN_TRANSPORT: auto, shm, gloo or hierarchical; INVALID_ARGUMENT for another.
  static StatusOr<std::string> Transport();

 private:
  CommunicatorCache() = default;
  StatusOr<std::shared_ptr<Communicator>> Make(const std::vector<int>& process_group, const std::vector<int>& devices,
                                               const std::shared_ptr<coordination::CoordinationClient>& client);
  // The Gloo communicator of `process_group`, its rendezvous keys under `prefix`.
  static StatusOr<std::unique_ptr<GlooCommunicator>> MakeGloo(
      const std::vector<int>& process_group, const std::shared_ptr<coordination::CoordinationClient>& client,
      const std::string& prefix);
  OncePerKey<std::pair<std::vector<int>, std::vector<int>>, Communicator> communicators_;
  std::mutex mu_;
  const void* client_seen_ = nullptr;  // under mu_: the coordination client the cache belongs to
  uint64_t epoch_seen_ = 0;            // under mu_: and the membership epoch
};

}  // namespace myplugin::collectives
