#include "collectives/nccl_communicator.h"

#include <cstdlib>
#include <cstring>

namespace myplugin::collectives {

StatusOr<ncclUniqueId> ExchangeUniqueId(const NcclApi& api, const BootstrapStore& store, const std::string& key,
                                        int rank, double timeout_s) {
  ncclUniqueId id;
  if (rank == 0) {
    MYPLUGIN_RETURN_IF_ERROR(api.Check(api.GetUniqueId(&id), "ncclGetUniqueId"));
    MYPLUGIN_RETURN_IF_ERROR(store.set(key, std::string(id.internal, sizeof(id.internal))));
    return id;
  }
  StatusOr<std::string> published = store.get(key, timeout_s);
  if (!published.ok()) {
    return Status(published.status().code(), "waiting for rank 0's NCCL unique id: " + published.status().message());
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
                                                                     const std::string& key, double timeout_s) {
  StatusOr<ncclUniqueId> id = ExchangeUniqueId(api, store, key, rank, timeout_s);
  if (!id.ok()) return id.status();
  ncclComm_t comm = nullptr;
  const ncclResult_t result = api.CommInitRank(&comm, size, id.value(), rank);
  if (result == ncclInvalidUsage) {
    // What NCCL refuses at init ("Duplicate GPU detected") when two ranks
    // have the same host hash and the same GPU bus id (NCCL's init.cc).
    const char* host_id = std::getenv("NCCL_HOSTID");
    return Status(Code::kInvalidArgument,
                  api.Check(result, "ncclCommInitRank").message() + " for rank " + std::to_string(rank) + " of " +
                      std::to_string(size) +
                      ": this usually means that several ranks of the communicator are on the same GPU with the "
                      "same host identity. Each process that shares a GPU needs its own NCCL_HOSTID (myplugin-run "
                      "--share-gpu sets one per process); this process has " +
                      (host_id ? "NCCL_HOSTID=" + std::string(host_id) : std::string("no NCCL_HOSTID")));
  }
  MYPLUGIN_RETURN_IF_ERROR(api.Check(result, "ncclCommInitRank"));
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(api, comm, rank, size));
}

NcclCommunicator::~NcclCommunicator() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_ && comm_ != nullptr) api_.CommDestroy(comm_);
}

void NcclCommunicator::Abort(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return;
  aborted_ = why;
  api_.CommAbort(comm_);  // ends kernels in flight; the communicator is gone after this
}

Status NcclCommunicator::Guard() {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return Status(Code::kAborted, "the NCCL communicator was aborted: " + aborted_->message());
  return OkStatus();
}

Status NcclCommunicator::Group(const std::function<Status()>& enqueue) {
  MYPLUGIN_RETURN_IF_ERROR(Guard());
  MYPLUGIN_RETURN_IF_ERROR(api_.Check(api_.GroupStart(), "ncclGroupStart"));
  Status st = enqueue();
  Status end = api_.Check(api_.GroupEnd(), "ncclGroupEnd");
  return st.ok() ? end : st;
}

Status NcclCommunicator::AllReduce(const void* send, void* recv, size_t count, DataType type, Reduction reduction,
                                   cudaStream_t stream) {
  MYPLUGIN_RETURN_IF_ERROR(Guard());
  StatusOr<NcclOperands> o = ToNccl(type, reduction);
  if (!o.ok()) return o.status();
  return api_.Check(api_.AllReduce(send, recv, count * o.value().count_multiplier, o.value().type, o.value().op,
                                   comm_, stream),
                    "ncclAllReduce");
}

Status NcclCommunicator::AllGather(const void* send, void* recv, size_t count, DataType type, cudaStream_t stream) {
  MYPLUGIN_RETURN_IF_ERROR(Guard());
  // Gathering moves bytes: any element type travels as u8.
  return api_.Check(api_.AllGather(send, recv, count * ByteSize(type), ncclUint8, comm_, stream), "ncclAllGather");
}

Status NcclCommunicator::ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                                       Reduction reduction, cudaStream_t stream) {
  MYPLUGIN_RETURN_IF_ERROR(Guard());
  StatusOr<NcclOperands> o = ToNccl(type, reduction);
  if (!o.ok()) return o.status();
  return api_.Check(api_.ReduceScatter(send, recv, count * o.value().count_multiplier, o.value().type, o.value().op,
                                       comm_, stream),
                    "ncclReduceScatter");
}

Status NcclCommunicator::AllToAll(const void* send, void* recv, size_t count, DataType type, cudaStream_t stream) {
  MYPLUGIN_RETURN_IF_ERROR(Guard());
  const size_t bytes = count * ByteSize(type);
  MYPLUGIN_RETURN_IF_ERROR(api_.Check(api_.GroupStart(), "ncclGroupStart"));
  Status st;
  for (int peer = 0; peer < size_ && st.ok(); ++peer) {
    st = api_.Check(api_.Send(static_cast<const char*>(send) + peer * bytes, bytes, ncclUint8, peer, comm_, stream),
                    "ncclSend");
    if (st.ok()) {
      st = api_.Check(api_.Recv(static_cast<char*>(recv) + peer * bytes, bytes, ncclUint8, peer, comm_, stream),
                      "ncclRecv");
    }
  }
  Status end = api_.Check(api_.GroupEnd(), "ncclGroupEnd");
  return st.ok() ? end : st;
}

Status NcclCommunicator::CollectivePermute(const void* send, void* recv, size_t count, DataType type, int send_to,
                                           int recv_from, cudaStream_t stream) {
  MYPLUGIN_RETURN_IF_ERROR(Guard());
  const size_t bytes = count * ByteSize(type);
  MYPLUGIN_RETURN_IF_ERROR(api_.Check(api_.GroupStart(), "ncclGroupStart"));
  Status st;
  if (send_to >= 0) st = api_.Check(api_.Send(send, bytes, ncclUint8, send_to, comm_, stream), "ncclSend");
  if (st.ok() && recv_from >= 0) st = api_.Check(api_.Recv(recv, bytes, ncclUint8, recv_from, comm_, stream), "ncclRecv");
  Status end = api_.Check(api_.GroupEnd(), "ncclGroupEnd");
  // A rank with no source gets zeros: that is a cudaMemsetAsync, which the
  // handler (holding the CUDA runtime) does.
  return st.ok() ? end : st;
}

}  // namespace myplugin::collectives
