#include "collectives/ffi_handlers.h"

#include <cstring>
#include <mutex>
#include <string_view>
#include <vector>

#include "collectives/collective_table.h"
#include "collectives/device_collectives.h"
#include "collectives/ffi_binding.h"
#include "collectives/ffi_common.h"
#include "collectives/flight_recorder.h"
#include "collectives/pack_buffers.h"
#include "collectives/process_runtime.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace myplugin::collectives {
namespace {

// The shared body of the handlers that work on replica groups: decode the
// element type (and reduction), find this device's group, meet the group's
// other local devices, and run `op(dc, buffers, count, type, reduction, extra)`.
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
                                  return op(dc, b, count, c.type, c.reduction, 0);
                                }));
}

// A collective that the rewrite may have combined (one result per operand;
// combined_operands.h). One operand takes the plain path; several are packed
// into one run per element type, and the local devices meet once for all runs.
template <typename Op>
ffi::Error Combinable(CollectiveOp kind, int32_t ordinal, const ffi::RemainingArgs& args,
                      const ffi::RemainingRets& results, std::string_view reduction,
                      ffi::Span<const int64_t> replica_groups, int64_t group_size, std::string_view function,
                      Op op) {
  StatusOr<std::vector<CombinedOperand>> operands = CallOperands(args, results);
  if (!operands.ok()) return ToFfi(operands.status());
  if (operands.value().size() == 1) {
    return Grouped(ordinal, args.get<ffi::AnyBuffer>(0).value(), results.get<ffi::AnyBuffer>(0).value(), reduction,
                   replica_groups, group_size, function, op);
  }
  FunctionScope scope(function);
  StatusOr<GroupedCall> call =
      DecodeGrouped(ordinal, args.get<ffi::AnyBuffer>(0)->element_type(), reduction, replica_groups, group_size);
  if (!call.ok()) return ToFfi(call.status());
  const GroupedCall& c = call.value();
  StatusOr<CombinedOperands> combined =
      CombinedOperands::Make(kind, operands.take(), static_cast<int>(c.device_group.size()));
  if (!combined.ok()) return ToFfi(combined.status());
  const CombinedOperands& plan = combined.value();
  // A call that finds its device's kept buffers in use (two executions at
  // once) packs into its own.
  PackBuffers& kept = ProcessRuntime::Get().pack_buffers().ForDevice(ordinal);
  std::unique_lock<std::mutex> hold(kept.mu, std::try_to_lock);
  PackBuffers own;
  PackBuffers& buffers = hold.owns_lock() ? kept : own;
  std::vector<char>& send = buffers.send;
  std::vector<char>& recv = buffers.recv;
  if (send.size() < plan.send_bytes()) send.resize(plan.send_bytes());
  if (recv.size() < plan.recv_bytes()) recv.resize(plan.recv_bytes());
  plan.Pack(send.data());
  Status st = MeetLocalDevices(ordinal, c.device_group, send.data(), recv.data(),
                               [&](DeviceCollectives& dc, const DeviceBuffers& b) {
                                 for (const CombinedOperands::Run& run : plan.runs()) {
                                   DeviceBuffers part;
                                   for (const void* p : b.send) {
                                     part.send.push_back(static_cast<const char*>(p) + run.send_offset);
                                   }
                                   for (void* p : b.recv) part.recv.push_back(static_cast<char*>(p) + run.recv_offset);
                                   Status done = op(dc, part, run.count, run.type, c.reduction, plan.hash());
                                   if (!done.ok()) return done;
                                 }
                                 return OkStatus();
                               });
  if (!st.ok()) return ToFfi(st);
  plan.Unpack(recv.data());
  return ffi::Error::Success();
}

// All-reduce and reduce-scatter: `kind`, run by DeviceCollectives' `call`.
template <CollectiveOp kind,
          Status (DeviceCollectives::*call)(const DeviceBuffers&, size_t, DataType, Reduction, uint64_t)>
ffi::Error ReducingImpl(int32_t ordinal, ffi::RemainingArgs args, ffi::RemainingRets results,
                        std::string_view reduction, ffi::Span<const int64_t> groups, int64_t group_size,
                        std::string_view function) {
  return Combinable(kind, ordinal, args, results, reduction, groups, group_size, function,
                    [](DeviceCollectives& dc, const DeviceBuffers& b, size_t n, DataType t, Reduction r,
                       uint64_t extra) { return (dc.*call)(b, n, t, r, extra); });
}
constexpr auto AllReduceImpl = ReducingImpl<CollectiveOp::kAllReduce, &DeviceCollectives::AllReduce>;
constexpr auto ReduceScatterImpl = ReducingImpl<CollectiveOp::kReduceScatter, &DeviceCollectives::ReduceScatter>;

ffi::Error AllGatherImpl(int32_t ordinal, ffi::RemainingArgs args, ffi::RemainingRets results,
                         ffi::Span<const int64_t> groups, int64_t group_size, std::string_view function) {
  return Combinable(CollectiveOp::kAllGather, ordinal, args, results, "", groups, group_size, function,
                    [](DeviceCollectives& dc, const DeviceBuffers& b, size_t n, DataType t, Reduction,
                       uint64_t extra) { return dc.AllGather(b, n, t, extra); });
}

ffi::Error AllToAllImpl(int32_t ordinal, ffi::AnyBuffer x, ffi::RemainingArgs, ffi::Result<ffi::AnyBuffer> y,
                        ffi::Span<const int64_t> groups, int64_t group_size, std::string_view function) {
  return Grouped(ordinal, x, y, "", groups, group_size, function,
                 [](DeviceCollectives& dc, const DeviceBuffers& b, size_t n, DataType t, Reduction, uint64_t) {
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
  if (out->element_type() != ffi::DataType::U32 && out->element_type() != ffi::DataType::S32) {
    return ToFfi(InvalidArgument("partition-id/replica-id return a 32-bit integer"));
  }
  StatusOr<uint32_t> id = DeviceIdFromTable(ordinal, ids.begin(), ids.size());
  if (!id.ok()) return ToFfi(id.status());
  *static_cast<uint32_t*>(out->untyped_data()) = id.value();
  return ffi::Error::Success();
}

// Returns `x` (aliased in place by the program) once the operands after it
// are ready: the multi-process rewrite orders loops after collectives with it.
ffi::Error OrderFenceImpl(ffi::AnyBuffer x, ffi::RemainingArgs, ffi::Result<ffi::AnyBuffer> y) {
  if (y->untyped_data() != x.untyped_data()) std::memcpy(y->untyped_data(), x.untyped_data(), x.size_bytes());
  return ffi::Error::Success();
}

}  // namespace

// The grouped handlers take the device ordinal first; the rest of each
// binding is its entry of the collective table (ffi_binding.h).
auto Leading() { return ffi::Ffi::Bind().Ctx<ffi::DeviceOrdinal>(); }

XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginAllReduce, AllReduceImpl, Bind<kAllReduce>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginReduceScatter, ReduceScatterImpl, Bind<kReduceScatter>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginAllGather, AllGatherImpl, Bind<kAllGather>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginAllToAll, AllToAllImpl, Bind<kAllToAll>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginCollectivePermute, CollectivePermuteImpl, Bind<kCollectivePermute>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginPartitionId, DeviceIdImpl, Bind<kPartitionId>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginReplicaId, DeviceIdImpl, Bind<kReplicaId>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginOrderFence, OrderFenceImpl, Bind<kOrderFence>(ffi::Ffi::Bind()));

std::vector<std::pair<std::string, void*>> FfiHandlers() {
  return {
      {kAllReduce.name, reinterpret_cast<void*>(&MypluginAllReduce)},
      {kReduceScatter.name, reinterpret_cast<void*>(&MypluginReduceScatter)},
      {kAllGather.name, reinterpret_cast<void*>(&MypluginAllGather)},
      {kAllToAll.name, reinterpret_cast<void*>(&MypluginAllToAll)},
      {kCollectivePermute.name, reinterpret_cast<void*>(&MypluginCollectivePermute)},
      {kPartitionId.name, reinterpret_cast<void*>(&MypluginPartitionId)},
      {kReplicaId.name, reinterpret_cast<void*>(&MypluginReplicaId)},
      {kOrderFence.name, reinterpret_cast<void*>(&MypluginOrderFence)},
  };
}

}  // namespace myplugin::collectives
