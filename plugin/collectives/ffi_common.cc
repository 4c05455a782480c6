#include "collectives/ffi_common.h"

#include <map>
#include <mutex>
#include <string>

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

}  // namespace myplugin::collectives
