#include "collectives/ffi_common.h"

#include <string>

#include "collectives/failure_record.h"
#include "collectives/local_rendezvous.h"
#include "collectives/process_runtime.h"

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
  // The program's caller gets jaxlib's exception, made from the text below;
  // the failure's fields stay here for it (jax_plugin.errors.typed).
  RecordFailure(st);
  return xla::ffi::Error(static_cast<xla::ffi::ErrorCode>(st.code()), "myplugin: " + st.message());
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
  StatusOr<std::vector<int>> device_group = GroupOf(groups, group_size, LocationOf(ordinal).global_id);
  if (!device_group.ok()) return device_group.status();
  return GroupedCall{t.value(), r.value(), device_group.take()};
}

StatusOr<std::vector<CombinedOperand>> CallOperands(const xla::ffi::RemainingArgs& args,
                                                    const xla::ffi::RemainingRets& results) {
  if (results.size() == 0 || args.size() < results.size()) {
    return InvalidArgument("a collective of " + std::to_string(args.size()) + " operands and " +
                           std::to_string(results.size()) + " results: it needs one result per operand");
  }
  std::vector<CombinedOperand> operands;
  for (size_t i = 0; i < results.size(); ++i) {
    auto x = args.get<xla::ffi::AnyBuffer>(i);
    auto y = results.get<xla::ffi::AnyBuffer>(i);
    if (x.has_error() || y.has_error()) return InvalidArgument("operand " + std::to_string(i) + " is not a buffer");
    StatusOr<DataType> type = FromFfi(x->element_type());
    if (!type.ok()) return type.status();
    if (y.value()->element_type() != x->element_type()) {
      return InvalidArgument("result " + std::to_string(i) + " differs in element type from its operand");
    }
    operands.push_back({type.value(), x->element_count(), x->untyped_data(), y.value()->untyped_data()});
  }
  return operands;
}

Status MeetLocalDevices(int32_t ordinal, const std::vector<int>& device_group, const void* send, void* recv,
                        const std::function<Status(DeviceCollectives&, const DeviceBuffers&)>& op) {
  DeviceLocation location = LocationOf(ordinal);
  DeviceCollectives dc(device_group, location.process, location.devices_per_process);
  const auto& local = dc.local_ranks();
  int slot = -1;
  for (size_t i = 0; i < local.size(); ++i) {
    if (device_group[local[i]] == location.global_id) slot = static_cast<int>(i);
  }
  if (slot < 0) return Internal("device is not in its own device group");
  return ProcessRuntime::Get().local_rendezvous().Join(
      device_group, slot, static_cast<int>(local.size()), send, recv, [&](const DeviceBuffers& b) { return op(dc, b); },
      ProcessRuntime::Get().settings()->collective_timeout_s);
}

}  // namespace myplugin::collectives
