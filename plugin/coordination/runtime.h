// The process's distributed runtime: its coordination client and the global
// topology agreed at startup. (The service, when this process hosts it, is
// started separately, before: jax_plugin.distributed owns it.) One
// per process, shared by the Python module and the PJRT library (both link
// the same libmyplugin_runtime.so).
#pragma once

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

class DistributedRuntime {
 public:
  static DistributedRuntime& Get();

  // Connects, registers and waits for every process. FAILED_PRECONDITION
  // if already initialized.
  Status Initialize(const RuntimeOptions& options);
  // The shutdown barrier, then the client goes away.
  Status Shutdown(double timeout_s);

  bool initialized();
  // Null when not initialized. Shared, so a call in flight survives Shutdown.
  std::shared_ptr<CoordinationClient> client();
  int process_id();
  int num_processes();
  std::vector<ProcessInfo> processes();

 private:
  DistributedRuntime() = default;
  std::mutex mu_;
  std::shared_ptr<CoordinationClient> client_;
  std::vector<ProcessInfo> processes_;
};

}  // namespace myplugin::coordination
