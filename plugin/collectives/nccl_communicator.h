// The GPU backend: NCCL, one rank per device, enqueued on the caller's CUDA
// stream (the FFI handlers' PlatformStream). The unique id that NCCL needs
// to form a communicator goes through our key-value store. On a failure
// that the coordination service reports, Abort() calls ncclCommAbort, which
// ends kernels in flight. An NCCL error that a peer can cause (its
// connection broke: the peer failed, or left after a mismatch) is reported
// as its cause when one is known (NcclCauses), as the CPU collectives do.
//
// A kernel already enqueued when its peer dies fails on the device, and the
// host may already wait for the stream: the process's NCCL watchdog
// (nccl_watchdog.h) polls each communicator (Poll) for that asynchronous
// error, explains it as above, aborts the communicator (which ends the
// kernel), reports this process's failure to the coordination service, and
// the next call returns the explained error.
//
// Built wherever NCCL's headers are; never run on this project's machines
// (no GPU). Its logic is unit-tested against a fake NcclApi and a stand-in
// libnccl.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/defaults.h"
#include "collectives/dtype.h"
#include "collectives/nccl_api.h"
#include "collectives/nccl_watchdog.h"
#include "collectives/ragged_plan.h"
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
  // Reports this process's failure to the job (NcclWatch::fail_process);
  // empty where there is no one to tell.
  std::function<void(const std::string& reason, const std::vector<int>& blamed)> fail_process;
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

// Who watches a communicator for asynchronous errors, and whom its abort
// is reported to.
struct NcclWatch {
  // Polls the communicator from its creation to its destruction; null:
  // only the communicator's own calls look (as each starts).
  NcclWatchdog* watchdog = nullptr;
  // Tells the coordination service that this process failed, and why
  // (`blamed`: the processes that caused it, when known), so the others
  // learn at once. May be empty.
  std::function<void(const std::string& reason, const std::vector<int>& blamed)> fail_process;
  // The communicator in reports: "device 3 (rank 1) in device group [2, 3]".
  std::string name;
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
                                                            double timeout_s, NcclCauses causes = {},
                                                            NcclWatch watch = {});
  // Leaves the watchdog first: no poll runs once NCCL's communicator is gone.
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
  // A ragged all-to-all's transfers (ragged_plan.h), as one group of
  // sends and receives.
  Status RaggedAllToAll(const void* send, void* recv, DataType type, const RaggedPlan& plan, cudaStream_t stream);
  // Runs `enqueue` (calls of the methods above) as one NCCL group: a
  // combined collective's operands go out as one launch.
  Status Group(const std::function<Status()>& enqueue);
  void Abort(const Status& why);
  // The watchdog's look (any thread, while kernels run): on an
  // asynchronous error, what to do about it (empty if none): the error
  // explained (which may wait for its cause), the communicator aborted, the
  // failure reported, and the explained error kept for the next call.
  // Nothing after an abort.
  std::function<void()> Poll();

 private:
  using Clock = std::chrono::steady_clock;
  NcclCommunicator(const NcclApi& api, ncclComm_t comm, int rank, int size, NcclCauses causes, NcclWatch watch)
      : api_(api), comm_(comm), rank_(rank), size_(size), causes_(std::move(causes)), watch_(std::move(watch)),
        enqueued_at_(Clock::now()) {}
  // Before each call (`started`: when it began): the abort (the watchdog's
  // explained error, the first time), else an asynchronous error of an
  // earlier call, explained; the communicator is aborted then, as NCCL
  // requires after one.
  Status Guard(Clock::time_point started);
  // A call from before its guard to its return, counted in `in_calls_`.
  class InCall;
  // Sets `why` as the abort (unless one came first) and calls ncclCommAbort
  // once the calls under way, but the caller's own `own`, have left
  // (kNcclAbortWaitS at most). `lock` holds mu_.
  void AbortLocked(std::unique_lock<std::mutex>& lock, const Status& why, int own);
  // Notes the NCCL call about to be enqueued: what the watchdog names when
  // a kernel fails on the device.
  void Enqueuing(const char* call, size_t count, DataType type);
  // ncclCommGetAsyncError, unless the communicator was aborted (nullopt:
  // NCCL's communicator is gone); under mu_, so an abort never frees it
  // under the poll.
  StatusOr<std::optional<ncclResult_t>> AsyncError();
  // The asynchronous error `result` explained (`call`: what was in flight,
  // enqueued at `started`); the first to find it aborts the communicator
  // and reports the failure; `keep`: the next call returns it too.
  Status OnAsyncError(ncclResult_t result, const std::string& call, Clock::time_point started, bool keep, int own);
  // `result` of `call`, explained when it is an error that a peer can cause.
  Status Checked(ncclResult_t result, const char* call, Clock::time_point started);
  // The known cause of NCCL's error `result`, looked for up to
  // causes_.wait_s; else NCCL's error with the time since `started`.
  Status Explain(ncclResult_t result, const std::string& call, Clock::time_point started);
  std::optional<Status> Aborted();

  NcclApi api_;
  ncclComm_t comm_;
  int rank_, size_;
  NcclCauses causes_;
  NcclWatch watch_;
  // Group's enqueue is running: its calls skip the asynchronous error. Only
  // the device's own thread calls the communicator (and Abort and Poll, any
  // thread).
  bool in_group_ = false;
  std::mutex mu_;
  std::optional<Status> aborted_;
  std::optional<Status> found_;   // under mu_: the watchdog's explained error, for the next call
  std::string enqueued_;          // under mu_: the last NCCL call enqueued ("" before the first)
  Clock::time_point enqueued_at_;  // under mu_: when (the creation before the first)
  uint64_t calls_ = 0;            // under mu_: NCCL calls enqueued so far
  int in_calls_ = 0;              // under mu_: calls between their guard and their return
  std::condition_variable call_left_;  // with mu_: in_calls_ went down
};

}  // namespace myplugin::collectives
