#include "collectives/device_ids.h"

#include <map>
#include <mutex>

#include "coordination/runtime.h"

namespace myplugin::collectives {

namespace {
std::mutex ids_mu;
std::map<int, int>& LocalIds() {
  static auto* ids = new std::map<int, int>;
  return *ids;
}
}  // namespace

void SetLocalDeviceIds(const std::vector<std::pair<int, int>>& ordinal_to_global) {
  std::lock_guard<std::mutex> lock(ids_mu);
  LocalIds().clear();
  for (const auto& [ordinal, global] : ordinal_to_global) LocalIds()[ordinal] = global;
}

DeviceLocation LocationOf(int32_t ordinal) {
  auto& rt = coordination::DistributedRuntime::Get();
  int global = -1;
  {
    std::lock_guard<std::mutex> lock(ids_mu);
    auto it = LocalIds().find(ordinal);
    if (it != LocalIds().end()) global = it->second;
  }
  if (!rt.initialized()) return {global >= 0 ? global : ordinal, 0, 1 << 20};  // one process: all local
  int devices_per_process = rt.processes()[rt.process_id()].num_devices;
  return {global >= 0 ? global : rt.process_id() * devices_per_process + ordinal, rt.process_id(), devices_per_process};
}

}  // namespace myplugin::collectives
