#include "collectives/nccl_ffi_handlers.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>

#include "collectives/collective_table.h"
#include "collectives/communicator.h"
#include "collectives/process_runtime.h"
#include "collectives/device_collectives.h"
#include "collectives/device_ids.h"
#include "collectives/ffi_binding.h"
#include "collectives/ffi_common.h"
#include "collectives/flight_recorder.h"
#include "common/deadline.h"
#include "coordination/runtime.h"
#include "engine/library_choice.h"

namespace ffi = xla::ffi;

namespace myplugin::collectives {

// ---------------------------------------------------------------------------
// Communicators: one NCCL rank per device, per device group.

BootstrapStore InProcessStore() {
  BootstrapStore store;
  store.set = [](const std::string& key, const std::string& value) {
    return ProcessRuntime::Get().in_process_key_values().Set(key, value);
  };
  store.get = [](const std::string& key, double timeout_s) {
    return ProcessRuntime::Get().in_process_key_values().Get(key, timeout_s);
  };
  store.try_get = [](const std::string& key) { return ProcessRuntime::Get().in_process_key_values().Get(key, 0); };
  return store;
}

namespace {

// The rank of global device `device` in `device_group` (a device appears
// once: the rewrite's groups are checked), -1 when it is not there.
int RankIn(const std::vector<int>& device_group, int device) {
  for (size_t i = 0; i < device_group.size(); ++i) {
    if (device_group[i] == device) return static_cast<int>(i);
  }
  return -1;
}

Status CheckedCuda(CUresult result, const std::string& what) {
  if (result == CUDA_SUCCESS) return OkStatus();
  return Internal(what + " failed (CUDA error " + std::to_string(static_cast<int>(result)) + ")");
}

// A driver call of the agreement gate's: its error says how to do without.
Status CheckedGateCuda(CUresult result, const std::string& what) {
  Status st = CheckedCuda(result, what);
  if (st.ok()) return st;
  return Status(st.code(), st.message() + "; MYPLUGIN_NCCL_AGREEMENT=before agrees without it");
}

// Where the epoch's first NCCL mismatch report goes: beside the epoch's unique
// ids, whose keys are lists of device ids.
std::string MismatchKey(uint64_t epoch) { return "myplugin/nccl/" + std::to_string(epoch) + "/mismatch"; }

}  // namespace

NcclDeviceGroups::NcclDeviceGroups(NcclApi api, BootstrapStore store, double timeout_s, double notice_wait_s,
                                   NcclWatchdog* watchdog)
    : api_(std::move(api)),
      store_(std::move(store)),
      timeout_s_(timeout_s),
      notice_wait_s_(notice_wait_s),
      watchdog_(watchdog) {}

void NcclDeviceGroups::ReportMismatch(const Status& mismatch) {
  (void)store_.set(MismatchKey(ProcessRuntime::Get().distributed().epoch()), mismatch.message());
}

std::optional<Status> NcclDeviceGroups::KnownCause(uint64_t epoch) {
  // The look comes first: once it is answered, every failure notice the
  // service sent before it has been applied (communicator.h, KnownCause).
  if (store_.try_get) {
    StatusOr<std::string> mismatch = store_.try_get(MismatchKey(epoch));
    if (mismatch.ok()) {
      return Status(Code::kFailedPrecondition, mismatch.value()).WithFailure({FailureKind::kMismatch, {}, "", -1});
    }
  }
  if (store_.failure) return store_.failure();
  return std::nullopt;
}

StatusOr<NcclCommunicator*> NcclDeviceGroups::ForDevice(const std::vector<int>& device_group, int device) {
  const int rank = RankIn(device_group, device);
  if (rank < 0) return InvalidArgument("device " + std::to_string(device) + " is not in its device group");
  const uint64_t epoch = ProcessRuntime::Get().distributed().epoch();
  {
    std::lock_guard<std::mutex> lock(epoch_mu_);
    if (epoch != epoch_) {
      communicators_.Clear();
      epoch_ = epoch;
    }
  }
  // Every rank's creation waits for the others (ncclCommInitRank), and
  // they come from different threads.
  StatusOr<std::shared_ptr<NcclCommunicator>> comm =
      communicators_.Get({device_group, device}, [&]() -> StatusOr<std::shared_ptr<NcclCommunicator>> {
        std::string key = "myplugin/nccl/" + std::to_string(epoch) + "/";
        for (int d : device_group) key += std::to_string(d) + ",";
        const std::string name = "device " + std::to_string(device) + " (rank " + std::to_string(rank) +
                                 ") in device group " + IdList(device_group);
        StatusOr<std::unique_ptr<NcclCommunicator>> made =
            NcclCommunicator::Create(api_, rank, static_cast<int>(device_group.size()), store_, key, timeout_s_,
                                     {[this, epoch] { return KnownCause(epoch); }, notice_wait_s_},
                                     {watchdog_, store_.fail_process, name});
        if (!made.ok()) {
          return Status(made.status().code(), "the NCCL communicator of " + name + ": " + made.status().message());
        }
        return std::shared_ptr<NcclCommunicator>(made.take().release());
      });
  if (!comm.ok()) return comm.status();
  return comm.value().get();
}

void NcclDeviceGroups::AbortAll(const Status& why) {
  communicators_.ForEach([&](NcclCommunicator& comm) { comm.Abort(why); });
}

NcclCommunicator* NcclDeviceGroups::Existing(const std::vector<int>& device_group, int device) {
  {
    std::lock_guard<std::mutex> lock(epoch_mu_);
    if (epoch_ != ProcessRuntime::Get().distributed().epoch()) return nullptr;  // ForDevice drops the old ones
  }
  return communicators_.Find({device_group, device}).get();
}

StatusOr<AgreementGate*> NcclDeviceGroups::Gate(int ordinal) {
  std::lock_guard<std::mutex> lock(gates_mu_);
  DeviceGate& g = gates_[ordinal];
  if (g.gate) return g.gate.get();
  // Page-locked, mapped into every context's address space (portable):
  // the device reads it while the host writes it.
  const std::string whose = " of device " + std::to_string(ordinal) + "'s agreement gate";
  void* host = nullptr;
  MYPLUGIN_RETURN_IF_ERROR(CheckedGateCuda(
      api_.MemHostAlloc(&host, sizeof(uint32_t), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
      "cuMemHostAlloc" + whose));
  *static_cast<uint32_t*>(host) = 0;
  CUdeviceptr word = 0;
  MYPLUGIN_RETURN_IF_ERROR(
      CheckedGateCuda(api_.MemHostGetDevicePointer(&word, host, 0), "cuMemHostGetDevicePointer" + whose));
  g.word = word;
  g.gate = std::make_unique<AgreementGate>(static_cast<uint32_t*>(host),
                                           [this](const Status& why) { OnGateFailure(why); });
  return g.gate.get();
}

Status NcclDeviceGroups::CloseGate(int ordinal, cudaStream_t stream, uint32_t number) {
  CUdeviceptr word;
  {
    std::lock_guard<std::mutex> lock(gates_mu_);
    word = gates_[ordinal].word;
  }
  return CheckedGateCuda(
      api_.StreamWaitValue32(reinterpret_cast<CUstream>(stream), word, number, CU_STREAM_WAIT_VALUE_GEQ),
      "cuStreamWaitValue32 after an NCCL call");
}

void NcclDeviceGroups::OnGateFailure(const Status& why) {
  // As a failed agreement before the launch does, and more: the call is
  // already enqueued, and the results it holds back never come, so the
  // kernels in flight end and so does this process (it only agrees beside
  // the launch where a failure ends it), with the error.
  if (why.failure() != nullptr && why.failure()->kind == FailureKind::kMismatch) ReportMismatch(why);
  AbortAll(why);
  if (store_.fail_process) {
    store_.fail_process("an NCCL call enqueued before its agreement cannot complete: " + why.message(),
                        why.failure() != nullptr ? why.failure()->processes : std::vector<int>{});
  }
}

BootstrapStore ClientStore(const std::shared_ptr<coordination::CoordinationClient>& client) {
  BootstrapStore store;
  store.set = [client](const std::string& k, const std::string& v) { return client->KeyValueSet(k, v); };
  store.get = [client](const std::string& k, double t) { return client->KeyValueGet(k, t); };
  store.try_get = [client](const std::string& k) { return client->KeyValueTryGet(k, /*during_failure=*/true); };
  store.failure = [client] { return client->failure(); };
  // A communicator that the watchdog aborted is stuck for good, as a Gloo
  // call whose peer left is (communicator.cc): the others hear why from the
  // service, and fate-sharing ends this process. A failure the service
  // already reported is theirs to hear, not this process's to repeat.
  store.fail_process = [client](const std::string& reason, const std::vector<int>& blamed) {
    if (!client->failure()) client->FailThisProcess(reason, blamed);
  };
  return store;
}

std::unique_ptr<NcclDeviceGroups> DeviceGroupsForJob(NcclApi api) {
  auto& runtime = ProcessRuntime::Get().distributed();
  const double timeout_s = ProcessRuntime::Get().settings()->collective_timeout_s;
  NcclWatchdog* watchdog = &ProcessRuntime::Get().nccl_watchdog();
  auto client = runtime.client();
  if (!client) {
    return std::make_unique<NcclDeviceGroups>(std::move(api), InProcessStore(), timeout_s, kFailureNoticeWaitS,
                                              watchdog);
  }
  auto device_groups =
      std::make_unique<NcclDeviceGroups>(std::move(api), ClientStore(client), timeout_s, kFailureNoticeWaitS, watchdog);
  // Beside the launch only where a failed agreement ends the process: the
  // results it held back on the GPU never come (agreement_gate.h).
  device_groups->AgreeBeside(ProcessRuntime::Get().settings()->nccl_agreement == "beside" && client->fate_sharing());
  NcclDeviceGroups* aborted = device_groups.get();  // lives as long as the process (ProcessRuntime)
  client->AddFailureCallback([aborted](const Status& why) { aborted->AbortAll(why); });
  return device_groups;
}

namespace {

// The process's device groups: libnccl as jax_plugin chose it (MYPLUGIN_NCCL_PATH
// or an NCCL wheel; engine/library_choice.h), loaded and its version checked
// once (the CUDA engine's client does it as it starts: EnsureNcclLoaded).
StatusOr<NcclDeviceGroups*> DeviceGroups() {
  return ProcessRuntime::Get().nccl_device_groups([]() -> StatusOr<NcclDeviceGroups*> {
    const std::string path = ProcessRuntime::Get().library_choice().nccl_library;
    StatusOr<NcclApi> api = NcclApi::Load(path.empty() ? "libnccl.so.2" : path);
    if (!api.ok()) return api.status();
    api.value().host_id = ProcessRuntime::Get().settings()->nccl_host_id;
    return DeviceGroupsForJob(api.take()).release();
  });
}

}  // namespace

Status EnsureNcclLoaded() { return DeviceGroups().status(); }

// ---------------------------------------------------------------------------
// One call: the local devices of the device group meet, the processes agree on
// the signature (over Gloo, host side), then each device enqueues its NCCL
// operation on its own stream.

Status RunNccl(const NcclCallSite& call, const std::function<Status(NcclCommunicator&)>& enqueue,
               NcclDeviceGroups* device_groups) {
  // The local devices meet only to agree once for this process with the
  // others. A group wholly within this process (tensor parallelism over a
  // host's GPUs) has no one to agree with, so its devices' threads go
  // straight to NCCL, whose kernels wait for each other on the GPUs, as
  // XLA's own collectives do: no host barrier holds up a thread's enqueuing.
  const DeviceLocation here = LocationOf(call.ordinal);
  const int per_process = std::max(here.devices_per_process, 1);
  const bool within_process = std::all_of(call.device_group.begin(), call.device_group.end(),
                                          [&](int device) { return device / per_process == here.process; });
  // By value: on the gate it runs after this call has returned. The
  // flight recorder names the jitted function of the handler's scope.
  const char* scope = FunctionScope::Current();
  std::function<Status()> agree = [call, function = std::string(scope ? scope : "")] {
    FunctionScope named(function);
    return MeetLocalDevices(call.ordinal, call.device_group, nullptr, nullptr,
                            [&](DeviceCollectives& dc, const DeviceBuffers&) {
                              return dc.Agree(call.op, call.reduction, call.type, call.count, call.extra);
                            });
  };
  if (device_groups == nullptr) {
    StatusOr<NcclDeviceGroups*> found = DeviceGroups();
    if (!found.ok()) {
      Status agreed = within_process ? OkStatus() : agree();
      return agreed.ok() ? found.status() : agreed;
    }
    device_groups = found.value();
  }
  Status agreed;
  if (!within_process && device_groups->agree_beside()) {
    StatusOr<AgreementGate*> gate = device_groups->Gate(call.ordinal);
    if (!gate.ok()) return gate.status();
    NcclCommunicator* comm = device_groups->Existing(call.device_group, here.global_id);
    if (comm != nullptr && call.stream != nullptr) {
      return gate.value()->Enqueue(
          [&] { return enqueue(*comm); },
          [&](uint32_t number) { return device_groups->CloseGate(call.ordinal, call.stream, number); },
          std::move(agree));
    }
    // A communicator's first call agrees before ncclCommInitRank, on the
    // gate, after the calls queued there.
    agreed = gate.value()->AgreeNow(std::move(agree));
  } else if (!within_process) {
    agreed = agree();
  }
  if (!agreed.ok()) {
    if (agreed.failure() != nullptr && agreed.failure()->kind == FailureKind::kMismatch) {
      device_groups->ReportMismatch(agreed);
    }
    return agreed;
  }
  StatusOr<NcclCommunicator*> comm = device_groups->ForDevice(call.device_group, here.global_id);
  if (!comm.ok()) return comm.status();
  return enqueue(*comm.value());
}

Status EnqueueCombined(NcclCommunicator& comm, CollectiveOp op, const std::vector<CombinedOperand>& operands,
                       Reduction reduction, size_t group_size, cudaStream_t stream) {
  for (const CombinedOperand& x : operands) {  // before anything is enqueued
    if (op == CollectiveOp::kReduceScatter && x.count % group_size != 0) {
      return InvalidArgument("reduce-scatter of " + std::to_string(x.count) + " elements over " +
                             std::to_string(group_size) + " devices: the count must divide evenly");
    }
  }
  auto one = [&](const CombinedOperand& x) -> Status {
    switch (op) {
      case CollectiveOp::kAllReduce: return comm.AllReduce(x.send, x.recv, x.count, x.type, reduction, stream);
      case CollectiveOp::kAllGather: return comm.AllGather(x.send, x.recv, x.count, x.type, stream);
      case CollectiveOp::kReduceScatter:
        return comm.ReduceScatter(x.send, x.recv, x.count / group_size, x.type, reduction, stream);
      default: return InvalidArgument(std::string("a ") + Name(op) + " cannot take several operands");
    }
  };
  if (operands.size() == 1) return one(operands[0]);
  return comm.Group([&]() -> Status {
    for (const CombinedOperand& x : operands) MYPLUGIN_RETURN_IF_ERROR(one(x));
    return OkStatus();
  });
}

Status RunRaggedAllToAll(const RaggedCall& c, cudaStream_t stream, NcclDeviceGroups* device_groups) {
  if (device_groups == nullptr) {
    StatusOr<NcclDeviceGroups*> found = DeviceGroups();
    if (!found.ok()) return found.status();
    device_groups = found.value();
  }
  const NcclApi& api = device_groups->api();
  if (c.index_type != DataType::kS32 && c.index_type != DataType::kS64) {
    return InvalidArgument(std::string("ragged_all_to_all's offsets and sizes are ") + Name(c.index_type) +
                           "; they must be int32 or int64");
  }
  const CUstream on = reinterpret_cast<CUstream>(stream);
  const size_t output_bytes = static_cast<size_t>(c.output_rows) * c.row_elements * ByteSize(c.type);
  if (c.result != c.output && output_bytes > 0) {
    MYPLUGIN_RETURN_IF_ERROR(CheckedCuda(api.MemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(c.result),
                                                             reinterpret_cast<CUdeviceptr>(c.output), output_bytes, on),
                                         "cuMemcpyDtoDAsync of a ragged all-to-all's output"));
  }
  const size_t index_bytes = ByteSize(c.index_type);
  std::vector<char> host(5 * c.k * index_bytes);
  const void* arrays[] = {c.input_offsets, c.send_sizes, c.sender_pairs, c.recv_sizes};
  const size_t lengths[] = {c.k, c.k, 2 * c.k, c.k};
  size_t at = 0;
  for (int i = 0; i < 4; ++i) {
    const size_t bytes = lengths[i] * index_bytes;
    if (bytes > 0) {
      MYPLUGIN_RETURN_IF_ERROR(CheckedCuda(api.MemcpyDtoHAsync(host.data() + at,
                                                               reinterpret_cast<CUdeviceptr>(arrays[i]), bytes, on),
                                           "cuMemcpyDtoHAsync of a ragged all-to-all's offsets and sizes"));
    }
    at += bytes;
  }
  MYPLUGIN_RETURN_IF_ERROR(CheckedCuda(api.StreamSynchronize(on), "cuStreamSynchronize before a ragged all-to-all"));
  auto read = [&](size_t first, size_t count) {
    std::vector<int64_t> values(count);
    for (size_t i = 0; i < count; ++i) {
      const char* p = host.data() + (first + i) * index_bytes;
      if (c.index_type == DataType::kS32) {
        int32_t v;
        std::memcpy(&v, p, sizeof v);
        values[i] = v;
      } else {
        std::memcpy(&values[i], p, sizeof values[i]);
      }
    }
    return values;
  };
  RaggedArrays arrays_read{read(0, c.k), read(c.k, c.k), read(2 * c.k, 2 * c.k), read(4 * c.k, c.k)};
  const int rank = RankIn(c.device_group, LocationOf(c.ordinal).global_id);
  StatusOr<RaggedPlan> plan = PlanRaggedAllToAll(arrays_read, rank, static_cast<int>(c.device_group.size()),
                                                 c.input_rows, c.output_rows, c.row_elements);
  if (!plan.ok()) return plan.status();
  NcclCallSite call{c.ordinal,
                    c.device_group,
                    CollectiveOp::kRaggedAllToAll,
                    Reduction::kNone,
                    c.type,
                    static_cast<size_t>(c.input_rows) * c.row_elements,
                    HashInts({c.output_rows, static_cast<int64_t>(c.row_elements), static_cast<int64_t>(c.k)}),
                    stream};
  return RunNccl(call, [&](NcclCommunicator& comm) {
    return comm.RaggedAllToAll(c.input, c.result, c.type, plan.value(), stream);
  }, device_groups);
}

namespace {

template <typename Enqueue>
ffi::Error Grouped(cudaStream_t stream, int32_t ordinal, ffi::AnyBuffer x, CollectiveOp op,
                   std::string_view reduction, ffi::Span<const int64_t> groups, int64_t group_size,
                   std::string_view function, Enqueue enqueue) {
  FunctionScope scope(function);  // the `function` attribute: see collective_table.h
  StatusOr<GroupedCall> decoded = DecodeGrouped(ordinal, x.element_type(), reduction, groups, group_size);
  if (!decoded.ok()) return ToFfi(decoded.status());
  const GroupedCall& c = decoded.value();
  NcclCallSite call{ordinal, c.device_group, op, c.reduction, c.type, x.element_count(), 0, stream};
  return ToFfi(RunNccl(call, [&](NcclCommunicator& comm) {
    return enqueue(comm, c.type, c.reduction, x.element_count(), c.device_group.size());
  }));
}

// A collective that the rewrite may have combined (one result per operand):
// the local devices meet and the processes agree once, on a signature that
// covers every operand (their types and counts, hashed, when there are
// several), and each device enqueues them (EnqueueCombined).
ffi::Error Combinable(cudaStream_t stream, int32_t ordinal, const ffi::RemainingArgs& args,
                      const ffi::RemainingRets& results, CollectiveOp op, std::string_view reduction,
                      ffi::Span<const int64_t> groups, int64_t group_size, std::string_view function) {
  FunctionScope scope(function);  // the `function` attribute: see collective_table.h
  StatusOr<std::vector<CombinedOperand>> operands = CallOperands(args, results);
  if (!operands.ok()) return ToFfi(operands.status());
  const std::vector<CombinedOperand>& xs = operands.value();
  StatusOr<GroupedCall> decoded =
      DecodeGrouped(ordinal, args.get<ffi::AnyBuffer>(0)->element_type(), reduction, groups, group_size);
  if (!decoded.ok()) return ToFfi(decoded.status());
  const GroupedCall& c = decoded.value();
  size_t total = 0;
  for (const CombinedOperand& x : xs) total += x.count;
  NcclCallSite call{ordinal, c.device_group, op, c.reduction, c.type, total, xs.size() > 1 ? HashOperands(xs) : 0,
                    stream};
  return ToFfi(RunNccl(call, [&](NcclCommunicator& comm) {
    return EnqueueCombined(comm, op, xs, c.reduction, c.device_group.size(), stream);
  }));
}

ffi::Error AllReduceImpl(cudaStream_t stream, int32_t ordinal, ffi::RemainingArgs args, ffi::RemainingRets results,
                         std::string_view reduction, ffi::Span<const int64_t> groups, int64_t group_size,
                         std::string_view function) {
  return Combinable(stream, ordinal, args, results, CollectiveOp::kAllReduce, reduction, groups, group_size,
                    function);
}

ffi::Error ReduceScatterImpl(cudaStream_t stream, int32_t ordinal, ffi::RemainingArgs args,
                             ffi::RemainingRets results, std::string_view reduction,
                             ffi::Span<const int64_t> groups, int64_t group_size, std::string_view function) {
  return Combinable(stream, ordinal, args, results, CollectiveOp::kReduceScatter, reduction, groups, group_size,
                    function);
}

ffi::Error AllGatherImpl(cudaStream_t stream, int32_t ordinal, ffi::RemainingArgs args, ffi::RemainingRets results,
                         ffi::Span<const int64_t> groups, int64_t group_size, std::string_view function) {
  return Combinable(stream, ordinal, args, results, CollectiveOp::kAllGather, "", groups, group_size, function);
}

ffi::Error AllToAllImpl(cudaStream_t stream, int32_t ordinal, ffi::AnyBuffer x, ffi::RemainingArgs,
                        ffi::Result<ffi::AnyBuffer> y, ffi::Span<const int64_t> groups, int64_t group_size,
                        std::string_view function) {
  return Grouped(stream, ordinal, x, CollectiveOp::kAllToAll, "", groups, group_size, function,
                 [&](NcclCommunicator& c, DataType t, Reduction, size_t n, size_t size) {
                   return c.AllToAll(x.untyped_data(), y->untyped_data(), n / size, t, stream);
                 });
}

ffi::Error CollectivePermuteImpl(cudaStream_t stream, int32_t ordinal, ffi::AnyBuffer x, ffi::RemainingArgs,
                                 ffi::Result<ffi::AnyBuffer> y, ffi::Span<const int64_t> device_group_ids,
                                 ffi::Span<const int64_t> pairs_flat, std::string_view function) {
  FunctionScope scope(function);
  StatusOr<DataType> type = FromFfi(x.element_type());
  if (!type.ok()) return ToFfi(type.status());
  if (pairs_flat.size() % 2) return ToFfi(InvalidArgument("pairs must hold (source, target) pairs"));
  std::vector<int> device_group(device_group_ids.begin(), device_group_ids.end());
  const int me = LocationOf(ordinal).global_id;
  const int my_rank = RankIn(device_group, me);
  int send_to = -1, recv_from = -1;
  std::vector<int64_t> pattern(pairs_flat.begin(), pairs_flat.end());
  for (size_t i = 0; i < pairs_flat.size(); i += 2) {
    if (pairs_flat[i] == my_rank) send_to = static_cast<int>(pairs_flat[i + 1]);
    if (pairs_flat[i + 1] == my_rank) recv_from = static_cast<int>(pairs_flat[i]);
  }
  NcclCallSite call{ordinal, device_group, CollectiveOp::kCollectivePermute, Reduction::kNone, type.value(),
                    x.element_count(), HashInts(pattern), stream};
  return ToFfi(RunNccl(call, [&](NcclCommunicator& c) {
    return c.CollectivePermute(x.untyped_data(), y->untyped_data(), x.element_count(), type.value(), send_to,
                               recv_from, stream);
  }));
}

// A ragged all-to-all slices the leading dimension (jax's ragged_all_to_all):
// the elements of one row are those of the other dimensions.
size_t RowElements(const ffi::AnyBuffer& x) {
  size_t n = 1;
  auto dims = x.dimensions();
  for (size_t i = 1; i < dims.size(); ++i) n *= static_cast<size_t>(dims[i]);
  return n;
}

ffi::Error RaggedAllToAllImpl(cudaStream_t stream, int32_t ordinal, ffi::AnyBuffer output, ffi::AnyBuffer input,
                              ffi::AnyBuffer input_offsets, ffi::AnyBuffer send_sizes, ffi::AnyBuffer sender_pairs,
                              ffi::AnyBuffer recv_sizes, ffi::RemainingArgs, ffi::Result<ffi::AnyBuffer> result,
                              ffi::Span<const int64_t> groups, int64_t group_size, std::string_view function) {
  FunctionScope scope(function);
  StatusOr<GroupedCall> decoded = DecodeGrouped(ordinal, input.element_type(), "", groups, group_size);
  if (!decoded.ok()) return ToFfi(decoded.status());
  StatusOr<DataType> index_type = FromFfi(input_offsets.element_type());
  if (!index_type.ok()) return ToFfi(index_type.status());
  const size_t k = input_offsets.element_count();
  if (output.element_type() != input.element_type() || output.dimensions().size() != input.dimensions().size() ||
      input.dimensions().size() == 0 || send_sizes.element_count() != k || recv_sizes.element_count() != k ||
      sender_pairs.element_count() != 2 * k || send_sizes.element_type() != input_offsets.element_type() ||
      sender_pairs.element_type() != input_offsets.element_type() ||
      recv_sizes.element_type() != input_offsets.element_type()) {
    return ToFfi(InvalidArgument("a ragged all-to-all's operands do not fit together: the output and the input are "
                                 "arrays of one type and rank, and the offsets and sizes as many integers each "
                                 "(the rewrite writes them so)"));
  }
  const size_t row_elements = RowElements(input);
  if (RowElements(output) != row_elements) {
    return ToFfi(InvalidArgument("a ragged all-to-all's input and output rows differ in size"));
  }
  const int64_t input_rows = input.dimensions()[0], output_rows = output.dimensions()[0];
  RaggedCall call{ordinal, decoded.value().device_group, decoded.value().type, input.untyped_data(), input_rows,
                  output.untyped_data(), result->untyped_data(), output_rows, row_elements,
                  input_offsets.untyped_data(), send_sizes.untyped_data(), sender_pairs.untyped_data(),
                  recv_sizes.untyped_data(), index_type.value(), k};
  return ToFfi(RunRaggedAllToAll(call, stream));
}

// partition-id and replica-id: the device's entry of the table, written into
// the result on the stream, so that the module is the same on every process
// (and so compiles to the same schedule everywhere: the order of the
// collectives, which NCCL needs the same on every rank).
ffi::Error DeviceIdImpl(cudaStream_t stream, int32_t ordinal, ffi::Result<ffi::AnyBuffer> out,
                        ffi::Span<const int64_t> ids) {
  if (out->element_type() != ffi::DataType::U32 && out->element_type() != ffi::DataType::S32) {
    return ToFfi(InvalidArgument("partition-id/replica-id return a 32-bit integer"));
  }
  StatusOr<uint32_t> id = DeviceIdFromTable(ordinal, ids.begin(), ids.size());
  if (!id.ok()) return ToFfi(id.status());
  StatusOr<NcclDeviceGroups*> groups = DeviceGroups();
  if (!groups.ok()) return ToFfi(groups.status());
  const CUresult written = groups.value()->api().MemsetD32Async(reinterpret_cast<CUdeviceptr>(out->untyped_data()),
                                                                id.value(), 1, reinterpret_cast<CUstream>(stream));
  if (written != CUDA_SUCCESS) {
    return ToFfi(Internal("cuMemsetD32Async of a device's partition-id/replica-id failed (CUDA error " +
                          std::to_string(static_cast<int>(written)) + ")"));
  }
  return ffi::Error::Success();
}

// What every handler takes first: the stream, then the device; the rest of
// each binding is its entry of the collective table (ffi_binding.h).
auto Leading() { return ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ctx<ffi::DeviceOrdinal>(); }

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginNcclAllReduce, AllReduceImpl, Bind<kAllReduce>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginNcclReduceScatter, ReduceScatterImpl, Bind<kReduceScatter>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginNcclAllGather, AllGatherImpl, Bind<kAllGather>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginNcclAllToAll, AllToAllImpl, Bind<kAllToAll>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginNcclCollectivePermute, CollectivePermuteImpl,
                              Bind<kCollectivePermute>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginNcclRaggedAllToAll, RaggedAllToAllImpl, Bind<kRaggedAllToAll>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginCudaPartitionId, DeviceIdImpl, Bind<kPartitionId>(Leading()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MypluginCudaReplicaId, DeviceIdImpl, Bind<kReplicaId>(Leading()));

std::vector<std::pair<std::string, void*>> NcclFfiHandlers() {
  return {
      {kAllReduce.name, reinterpret_cast<void*>(&MypluginNcclAllReduce)},
      {kReduceScatter.name, reinterpret_cast<void*>(&MypluginNcclReduceScatter)},
      {kAllGather.name, reinterpret_cast<void*>(&MypluginNcclAllGather)},
      {kAllToAll.name, reinterpret_cast<void*>(&MypluginNcclAllToAll)},
      {kCollectivePermute.name, reinterpret_cast<void*>(&MypluginNcclCollectivePermute)},
      {kRaggedAllToAll.name, reinterpret_cast<void*>(&MypluginNcclRaggedAllToAll)},
      {kPartitionId.name, reinterpret_cast<void*>(&MypluginCudaPartitionId)},
      {kReplicaId.name, reinterpret_cast<void*>(&MypluginCudaReplicaId)},
  };
}

}  // namespace myplugin::collectives
