// The GPU backend: NCCL, one rank per device, enqueued on the caller's CUDA
// stream (the FFI handlers' PlatformStream). The unique id that NCCL needs
// to form a communicator goes through our key-value store. On a failure
// that the coordination service reports, Abort() calls ncclCommAbort, which
// ends kernels in flight. An NCCL error that a peer can cause (its
// connection broke: the peer failed, or left after a mismatch) is reported
// as its cause when one is known (NcclCauses), as the CPU collectives do.
//
// Built wherever NCCL's headers are; never run on this project's machines
// (no GPU). Its logic is unit-tested against a fake NcclApi.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/defaults.h"
#include "collectives/dtype.h"
#include "collectives/nccl_api.h"
#include "common/status.h"

namespace myplugin::collectives {

// The key-value store of the NCCL device groups: the bootstrap's unique
// ids, and what explains an NCCL error.
struct BootstrapStore {
  std::function<Status(const std::string& key, const std::string& value)> set;
  std::function<StatusOr<std::string>(const std::string& key, double timeout_s)> get;
  // One look at `key` (an error when it is unset), answered during a failure
  // too: a round trip to the coordination service, so every notice the
  // service sent before it has been applied when it returns. May be empty.
  std::function<StatusOr<std::string>(const std::string& key)> try_get;
  // The job's failure, once known; empty where there is none to know.
  std::function<std::optional<Status>()> failure;
};

// What an NCCL error may be the effect of. `find` looks once: a mismatch
// that a peer reported (it then left its NCCL calls), else a peer's
// failure; nullopt when neither is known. An error that a peer can cause is
// looked up for `wait_s` (the service's notice may come after NCCL's error)
// before NCCL's own is reported, with the time it took.
struct NcclCauses {
  std::function<std::optional<Status>()> find;
  double wait_s = kFailureNoticeWaitS;
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
                                                            double timeout_s, NcclCauses causes = {});
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
  using Clock = std::chrono::steady_clock;
  NcclCommunicator(const NcclApi& api, ncclComm_t comm, int rank, int size, NcclCauses causes)
      : api_(api), comm_(comm), rank_(rank), size_(size), causes_(std::move(causes)) {}
  // Before each call (`started`: when it began): the abort, else an
  // asynchronous error of an earlier call, explained; the communicator is
  // aborted then, as NCCL requires after one.
  Status Guard(Clock::time_point started);
  // `result` of `call`, explained when it is an error that a peer can cause.
  Status Checked(ncclResult_t result, const char* call, Clock::time_point started);
  // The known cause of NCCL's error `result`, looked for up to
  // causes_.wait_s; else NCCL's error with the time since `started`.
  Status Explain(ncclResult_t result, const char* call, Clock::time_point started);
  std::optional<Status> Aborted();

  NcclApi api_;
  ncclComm_t comm_;
  int rank_, size_;
  NcclCauses causes_;
  // Group's enqueue is running: its calls skip the asynchronous error. Only
  // the device's own thread calls the communicator (and Abort, any thread).
  bool in_group_ = false;
  std::mutex mu_;
  std::optional<Status> aborted_;
};

}  // namespace myplugin::collectives
