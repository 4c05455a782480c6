// The global device id of each local device ordinal (the engine's
// DeviceOrdinal; on GPUs the CUDA ordinal, which need not count from 0 when
// local_device_ids restricts the GPUs). The PJRT client sets it when it
// builds its devices; the FFI handlers read it. Without it, a device's
// global id is process * devices_per_process + ordinal.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"

namespace myplugin::collectives {

// The map itself: one per process, owned by the process runtime (process_runtime.h).
class LocalDeviceIds {
 public:
  void Set(const std::vector<std::pair<int, int>>& ordinal_to_global);
  // -1 when the client has not named `ordinal`.
  int GlobalOf(int32_t ordinal);

 private:
  std::mutex mu_;
  std::map<int, int> ids_;  // under mu_
};

// The process's map (the process runtime's), set and read.
void SetLocalDeviceIds(const std::vector<std::pair<int, int>>& ordinal_to_global);

// Where a local device stands in the job: its global id, its process, and
// how many devices each process holds.
struct DeviceLocation {
  int global_id;
  int process;
  int devices_per_process;
};
DeviceLocation LocationOf(int32_t ordinal);

// What the rewrite's partition-id or replica-id call gives the local device
// `ordinal`: its entry of `ids` (one per global device), the same handler
// table on every engine.
StatusOr<uint32_t> DeviceIdFromTable(int32_t ordinal, const int64_t* ids, size_t count);

}  // namespace myplugin::collectives
