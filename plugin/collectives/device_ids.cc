#include "collectives/device_ids.h"

#include "collectives/process_runtime.h"
#include "coordination/runtime.h"

namespace myplugin::collectives {

void LocalDeviceIds::Set(const std::vector<std::pair<int, int>>& ordinal_to_global) {
  std::lock_guard<std::mutex> lock(mu_);
  ids_.clear();
  for (const auto& [ordinal, global] : ordinal_to_global) ids_[ordinal] = global;
}

int LocalDeviceIds::GlobalOf(int32_t ordinal) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ids_.find(ordinal);
  return it != ids_.end() ? it->second : -1;
}

void SetLocalDeviceIds(const std::vector<std::pair<int, int>>& ordinal_to_global) {
  ProcessRuntime::Get().device_ids().Set(ordinal_to_global);
}

DeviceLocation LocationOf(int32_t ordinal) {
  ProcessRuntime& process = ProcessRuntime::Get();
  auto& rt = process.distributed();
  const int global = process.device_ids().GlobalOf(ordinal);
  if (!rt.initialized()) return {global >= 0 ? global : ordinal, 0, 1 << 20};  // one process: all local
  int devices_per_process = rt.processes()[rt.process_id()].num_devices;
  return {global >= 0 ? global : rt.process_id() * devices_per_process + ordinal, rt.process_id(), devices_per_process};
}

StatusOr<uint32_t> DeviceIdFromTable(int32_t ordinal, const int64_t* ids, size_t count) {
  const int g = LocationOf(ordinal).global_id;
  if (g < 0 || static_cast<size_t>(g) >= count) return InvalidArgument("no id for device " + std::to_string(g));
  return static_cast<uint32_t>(ids[g]);
}

}  // namespace myplugin::collectives
