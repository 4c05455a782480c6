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
#include "common/settings.h"
#include "common/status.h"

namespace myplugin::collectives {

// The address this process listens at for direct connections from the
// processes of `process_group` (process ids): the one it advertised when it
// registered, or, where that is a loopback address and a peer is on another
// host, where the route to that peer leaves from. INVALID_ARGUMENT when the
// processes advertised addresses of different families.
StatusOr<std::string> ListenHostFor(const std::vector<int>& process_group);

// One per process, owned by the process runtime (process_runtime.h).
class CommunicatorCache {
 public:
  CommunicatorCache() = default;
  CommunicatorCache(const CommunicatorCache&) = delete;
  CommunicatorCache& operator=(const CommunicatorCache&) = delete;

  // The communicator of `process_group` (process ids in rank order; empty means all
  // processes) for the device group `devices` (global device ids; empty
  // for process-level calls). Every process of the process group must ask for it.
  StatusOr<std::shared_ptr<Communicator>> ForProcessGroup(std::vector<int> process_group, const std::vector<int>& devices = {});

  // Lets go of every communicator: the next call of each process group
  // makes its communicator anew (in-place recovery, after the membership
  // agreement). Calls in flight keep theirs to the end.
  void Drop();

  // The wait limits of communicators made with `settings` (call_clock.h).
  static WaitLimits Limits(const Settings& settings);

 private:
  StatusOr<std::shared_ptr<Communicator>> Make(const std::vector<int>& process_group, const std::vector<int>& devices,
                                               const std::shared_ptr<coordination::CoordinationClient>& client,
                                               const Settings& settings);
  // The Gloo communicator of `process_group`, its rendezvous keys under `prefix`.
  static StatusOr<std::unique_ptr<GlooCommunicator>> MakeGloo(
      const std::vector<int>& process_group, const std::shared_ptr<coordination::CoordinationClient>& client,
      const std::string& prefix, const WaitLimits& limits);
  OncePerKey<std::pair<std::vector<int>, std::vector<int>>, Communicator> communicators_;
  std::mutex mu_;
  const void* client_seen_ = nullptr;  // under mu_: the coordination client the cache belongs to
  uint64_t epoch_seen_ = 0;            // under mu_: and the membership epoch
};

}  // namespace myplugin::collectives
