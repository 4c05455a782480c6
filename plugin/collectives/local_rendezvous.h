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
#include <string>
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

  // The client's teardown: every device waiting for local devices that have
  // not all come leaves with an ABORTED status saying `why`, and new joins
  // are refused, until Reopen. The engine's threads are joined next, and one
  // waiting here for a device whose part will never run held the teardown
  // for the collective timeout. Returns a line for each collective it cut
  // short (empty: none), for the teardown's message.
  std::vector<std::string> Close(const std::string& why);
  // A new client: joins are served again.
  void Reopen();
  // How many of a group's local devices are in it now (tests).
  int Arrived(const std::vector<int>& device_group);

 private:
  struct Group {
    int arrived = 0;
    int departed = 0;
    bool done = false;
    Status status;
    DeviceBuffers buffers;
    std::vector<bool> present;
  };
  // Takes the device in `slot` back out of a group it leaves before the
  // collective ran (a timeout, a close): its buffers must not be used by a
  // device that comes later.
  static void Withdraw(Group& g, int slot);
  static std::string Waiting(const std::vector<int>& device_group, const Group& g, int local_count);

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::vector<int>, Group> groups_;
  bool closed_ = false;
  std::string closed_why_;
};

}  // namespace myplugin::collectives
