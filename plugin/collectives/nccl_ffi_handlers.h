// Typed XLA FFI handlers for the CUDA engine: the targets that the
// collective table (collective_table.h) marks for CUDA, bound from it as
// the host engine's are (ffi_handlers.h), with the data moved by NCCL,
// enqueued on the handler's CUDA stream (the FFI PlatformStream), one NCCL
// rank per device.
// Before a device enqueues, the device group's local devices meet and the
// processes agree on the call's signature over the host (Gloo), so a
// mismatch is an error on every process, never a hung kernel; a failure
// that the coordination service reports aborts every communicator.
//
// Built wherever NCCL's and CUDA's headers are; never run on this
// project's machines (no GPU): the call logic is unit-tested against a fake
// NCCL (tests/cpp/nccl_unit_tests.cc).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/agreement_gate.h"
#include "collectives/combined_operands.h"
#include "collectives/once_per_key.h"
#include "collectives/nccl_communicator.h"
#include "collectives/signature.h"
#include "coordination/client.h"

namespace myplugin::collectives {

// The communicators of the process: one per (device group, device),
// created on first use; the unique id of each device group goes through `store`.
class NcclDeviceGroups {
 public:
  // `notice_wait_s`: how long an NCCL error looks for its cause (NcclCauses);
  // `watchdog`: polls every communicator made (null: none does).
  NcclDeviceGroups(NcclApi api, BootstrapStore store, double timeout_s,
                   double notice_wait_s = kFailureNoticeWaitS, NcclWatchdog* watchdog = nullptr);
  StatusOr<NcclCommunicator*> ForDevice(const std::vector<int>& device_group, int device);
  // The communicator ForDevice made for this epoch, or null: none yet.
  NcclCommunicator* Existing(const std::vector<int>& device_group, int device);
  void AbortAll(const Status& why);

  // The agreement beside the launch (agreement_gate.h): on from
  // DeviceGroupsForJob where MYPLUGIN_NCCL_AGREEMENT is beside and a failure
  // ends the process (fate-sharing); off, every call agrees before it is
  // enqueued.
  void AgreeBeside(bool on) { agree_beside_ = on; }
  bool agree_beside() const { return agree_beside_; }
  // Device `ordinal`'s gate, made on its first use (its word allocated on
  // the calling thread: the handler's, whose device context is current).
  StatusOr<AgreementGate*> Gate(int ordinal);
  // Enqueues on `stream` the wait for `ordinal`'s gate word to reach `number`.
  Status CloseGate(int ordinal, cudaStream_t stream, uint32_t number);
  const NcclApi& api() const { return api_; }
  // A mismatch that this process found agreeing on an NCCL call: published
  // for the membership epoch before the call fails, so that a peer whose NCCL
  // breaks when this process leaves its calls names the mismatch, not the
  // broken connection.
  void ReportMismatch(const Status& mismatch);

 private:
  // What an NCCL error of `epoch`'s communicators may be the effect of: this
  // epoch's mismatch report, else the job's failure (NcclCauses::find).
  std::optional<Status> KnownCause(uint64_t epoch);

  NcclApi api_;
  BootstrapStore store_;
  double timeout_s_;
  double notice_wait_s_;
  NcclWatchdog* watchdog_;
  OncePerKey<std::pair<std::vector<int>, int>, NcclCommunicator> communicators_;
  // The membership epoch the communicators belong to: a new membership (an
  // agreement after a failure) renumbers the devices, so they are made anew.
  std::mutex epoch_mu_;
  uint64_t epoch_ = 0;
  bool agree_beside_ = false;  // set before the first call
  // A device's gate and its word's device address. Made under gates_mu_,
  // never removed (the word is page-locked memory the device may still
  // read); the gates live as long as the device groups.
  struct DeviceGate {
    std::unique_ptr<AgreementGate> gate;
    CUdeviceptr word = 0;
  };
  std::mutex gates_mu_;
  std::map<int, DeviceGate> gates_;  // by device ordinal, under gates_mu_
  // What a failed gated agreement does: the mismatch published, every
  // communicator aborted, this process's failure reported (which ends it).
  void OnGateFailure(const Status& why);
};

// The store of a job's device groups on `client`: its key-values, its
// failure, and this process's failure reported to it (FailThisProcess).
BootstrapStore ClientStore(const std::shared_ptr<coordination::CoordinationClient>& client);

// The device groups of the current job on `api`: the unique ids go through
// the coordination service's key-values (in memory for a job of one
// process), a failure that the service reports aborts every communicator,
// and the process's NCCL watchdog polls them. The failure callback holds a
// pointer to them: they must live as long as the job's coordination client.
std::unique_ptr<NcclDeviceGroups> DeviceGroupsForJob(NcclApi api);

// The process's NCCL: MYPLUGIN_NCCL_PATH or the wheel's libnccl.so.2 (as
// jax_plugin chose it) loaded and its version checked, once; the CUDA
// engine's client calls it as it starts, so an unusable NCCL is an error
// there, not at the first collective. Later calls give the same answer.
Status EnsureNcclLoaded();

// A key-value store inside this process (a job of one process has no
// coordination service).
BootstrapStore InProcessStore();

struct NcclCallSite {
  int ordinal;               // the engine's device ordinal
  std::vector<int> device_group;   // global device ids, rank order
  CollectiveOp op;
  Reduction reduction;
  DataType type;
  size_t count;              // elements this device sends
  uint64_t extra;            // the permute pattern, hashed
  // The call's stream: where the gate's wait goes when the agreement runs
  // beside the launch; null: the agreement runs before the enqueue.
  cudaStream_t stream = nullptr;
};

// Meets the device group's local devices, agrees on the signature across
// processes, then `enqueue`s on this device's communicator (from `device_groups`,
// or the process's own when null). Where the device groups agree beside the
// launch and the communicator exists, `enqueue` runs first and the meeting
// and the agreement run on the device's gate (agreement_gate.h).
Status RunNccl(const NcclCallSite& call, const std::function<Status(NcclCommunicator&)>& enqueue,
               NcclDeviceGroups* device_groups = nullptr);

// A combined call's operands (one result each) on `comm`: each operand's own
// collective, all of them in one NCCL group (no packing on the device); one
// operand alone is a plain call.
Status EnqueueCombined(NcclCommunicator& comm, CollectiveOp op, const std::vector<CombinedOperand>& operands,
                       Reduction reduction, size_t group_size, cudaStream_t stream);

// A ragged all-to-all on one device: the handler's work once its operands
// are decoded. Device pointers throughout; the offsets and sizes are of
// `index_type` (s32 or s64), `k` each, the pairs 2k.
struct RaggedCall {
  int ordinal;
  std::vector<int> device_group;  // global device ids, rank order
  DataType type;                   // the data's
  const void* input;
  int64_t input_rows;
  const void* output;  // the array the received slices update
  void* result;        // the engine aliases it to `output`; copied into where it does not
  int64_t output_rows;
  size_t row_elements;
  const void* input_offsets;
  const void* send_sizes;
  const void* sender_pairs;
  const void* recv_sizes;
  DataType index_type;
  size_t k;
};

// Copies the offsets and sizes to the host and waits for them (they size
// the transfers, as in XLA's own), checks them (ragged_plan.h), then runs
// the call (RunNccl) with the transfers as one NCCL group. A bad offset or
// size is an error before anything is enqueued.
Status RunRaggedAllToAll(const RaggedCall& call, cudaStream_t stream, NcclDeviceGroups* device_groups = nullptr);

// (target name, XLA_FFI_Handler*) of every handler.
std::vector<std::pair<std::string, void*>> NcclFfiHandlers();

}  // namespace myplugin::collectives
