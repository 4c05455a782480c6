// The GPU backend: NCCL, one rank per device, enqueued on the caller's CUDA
// stream (the FFI handlers' PlatformStream). The unique id that NCCL needs
// to form a communicator goes through our key-value store. On a failure
// that the coordination service reports, Abort() calls ncclCommAbort, which
// ends kernels in flight.
//
// Built wherever NCCL's headers are; never run on this project's machines
// (no GPU). Its logic is unit-tested against a fake NcclApi.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/nccl_api.h"
#include "common/status.h"

namespace myplugin::collectives {

// The key-value store, as the bootstrap sees it.
struct BootstrapStore {
  std::function<Status(const std::string& key, const std::string& value)> set;
  std::function<StatusOr<std::string>(const std::string& key, double timeout_s)> get;
};

// Rank 0 makes the unique id and publishes it under `key`; the others read it.
StatusOr<ncclUniqueId> ExchangeUniqueId(const NcclApi& api, const BootstrapStore& store, const std::string& key,
                                        int rank, double timeout_s);

// How our element types and reductions map onto NCCL's. Complex numbers
// travel as pairs of floats (sum only); pred as u8 with and = min, or = max.
struct NcclOperands {
  ncclDataType_t type;
  ncclRedOp_t op;
  size_t count_multiplier;
};
StatusOr<NcclOperands> ToNccl(DataType type, Reduction reduction);

class NcclCommunicator {
 public:
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(const NcclApi& api, int rank, int size,
                                                            const BootstrapStore& store, const std::string& key,
                                                            double timeout_s);
  ~NcclCommunicator();

  int rank() const { return rank_; }
  int size() const { return size_; }

  Status AllReduce(const void* send, void* recv, size_t count, DataType type, Reduction reduction,
                   cudaStream_t stream);
  Status AllGather(const void* send, void* recv, size_t count, DataType type, cudaStream_t stream);
  // count: elements each rank receives.
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, Reduction reduction,
                       cudaStream_t stream);
  // count: elements per destination block.
  Status AllToAll(const void* send, void* recv, size_t count, DataType type, cudaStream_t stream);
  // send_to / recv_from: ranks, or -1.
  Status CollectivePermute(const void* send, void* recv, size_t count, DataType type, int send_to, int recv_from,
                           cudaStream_t stream);
  // Runs `enqueue` (calls of the methods above) as one NCCL group: a
  // combined collective's operands go out as one launch.
  Status Group(const std::function<Status()>& enqueue);
  void Abort(const Status& why);

 private:
  NcclCommunicator(const NcclApi& api, ncclComm_t comm, int rank, int size)
      : api_(api), comm_(comm), rank_(rank), size_(size) {}
  Status Guard();

  NcclApi api_;
  ncclComm_t comm_;
  int rank_, size_;
  std::mutex mu_;
  std::optional<Status> aborted_;
};

}  // namespace myplugin::collectives
