// The process's distributed runtime: its coordination client and the global
// topology of the current members (all processes at startup; the survivors
// and the processes let back in after a membership agreement).
//
// Process ids: the coordination service knows each process by the id it
// started with, for the life of the job. Everything above it (the PJRT
// client, collectives) sees a member's index in the current membership,
// 0..members-1, as its process id: jax wants them dense. (The service, when this process hosts it, is
// started separately, before: jax_plugin.distributed owns it.) One
// per process, shared by the Python module and the PJRT library (both link
// the same libmyplugin_runtime.so).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordination/client.h"
#include "coordination/defaults.h"
#include "coordination/process_info.h"

namespace myplugin::coordination {

struct RuntimeOptions {
  // Candidate addresses of the service, tried in turn until one answers.
  std::vector<std::string> coordinator_addresses;
  int num_processes = 1;
  int process_id = 0;
  std::string token;
  double initialization_timeout_s = kDefaultInitializationTimeoutSeconds;
  bool fate_sharing = true;
  // The address peers reach this process at (local.address): the one given,
  // else the first address of `network_interface`, else this end of the
  // connection to the coordinator.
  std::string advertise_address;
  std::string network_interface;
  ProcessInfo local;
};

// The current membership in one read: its epoch, the members' coordination
// ids (index = process id above) and this process's index among them.
struct MembershipSnapshot {
  uint64_t epoch = 0;
  std::vector<int> member_ids;
  int index = 0;
};

// One per process, owned by the process runtime (collectives/process_runtime.h),
// which says how long it lives.
class DistributedRuntime {
 public:
  DistributedRuntime() = default;
  DistributedRuntime(const DistributedRuntime&) = delete;
  DistributedRuntime& operator=(const DistributedRuntime&) = delete;

  // Connects, registers and waits for every process. FAILED_PRECONDITION
  // if already initialized.
  Status Initialize(const RuntimeOptions& options);
  // The shutdown barrier, then the client goes away.
  Status Shutdown(double timeout_s);

  // The membership agreement (CoordinationClient::Agree); on a verdict the
  // members, ids and topology below are the new ones.
  StatusOr<msg::Membership> Agree(double timeout_s);

  bool initialized();
  // Null when not initialized. Shared, so a call in flight survives Shutdown.
  std::shared_ptr<CoordinationClient> client();
  // This process's index among the members, and their number.
  int process_id();
  int num_processes();
  // The members' coordination ids (index = process id above).
  std::vector<int> member_ids();
  // Their incarnations, in the same order: one changes when that process
  // is started again and let back in.
  std::vector<uint64_t> member_incarnations();
  uint64_t epoch();
  MembershipSnapshot membership();
  std::vector<ProcessInfo> processes();

 private:
  std::mutex mu_;
  // Under mu_: the verdict as the members' ids, topology and this process's index.
  Status Adopt(const msg::Membership& membership);
  std::shared_ptr<CoordinationClient> client_;
  std::vector<ProcessInfo> processes_;
  std::vector<int> member_ids_;
  std::vector<uint64_t> member_incarnations_;
  int index_ = 0;
  uint64_t epoch_ = 0;
};

}  // namespace myplugin::coordination
