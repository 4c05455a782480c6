// The global device id of each local device ordinal (the engine's
// DeviceOrdinal; on GPUs the CUDA ordinal, which need not count from 0 when
// local_device_ids restricts the GPUs). The PJRT client sets it when it
// builds its devices; the FFI handlers read it. Without it, a device's
// global id is process * devices_per_process + ordinal.
#pragma once

#include <utility>
#include <vector>

namespace myplugin::collectives {

void SetLocalDeviceIds(const std::vector<std::pair<int, int>>& ordinal_to_global);

}  // namespace myplugin::collectives
