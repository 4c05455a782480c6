// Where the devices of one process meet for a collective. XLA runs each
// device of an executable on its own thread, and each calls our FFI handler
// with its own buffers; the last of a device group's local devices to arrive runs
// the collective for all of them (device_collectives.h), and every one of
// them returns its status. Waits are bounded; a timeout names the local
// devices that never came.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "collectives/device_collectives.h"
#include "common/status.h"

namespace myplugin::collectives {

// One per process, owned by the process runtime (process_runtime.h).
class LocalRendezvous {
 public:
  // `slot` is this device's position among the device group's `local_count` local
  // devices (a timeout names the slots that never came).
  Status Join(const std::vector<int>& device_group, int slot, int local_count, const void* send, void* recv,
              const std::function<Status(const DeviceBuffers&)>& op, double timeout_s);

 private:
  struct Group {
    int arrived = 0;
    int departed = 0;
    bool done = false;
    Status status;
    DeviceBuffers buffers;
    std::vector<bool> present;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::vector<int>, Group> groups_;
};

}  // namespace myplugin::collectives
