#include "collectives/nccl_communicator.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "collectives/flight_recorder.h"
#include "common/deadline.h"
#include "common/fault_delays.h"

namespace myplugin::collectives {
namespace {

// Seconds since `start`, to the hundredth: the time a call actually waited.
double WaitedSince(std::chrono::steady_clock::time_point start) {
  return std::round(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 100) / 100;
}

// The errors NCCL gives when a connection to a peer breaks under it (the
// peer died, or aborted its communicator): a failure elsewhere may be
// their cause. Argument and usage errors, and CUDA's, are this process's own.
bool PeerMayCause(ncclResult_t result) {
  return result == ncclSystemError || result == ncclInternalError || result == ncclRemoteError;
}

}  // namespace

StatusOr<ncclUniqueId> ExchangeUniqueId(const NcclApi& api, const BootstrapStore& store, const std::string& key,
                                        int rank, double timeout_s) {
  ncclUniqueId id;
  if (rank == 0) {
    MYPLUGIN_RETURN_IF_ERROR(api.Check(api.GetUniqueId(&id), "ncclGetUniqueId"));
    MYPLUGIN_RETURN_IF_ERROR(store.set(key, std::string(id.internal, sizeof(id.internal))));
    return id;
  }
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> published = store.get(key, timeout_s);
  if (!published.ok()) {
    return Status(published.status().code(), "rank " + std::to_string(rank) + " waited " +
                                                 SecondsText(WaitedSince(start)) + " for rank 0's NCCL unique id: " +
                                                 published.status().message());
  }
  if (published.value().size() != sizeof(id.internal)) {
    return DataLoss("the NCCL unique id under '" + key + "' has " + std::to_string(published.value().size()) +
                    " bytes, not " + std::to_string(sizeof(id.internal)));
  }
  std::memcpy(id.internal, published.value().data(), sizeof(id.internal));
  return id;
}

StatusOr<NcclOperands> ToNccl(DataType type, Reduction reduction) {
  auto op = [&]() -> StatusOr<ncclRedOp_t> {
    switch (reduction) {
      case Reduction::kNone:
      case Reduction::kSum: return ncclSum;
      case Reduction::kProduct: return ncclProd;
      case Reduction::kMin: return ncclMin;
      case Reduction::kMax: return ncclMax;
      default: return InvalidArgument(std::string("reduction '") + Name(reduction) + "' is for pred only");
    }
  };
  switch (type) {
    case DataType::kPred: {
      if (reduction == Reduction::kAnd || reduction == Reduction::kMin || reduction == Reduction::kProduct) {
        return NcclOperands{ncclUint8, ncclMin, 1};
      }
      return NcclOperands{ncclUint8, ncclMax, 1};
    }
    case DataType::kC64:
    case DataType::kC128: {
      if (reduction != Reduction::kSum && reduction != Reduction::kNone) {
        return Unimplemented(std::string("NCCL reduces complex numbers by sum only, not ") + Name(reduction));
      }
      return NcclOperands{type == DataType::kC64 ? ncclFloat32 : ncclFloat64, ncclSum, 2};
    }
    default: break;
  }
  StatusOr<ncclRedOp_t> o = op();
  if (!o.ok()) return o.status();
  switch (type) {
    case DataType::kS8: return NcclOperands{ncclInt8, o.value(), 1};
    case DataType::kU8: return NcclOperands{ncclUint8, o.value(), 1};
    case DataType::kS32: return NcclOperands{ncclInt32, o.value(), 1};
    case DataType::kU32: return NcclOperands{ncclUint32, o.value(), 1};
    case DataType::kS64: return NcclOperands{ncclInt64, o.value(), 1};
    case DataType::kU64: return NcclOperands{ncclUint64, o.value(), 1};
    case DataType::kF16: return NcclOperands{ncclFloat16, o.value(), 1};
    case DataType::kBF16: return NcclOperands{ncclBfloat16, o.value(), 1};
    case DataType::kF32: return NcclOperands{ncclFloat32, o.value(), 1};
    case DataType::kF64: return NcclOperands{ncclFloat64, o.value(), 1};
    default: return Unimplemented(std::string("NCCL has no ") + Name(type) + " type");
  }
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(const NcclApi& api, int rank, int size,
                                                                     const BootstrapStore& store,
                                                                     const std::string& key, double timeout_s,
                                                                     NcclCauses causes, NcclWatch watch) {
  StatusOr<ncclUniqueId> id = ExchangeUniqueId(api, store, key, rank, timeout_s);
  if (!id.ok()) return id.status();
  ncclComm_t comm = nullptr;
  const ncclResult_t result = api.CommInitRank(&comm, size, id.value(), rank);
  if (result == ncclInvalidUsage) {
    // What NCCL refuses at init ("Duplicate GPU detected") when two ranks
    // have the same host hash and the same GPU bus id (NCCL's init.cc).
    return Status(Code::kInvalidArgument,
                  api.Check(result, "ncclCommInitRank").message() + " for rank " + std::to_string(rank) + " of " +
                      std::to_string(size) +
                      ": this usually means that several ranks of the communicator are on the same GPU with the "
                      "same host identity. Each process that shares a GPU needs its own NCCL_HOSTID (myplugin-run "
                      "--share-gpu sets one per process); this process has " +
                      (api.host_id.empty() ? std::string("no NCCL_HOSTID") : "NCCL_HOSTID=" + api.host_id));
  }
  MYPLUGIN_RETURN_IF_ERROR(api.Check(result, "ncclCommInitRank"));
  std::unique_ptr<NcclCommunicator> made(
      new NcclCommunicator(api, comm, rank, size, std::move(causes), std::move(watch)));
  NcclCommunicator* polled = made.get();  // unwatched by its destructor, before NCCL's communicator goes
  if (made->watch_.watchdog != nullptr) made->watch_.watchdog->Watch(polled, [polled] { return polled->Poll(); });
  return made;
}

NcclCommunicator::~NcclCommunicator() {
  if (watch_.watchdog != nullptr) watch_.watchdog->Unwatch(this);
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_ && comm_ != nullptr) api_.CommDestroy(comm_);
}

class NcclCommunicator::InCall {
 public:
  explicit InCall(NcclCommunicator* c) : c_(c) {
    std::lock_guard<std::mutex> lock(c_->mu_);
    ++c_->in_calls_;
  }
  ~InCall() {
    {
      std::lock_guard<std::mutex> lock(c_->mu_);
      --c_->in_calls_;
    }
    c_->call_left_.notify_all();
  }
  InCall(const InCall&) = delete;
  InCall& operator=(const InCall&) = delete;

 private:
  NcclCommunicator* c_;
};

void NcclCommunicator::AbortLocked(std::unique_lock<std::mutex>& lock, const Status& why, int own) {
  if (aborted_) return;
  // Set first: a call that begins now stops at its guard, and one that is
  // looking for its error's cause finds this.
  aborted_ = why;
  call_left_.wait_for(lock, std::chrono::duration<double>(kNcclAbortWaitS), [&] { return in_calls_ <= own; });
  api_.CommAbort(comm_);  // ends kernels in flight; the communicator is gone after this
}

void NcclCommunicator::Abort(const Status& why) {
  std::unique_lock<std::mutex> lock(mu_);
  AbortLocked(lock, why, /*own=*/0);
}

std::optional<Status> NcclCommunicator::Aborted() {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

Status NcclCommunicator::Guard(Clock::time_point started) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (found_) {  // the watchdog's: this call is the first to hear of it
      Status why = *found_;
      found_.reset();
      return why;
    }
    if (aborted_) {
      return Status(Code::kAborted, "the NCCL communicator was aborted: " + aborted_->message())
          .WithFailureOf(*aborted_);
    }
  }
  // Inside a group (Group polled as it began), aborting would free the
  // communicator under the calls already in the group.
  if (in_group_) return OkStatus();
  // A kernel of an earlier call whose peer went away fails on the device:
  // NCCL says so here, or to the watchdog if it looked first.
  StatusOr<std::optional<ncclResult_t>> async = AsyncError();
  if (!async.ok()) return async.status();
  if (!async.value()) return Guard(started);  // aborted meanwhile: say why
  const ncclResult_t result = *async.value();
  if (result == ncclSuccess || result == ncclInProgress) return OkStatus();
  return OnAsyncError(result, "an earlier call on this NCCL communicator", started, /*keep=*/false, /*own=*/1);
}

std::function<void()> NcclCommunicator::Poll() {
  StatusOr<std::optional<ncclResult_t>> async = AsyncError();
  if (!async.ok() || !async.value()) return {};  // the next call sees a failed poll itself
  const ncclResult_t result = *async.value();
  if (result == ncclSuccess || result == ncclInProgress) return {};
  std::string call;
  Clock::time_point since;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call = enqueued_.empty() ? "an NCCL communicator with no call enqueued yet"
                             : enqueued_ + " (call #" + std::to_string(calls_) + " on this NCCL communicator)";
    since = enqueued_at_;
  }
  return [this, result, call, since] {
    (void)OnAsyncError(result, "the NCCL watchdog: " + call, since, /*keep=*/true, /*own=*/0);
  };
}

StatusOr<std::optional<ncclResult_t>> NcclCommunicator::AsyncError() {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return std::optional<ncclResult_t>();
  ncclResult_t async = ncclSuccess;
  MYPLUGIN_RETURN_IF_ERROR(api_.Check(api_.CommGetAsyncError(comm_, &async), "ncclCommGetAsyncError"));
  return std::optional<ncclResult_t>(async);
}

Status NcclCommunicator::OnAsyncError(ncclResult_t result, const std::string& call, Clock::time_point started,
                                      bool keep, int own) {
  Status why = Explain(result, call, started);
  {
    std::unique_lock<std::mutex> lock(mu_);
    // A notice's abort, or the other finder (the watchdog or the call), came
    // first: theirs is the reason, and it is reported there.
    if (aborted_) return why;
    if (keep) found_ = why;
    AbortLocked(lock, why, own);
  }
  if (watch_.fail_process) {
    std::vector<int> blamed;
    if (why.failure() != nullptr && why.failure()->kind == FailureKind::kPeerFailure) {
      blamed = why.failure()->processes;
    }
    const std::string who = watch_.name.empty() ? "rank " + std::to_string(rank_) + " of " + std::to_string(size_)
                                                : watch_.name;
    watch_.fail_process("aborted the NCCL communicator of " + who + ": " + why.message(), blamed);
  }
  return why;
}

void NcclCommunicator::Enqueuing(const char* call, size_t count, DataType type) {
  FaultDelay(FaultPoint::kNcclEnqueue);
  const char* function = FunctionScope::Current();
  std::lock_guard<std::mutex> lock(mu_);
  enqueued_ = std::string(call) + " of " + std::to_string(count) + " " + Name(type) +
              (function != nullptr && *function ? std::string(" in ") + function : std::string());
  enqueued_at_ = Clock::now();
  ++calls_;
}

Status NcclCommunicator::Checked(ncclResult_t result, const char* call, Clock::time_point started) {
  if (result == ncclSuccess || !PeerMayCause(result)) return api_.Check(result, call);
  return Explain(result, call, started);
}

Status NcclCommunicator::Explain(ncclResult_t result, const std::string& call, Clock::time_point started) {
  const Status nccl = api_.Check(result, call.c_str());
  if (!causes_.find) return nccl;
  // The cause wins over the broken connection it made (docs/debugging.md):
  // an abort from the service's notice, a mismatch report, a failure.
  const auto deadline = After(causes_.wait_s);
  while (true) {
    std::optional<Status> cause = Aborted();
    if (!cause) cause = causes_.find();
    if (cause) {
      return Status(cause->ok() ? Code::kAborted : cause->code(), cause->message() + " (" + nccl.message() + ")")
          .WithFailureOf(*cause);
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status(nccl.code(), api_.Check(result, call.c_str(), WaitedSince(started)).message() + " on rank " +
                                 std::to_string(rank_) + " of " + std::to_string(size_) +
                                 "; no process is known to have failed or reported a mismatch");
}

Status NcclCommunicator::Group(const std::function<Status()>& enqueue) {
  const InCall call(this);
  const auto started = Clock::now();
  MYPLUGIN_RETURN_IF_ERROR(Guard(started));
  MYPLUGIN_RETURN_IF_ERROR(Checked(api_.GroupStart(), "ncclGroupStart", started));
  in_group_ = true;
  Status st = enqueue();
  in_group_ = false;
  Status end = Checked(api_.GroupEnd(), "ncclGroupEnd", started);
  return st.ok() ? end : st;
}

Status NcclCommunicator::AllReduce(const void* send, void* recv, size_t count, DataType type, Reduction reduction,
                                   cudaStream_t stream) {
  const InCall call(this);
  const auto started = Clock::now();
  MYPLUGIN_RETURN_IF_ERROR(Guard(started));
  StatusOr<NcclOperands> o = ToNccl(type, reduction);
  if (!o.ok()) return o.status();
  Enqueuing("ncclAllReduce", count, type);
  return Checked(api_.AllReduce(send, recv, count * o.value().count_multiplier, o.value().type, o.value().op,
                                 comm_, stream),
                 "ncclAllReduce", started);
}

Status NcclCommunicator::AllGather(const void* send, void* recv, size_t count, DataType type, cudaStream_t stream) {
  const InCall call(this);
  const auto started = Clock::now();
  MYPLUGIN_RETURN_IF_ERROR(Guard(started));
  Enqueuing("ncclAllGather", count, type);
  // Gathering moves bytes: any element type travels as u8.
  return Checked(api_.AllGather(send, recv, count * ByteSize(type), ncclUint8, comm_, stream), "ncclAllGather",
                 started);
}

Status NcclCommunicator::ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                                       Reduction reduction, cudaStream_t stream) {
  const InCall call(this);
  const auto started = Clock::now();
  MYPLUGIN_RETURN_IF_ERROR(Guard(started));
  StatusOr<NcclOperands> o = ToNccl(type, reduction);
  if (!o.ok()) return o.status();
  Enqueuing("ncclReduceScatter", count, type);
  return Checked(api_.ReduceScatter(send, recv, count * o.value().count_multiplier, o.value().type, o.value().op,
                                     comm_, stream),
                 "ncclReduceScatter", started);
}

Status NcclCommunicator::AllToAll(const void* send, void* recv, size_t count, DataType type, cudaStream_t stream) {
  const InCall call(this);
  const auto started = Clock::now();
  MYPLUGIN_RETURN_IF_ERROR(Guard(started));
  const size_t bytes = count * ByteSize(type);
  Enqueuing("all-to-all (ncclSend/ncclRecv)", count, type);
  MYPLUGIN_RETURN_IF_ERROR(Checked(api_.GroupStart(), "ncclGroupStart", started));
  Status st;
  for (int peer = 0; peer < size_ && st.ok(); ++peer) {
    st = Checked(api_.Send(static_cast<const char*>(send) + peer * bytes, bytes, ncclUint8, peer, comm_, stream),
                 "ncclSend", started);
    if (st.ok()) {
      st = Checked(api_.Recv(static_cast<char*>(recv) + peer * bytes, bytes, ncclUint8, peer, comm_, stream),
                   "ncclRecv", started);
    }
  }
  Status end = Checked(api_.GroupEnd(), "ncclGroupEnd", started);
  return st.ok() ? end : st;
}

Status NcclCommunicator::CollectivePermute(const void* send, void* recv, size_t count, DataType type, int send_to,
                                           int recv_from, cudaStream_t stream) {
  const InCall call(this);
  const auto started = Clock::now();
  MYPLUGIN_RETURN_IF_ERROR(Guard(started));
  const size_t bytes = count * ByteSize(type);
  Enqueuing("collective permute (ncclSend/ncclRecv)", count, type);
  if (recv_from < 0 && bytes > 0) {
    // A rank with no source gets zeros, as from XLA's collective-permute: a
    // fill on the call's stream, ordered with the group like any kernel.
    const CUresult zeroed = api_.MemsetD8Async(reinterpret_cast<CUdeviceptr>(recv), 0, bytes,
                                               reinterpret_cast<CUstream>(stream));
    if (zeroed != CUDA_SUCCESS) {
      return Internal("cuMemsetD8Async of the " + std::to_string(bytes) +
                      " bytes of a collective permute's target that no device sends to failed (CUDA error " +
                      std::to_string(static_cast<int>(zeroed)) + ")");
    }
  }
  MYPLUGIN_RETURN_IF_ERROR(Checked(api_.GroupStart(), "ncclGroupStart", started));
  Status st;
  if (send_to >= 0) st = Checked(api_.Send(send, bytes, ncclUint8, send_to, comm_, stream), "ncclSend", started);
  if (st.ok() && recv_from >= 0) {
    st = Checked(api_.Recv(recv, bytes, ncclUint8, recv_from, comm_, stream), "ncclRecv", started);
  }
  Status end = Checked(api_.GroupEnd(), "ncclGroupEnd", started);
  return st.ok() ? end : st;
}

Status NcclCommunicator::RaggedAllToAll(const void* send, void* recv, DataType type, const RaggedPlan& plan,
                                        cudaStream_t stream) {
  const InCall call(this);
  const auto started = Clock::now();
  MYPLUGIN_RETURN_IF_ERROR(Guard(started));
  const size_t element = ByteSize(type);
  size_t sent = 0;
  for (const RaggedTransfer& t : plan.sends) sent += t.count;
  Enqueuing("ragged all-to-all (ncclSend/ncclRecv)", sent, type);
  MYPLUGIN_RETURN_IF_ERROR(Checked(api_.GroupStart(), "ncclGroupStart", started));
  // A peer's slices go in slice order on both sides: NCCL matches the
  // sends and receives between two ranks in the order they are issued.
  Status st;
  for (const RaggedTransfer& t : plan.sends) {
    if (!st.ok()) break;
    st = Checked(api_.Send(static_cast<const char*>(send) + t.offset * element, t.count * element, ncclUint8, t.peer,
                           comm_, stream),
                 "ncclSend", started);
  }
  for (const RaggedTransfer& t : plan.recvs) {
    if (!st.ok()) break;
    st = Checked(api_.Recv(static_cast<char*>(recv) + t.offset * element, t.count * element, ncclUint8, t.peer,
                           comm_, stream),
                 "ncclRecv", started);
  }
  Status end = Checked(api_.GroupEnd(), "ncclGroupEnd", started);
  return st.ok() ? end : st;
}

}  // namespace myplugin::collectives
