#include "collectives/ffi_handlers.h"

#include <cstring>
#include <string_view>

#include "collectives/device_collectives.h"
#include "collectives/ffi_common.h"
#include "collectives/flight_recorder.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace myplugin::collectives {
namespace {

// The shared body of the handlers that work on replica groups: decode the
// element type (and reduction), find this device's group, meet the group's
// other local devices, and run `op(dc, buffers, count, type, reduction)`.
template <typename Op>
ffi::Error Grouped(int32_t ordinal, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, std::string_view reduction,
                   ffi::Span<const int64_t> replica_groups, int64_t group_size, std::string_view function, Op op) {
  FunctionScope scope(function);
  StatusOr<GroupedCall> call = DecodeGrouped(ordinal, x.element_type(), reduction, replica_groups, group_size);
  if (!call.ok()) return ToFfi(call.status());
  const size_t count = x.element_count();
  const GroupedCall& c = call.value();
  return ToFfi(MeetLocalDevices(ordinal, c.device_group, x.untyped_data(), y->untyped_data(),
                                [&](DeviceCollectives& dc, const DeviceBuffers& b) {
                                  return op(dc, b, count, c.type, c.reduction);
                                }));
}

ffi::Error AllReduceImpl(int32_t ordinal, ffi::AnyBuffer x, ffi::RemainingArgs, ffi::Result<ffi::AnyBuffer> y, std::string_view reduction,
                         ffi::Span<const int64_t> groups, int64_t group_size, std::string_view function) {
  return Grouped(ordinal, x, y, reduction, groups, group_size, function,
                 [](DeviceCollectives& dc, const DeviceBuffers& b, size_t n, DataType t, Reduction r) {
                   return dc.AllReduce(b, n, t, r);
                 });
}

ffi::Error ReduceScatterImpl(int32_t ordinal, ffi::AnyBuffer x, ffi::RemainingArgs, ffi::Result<ffi::AnyBuffer> y,
                             std::string_view reduction, ffi::Span<const int64_t> groups, int64_t group_size,
                             std::string_view function) {
  return Grouped(ordinal, x, y, reduction, groups, group_size, function,
                 [](DeviceCollectives& dc, const DeviceBuffers& b, size_t n, DataType t, Reduction r) {
                   return dc.ReduceScatter(b, n, t, r);
                 });
}

ffi::Error AllGatherImpl(int32_t ordinal, ffi::AnyBuffer x, ffi::RemainingArgs, ffi::Result<ffi::AnyBuffer> y,
                         ffi::Span<const int64_t> groups, int64_t group_size, std::string_view function) {
  return Grouped(ordinal, x, y, "", groups, group_size, function,
                 [](DeviceCollectives& dc, const DeviceBuffers& b, size_t n, DataType t, Reduction) {
                   return dc.AllGather(b, n, t);
                 });
}

ffi::Error AllToAllImpl(int32_t ordinal, ffi::AnyBuffer x, ffi::RemainingArgs, ffi::Result<ffi::AnyBuffer> y,
                        ffi::Span<const int64_t> groups, int64_t group_size, std::string_view function) {
  return Grouped(ordinal, x, y, "", groups, group_size, function,
                 [](DeviceCollectives& dc, const DeviceBuffers& b, size_t n, DataType t, Reduction) {
                   return dc.AllToAll(b, n, t);
                 });
}

ffi::Error CollectivePermuteImpl(int32_t ordinal, ffi::AnyBuffer x, ffi::RemainingArgs, ffi::Result<ffi::AnyBuffer> y,
                                 ffi::Span<const int64_t> device_group_ids, ffi::Span<const int64_t> pairs_flat,
                                 std::string_view function) {
  FunctionScope scope(function);
  StatusOr<DataType> type = FromFfi(x.element_type());
  if (!type.ok()) return ToFfi(type.status());
  if (pairs_flat.size() % 2) return ToFfi(InvalidArgument("pairs must hold (source, target) pairs"));
  std::vector<int> device_group(device_group_ids.begin(), device_group_ids.end());
  std::vector<std::pair<int, int>> pairs;
  for (size_t i = 0; i < pairs_flat.size(); i += 2) pairs.emplace_back(pairs_flat[i], pairs_flat[i + 1]);
  const size_t count = x.element_count();
  return ToFfi(MeetLocalDevices(ordinal, device_group, x.untyped_data(), y->untyped_data(),
                                [&](DeviceCollectives& dc, const DeviceBuffers& b) {
                                  return dc.CollectivePermute(b, count, type.value(), pairs);
                                }));
}

ffi::Error DeviceIdImpl(int32_t ordinal, ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> ids) {
  int g = LocationOf(ordinal).global_id;
  if (g < 0 || static_cast<size_t>(g) >= ids.size()) {
    return ToFfi(InvalidArgument("no id for device " + std::to_string(g)));
  }
  if (out->element_type() != ffi::DataType::U32 && out->element_type() != ffi::DataType::S32) {
    return ToFfi(InvalidArgument("partition-id/replica-id return a 32-bit integer"));
  }
  *static_cast<uint32_t*>(out->untyped_data()) = static_cast<uint32_t>(ids[g]);
  return ffi::Error::Success();
}

// Returns `x` (aliased in place by the program) once the operands after it
// are ready: the multi-process rewrite orders loops after collectives with it.
ffi::Error OrderFenceImpl(ffi::AnyBuffer x, ffi::RemainingArgs, ffi::Result<ffi::AnyBuffer> y) {
  if (y->untyped_data() != x.untyped_data()) std::memcpy(y->untyped_data(), x.untyped_data(), x.size_bytes());
  return ffi::Error::Success();
}

}  // namespace

// The two bindings of the grouped handlers: with a reduction, and without.
//
// Every collective carries `function`, the name of the jitted function (the
// module) it belongs to, for the flight recorder. An attribute, rather than
// a table of names kept per executable: the handlers run on the engine's
// threads after Execute has returned (so nothing set around Execute reaches
// them reliably), while an attribute travels inside the program itself,
// through serialization and the compilation cache, and costs one string view.
auto ReducingBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::DeviceOrdinal>()
      .Arg<ffi::AnyBuffer>()
      .RemainingArgs()
      .Ret<ffi::AnyBuffer>()
      .Attr<std::string_view>("reduction")
      .Attr<ffi::Span<const int64_t>>("replica_groups")
      .Attr<int64_t>("group_size")
      .Attr<std::string_view>("function");
}

auto NonReducingBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::DeviceOrdinal>()
      .Arg<ffi::AnyBuffer>()
      .RemainingArgs()
      .Ret<ffi::AnyBuffer>()
      .Attr<ffi::Span<const int64_t>>("replica_groups")
      .Attr<int64_t>("group_size")
      .Attr<std::string_view>("function");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginAllReduce, AllReduceImpl, ReducingBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginReduceScatter, ReduceScatterImpl, ReducingBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginAllGather, AllGatherImpl, NonReducingBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginAllToAll, AllToAllImpl, NonReducingBinding());

XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginCollectivePermute, CollectivePermuteImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()
                                  .RemainingArgs()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("device_group")
                                  .Attr<ffi::Span<const int64_t>>("pairs")
                                  .Attr<std::string_view>("function"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginDeviceId, DeviceIdImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("ids"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginOrderFence, OrderFenceImpl,
                              ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().RemainingArgs().Ret<ffi::AnyBuffer>());

std::vector<std::pair<std::string, void*>> FfiHandlers() {
  return {
      {"myplugin_all_reduce", reinterpret_cast<void*>(&MypluginAllReduce)},
      {"myplugin_reduce_scatter", reinterpret_cast<void*>(&MypluginReduceScatter)},
      {"myplugin_all_gather", reinterpret_cast<void*>(&MypluginAllGather)},
      {"myplugin_all_to_all", reinterpret_cast<void*>(&MypluginAllToAll)},
      {"myplugin_collective_permute", reinterpret_cast<void*>(&MypluginCollectivePermute)},
      {"myplugin_partition_id", reinterpret_cast<void*>(&MypluginDeviceId)},
      {"myplugin_replica_id", reinterpret_cast<void*>(&MypluginDeviceId)},
      {"myplugin_order_fence", reinterpret_cast<void*>(&MypluginOrderFence)},
  };
}

}  // namespace myplugin::collectives
