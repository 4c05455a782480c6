#include "collectives/ffi_common.h"

#include <map>
#include <mutex>
#include <string>

#include "collectives/communicator_cache.h"
#include "collectives/local_rendezvous.h"
#include "coordination/runtime.h"

namespace myplugin::collectives {

StatusOr<DataType> FromFfi(xla::ffi::DataType t) {
  switch (t) {
    case xla::ffi::DataType::PRED: return DataType::kPred;
    case xla::ffi::DataType::S8: return DataType::kS8;
    case xla::ffi::DataType::S16: return DataType::kS16;
    case xla::ffi::DataType::S32: return DataType::kS32;
    case xla::ffi::DataType::S64: return DataType::kS64;
    case xla::ffi::DataType::U8: return DataType::kU8;
    case xla::ffi::DataType::U16: return DataType::kU16;
    case xla::ffi::DataType::U32: return DataType::kU32;
    case xla::ffi::DataType::U64: return DataType::kU64;
    case xla::ffi::DataType::F16: return DataType::kF16;
    case xla::ffi::DataType::BF16: return DataType::kBF16;
    case xla::ffi::DataType::F32: return DataType::kF32;
    case xla::ffi::DataType::F64: return DataType::kF64;
    case xla::ffi::DataType::C64: return DataType::kC64;
    case xla::ffi::DataType::C128: return DataType::kC128;
    default: return Unimplemented("myplugin collectives do not support XLA element type " +
                                  std::to_string(static_cast<int>(t)));
  }
}

xla::ffi::Error ToFfi(const Status& st) {
  if (st.ok()) return xla::ffi::Error::Success();
  return xla::ffi::Error(static_cast<xla::ffi::ErrorCode>(st.code()), "myplugin: " + st.message());
}

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

Place PlaceOf(int32_t ordinal) {
  auto& rt = coordination::DistributedRuntime::Get();
  int global = -1;
  {
    std::lock_guard<std::mutex> lock(ids_mu);
    auto it = LocalIds().find(ordinal);
    if (it != LocalIds().end()) global = it->second;
  }
  if (!rt.initialized()) return {global >= 0 ? global : ordinal, 0, 1 << 20};  // one process: all local
  int dpp = rt.processes()[rt.process_id()].num_devices;
  return {global >= 0 ? global : rt.process_id() * dpp + ordinal, rt.process_id(), dpp};
}

StatusOr<std::vector<int>> GroupOf(xla::ffi::Span<const int64_t> groups, int64_t group_size, int device) {
  if (group_size <= 0 || groups.size() % group_size != 0) {
    return InvalidArgument("replica_groups of " + std::to_string(groups.size()) + " ids do not split into groups of " +
                           std::to_string(group_size));
  }
  for (size_t start = 0; start < groups.size(); start += group_size) {
    for (int64_t i = 0; i < group_size; ++i) {
      if (groups[start + i] == device) {
        return std::vector<int>(groups.begin() + start, groups.begin() + start + group_size);
      }
    }
  }
  return InvalidArgument("device " + std::to_string(device) + " is in no replica group");
}

StatusOr<GroupedCall> DecodeGrouped(int32_t ordinal, xla::ffi::DataType type, std::string_view reduction,
                                    xla::ffi::Span<const int64_t> groups, int64_t group_size) {
  StatusOr<DataType> t = FromFfi(type);
  if (!t.ok()) return t.status();
  StatusOr<Reduction> r = reduction.empty() ? StatusOr<Reduction>(Reduction::kNone)
                                            : ParseReduction(std::string(reduction));
  if (!r.ok()) return r.status();
  StatusOr<std::vector<int>> clique = GroupOf(groups, group_size, PlaceOf(ordinal).global_id);
  if (!clique.ok()) return clique.status();
  return GroupedCall{t.value(), r.value(), clique.take()};
}

Status MeetLocalDevices(int32_t ordinal, const std::vector<int>& clique, const void* send, void* recv,
                        const std::function<Status(DeviceCollectives&, const DeviceBuffers&)>& op) {
  Place place = PlaceOf(ordinal);
  DeviceCollectives dc(clique, place.process, place.devices_per_process);
  const auto& local = dc.local_ranks();
  int slot = -1;
  for (size_t i = 0; i < local.size(); ++i) {
    if (clique[local[i]] == place.global_id) slot = static_cast<int>(i);
  }
  if (slot < 0) return Internal("device is not in its own clique");
  return LocalRendezvous::Get().Join(
      clique, slot, static_cast<int>(local.size()), send, recv, [&](const DeviceBuffers& b) { return op(dc, b); },
      CommunicatorCache::TimeoutSeconds());
}

}  // namespace myplugin::collectives
