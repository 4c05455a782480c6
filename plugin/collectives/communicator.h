// One communicator interface for every backend. A communicator serves one
// process group: an ordered list of participants (ranks 0..n-1). Every call
// first exchanges signatures (signature.h), so mismatched calls fail on
// every participant with the same error; every wait is bounded; and a
// failure that the coordination service reports aborts calls in flight.
// Backends implement the Do* methods; the checks live here, once.
#pragma once

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/call_clock.h"
#include "collectives/dtype.h"
#include "coordination/client.h"
#include "collectives/signature.h"
#include "common/status.h"

namespace myplugin::collectives {

class Communicator : public std::enable_shared_from_this<Communicator> {
  // Composes other communicators' Do* steps under its own signature check.
  friend class HierarchicalCommunicator;

 public:
  // `process_group[r]` is the process id of rank r. `coordination` (may be null in
  // unit tests) explains failures: who failed, who never arrived.
  Communicator(std::vector<int> process_group, int rank, WaitLimits limits,
               std::shared_ptr<coordination::CoordinationClient> coordination);
  virtual ~Communicator() = default;
  // The device group this communicator serves: part of every call's
  // signature (and of its arrival records), so that communicators over the
  // same processes never take each other's calls. Set before first use.
  void SetDeviceGroup(const std::vector<int>& devices);
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(process_group_.size()); }
  const std::vector<int>& process_group() const { return process_group_; }
  // The arrival timeout: also the bound of a communicator's setup.
  double timeout_s() const { return clock_->limits().arrival_s; }
  const WaitLimits& limits() const { return clock_->limits(); }

  // `count` is the number of elements this rank contributes; recv sizes
  // follow from the op: all-gather/all-to-all recv n*count, reduce-scatter
  // recv count/n (count must divide by n), permute recv count.
  // `extra` goes into the signature: a combined call's operands, hashed
  // (combined_operands.h), so that processes that combined differently differ.
  Status AllReduce(const void* send, void* recv, size_t count, DataType type, Reduction reduction,
                   uint64_t extra = 0);
  Status AllGather(const void* send, void* recv, size_t count, DataType type, uint64_t extra = 0);
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, Reduction reduction,
                       uint64_t extra = 0);
  Status AllToAll(const void* send, void* recv, size_t count, DataType type);
  // Point-to-point: at most one send to and one receive from each peer rank.
  // `count` (elements per device) and `pairs_hash` (the pattern) are the
  // same on every participant and go into the signature.
  struct PeerBuffer {
    int peer;
    void* data;
    size_t bytes;
  };
  Status Exchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs, DataType type,
                  size_t count, uint64_t pairs_hash);
  Status Barrier();
  // The signature exchange alone: the participants agree on a call whose
  // data moves elsewhere (NCCL, on the GPUs), or fail as any call would.
  Status Agree(CollectiveOp op, Reduction reduction, DataType type, size_t count, uint64_t extra = 0);

  // Ends every call in flight and every later one with `why`.
  void Abort(const Status& why);

  // `process` entered the shutdown barrier: it will issue no more
  // collectives. Later calls fail at once; a call in flight that still waits
  // `grace_s` later is stuck for good, and fails the job, naming both sides.
  void PeerFinished(int process, double grace_s);

 protected:
  // The bound of a backend wait that starts now, or that just made
  // progress (call_clock.h): call it at each wait.
  double WaitSeconds() const { return clock_->NextWaitSeconds(); }
  CallClock::Clock::time_point WaitDeadline(CallClock::Clock::time_point last_progress) const {
    return clock_->Deadline(last_progress);
  }
  bool Agreed() const { return clock_->agreed(); }
  bool CapReached() const { return clock_->CapReached(); }
  // `inner` moves this communicator's data: its waits follow this one's calls.
  void ShareClock(Communicator& inner) const { inner.clock_ = clock_; }

  // Exchanges fixed-size records: out receives size()*bytes, rank-major.
  virtual Status DoAllGatherBytes(const void* send, void* recv, size_t bytes, uint32_t tag) = 0;
  virtual Status DoAllReduce(const void* send, void* recv, size_t count, DataType type, ReduceFunction fn,
                             uint32_t tag) = 0;
  virtual Status DoAllToAllBytes(const void* send, void* recv, size_t bytes_per_rank, uint32_t tag) = 0;
  // This rank's block (count / size() elements) of the reduction of every
  // rank's `count` elements. By default the whole all-reduce, then the
  // block: exact, but twice a ring reduce-scatter's bytes.
  virtual Status DoReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceFunction fn,
                                 uint32_t tag);
  virtual Status DoExchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                            uint32_t tag) = 0;
  // Exchanges the fixed-size `record` (into `records`, rank-major) and, in
  // the same round trip, `bytes` of payload (into `payloads`, rank-major):
  // the payload leaves at once but is received only after `check(records)`
  // approved the records, so a peer whose payload differs in size is never
  // read; this rank's own slot of `payloads` is filled only if `copy_own`.
  // When `check` fails, the backend is left aborted. Backends without it
  // return Unimplemented, and the call takes two exchanges.
  virtual Status DoSignedExchange(const char* record, size_t record_bytes, char* records, const void* payload,
                                  size_t bytes, char* payloads, const std::function<Status(const char*)>& check,
                                  uint32_t tag, bool copy_own = true) {
    return Unimplemented("no signed exchange");
  }
  virtual void DoAbort() = 0;
  // The largest all-reduce or all-gather that goes through RunSigned: every
  // rank receives every other rank's data, which beats a ring while round
  // trips dominate.
  virtual size_t signed_bytes_limit() const;

 private:
  // Signature exchange and checks; numbers the call (sig.sequence) and
  // returns its data tag on agreement. Each rank's record is the signature
  // followed by inline_bytes() of payload: a call whose data fits travels
  // with its signature (`payload`), and `records` receives every rank's.
  // With `staged`, the call's data (`staged_bytes`) leaves with the
  // signature and lands in `staged_out` (rank-major) once they agree.
  StatusOr<uint32_t> Begin(Signature& sig, const void* payload = nullptr, size_t payload_bytes = 0,
                           std::vector<char>* records = nullptr, const void* staged = nullptr,
                           size_t staged_bytes = 0, char* staged_out = nullptr, bool copy_own = true);
  // Mid-size calls: signature and data in one round trip (DoSignedExchange);
  // `payloads` receives every rank's `bytes` of data, rank-major. Falls back
  // to two exchanges where the backend cannot.
  Status RunSigned(Signature sig, const void* payload, size_t bytes, char* payloads, bool copy_own = true);
  // A call that fits: one exchange of records, then `finish(records, record_size)`.
  template <typename Finish>
  Status RunInline(Signature sig, const void* payload, size_t bytes, Finish&& finish);
  size_t record_size() const { return Signature::kEncodedSize + inline_bytes_; }
  // Begin, then `body(tag)` unless there is nothing to move; backend errors
  // come back explained.
  template <typename Body>
  Status Run(Signature sig, size_t bytes, Body&& body);
  // Ends the call in flight (and its flight recorder entry).
  void EndCall(bool ok);
  // Writes the flight recorder for `why`; the text that points to it.
  static std::string WithTrace(const std::string& why);
  // Turns a backend error into one that says what failed and why.
  Status Explain(const Signature& sig, const Status& backend_error);
  // Where the processes that reached call `sequence` record it (on the
  // error path only).
  std::string ReachedPrefix(uint64_t sequence) const;
  // `missing` (of call `sequence`) less those recorded in the next call,
  // which finished this one; never empty when `missing` is not.
  std::vector<int> WithoutThoseInTheNextCall(const std::vector<int>& missing, uint64_t sequence);
  // Those of `processes` recorded in the call after `sequence`.
  std::vector<int> InTheNextCall(const std::vector<int>& processes, uint64_t sequence);
  // The stall a peer gave up on in the call before sig, when its records
  // under prefix name one: the cause of a connection that closed while this
  // process waited for the others to arrive at sig.
  std::optional<Status> GaveUpOnTheCallBefore(const Signature& sig, const std::string& what, const std::string& prefix,
                                              double waited, const Status& backend_error);
  // What ended the call, when it is known: a peer's mismatch report for
  // this call, else a failure the service reported. Either wins over the
  // broken connection or timeout it caused here.
  std::optional<Status> KnownCause(const Signature& sig, const std::string& what);
  // Why this communicator was aborted, if it was.
  std::optional<Status> Aborted();

  const std::vector<int> process_group_;
  const int rank_;
  std::shared_ptr<coordination::CoordinationClient> coordination_;
  std::shared_ptr<CallClock> clock_;
  uint64_t group_hash_;
  // Payload bytes that ride with the signature: small calls then cost one
  // exchange, not two. Every rank derives the same value from the process group
  // size alone, so records always match in size; large process groups skip it (each
  // record reaches every rank).
  const size_t inline_bytes_;
  std::mutex call_mu_;  // one collective at a time per process group, in program order
  // Under call_mu_: the one-round-trip all-reduce's receive buffer, and the
  // default DoReduceScatter's whole sum (kept between calls; never both in one call).
  std::vector<char> scratch_;
  uint64_t sequence_ = 0;
  std::mutex abort_mu_;
  std::optional<Status> aborted_;
  std::vector<int> finished_peers_;    // under abort_mu_
  int64_t in_flight_ = -1;             // the call number in flight, under abort_mu_
  std::string in_flight_what_;         // its description
  std::string in_flight_collective_;   // its call alone (Signature::Describe)
  uint64_t record_ = 0;                // the call's flight recorder entry, under call_mu_
};

// A list of ids (processes or devices) as text: "[0, 1, 3]".
std::string IdList(const std::vector<int>& ids);

}  // namespace myplugin::collectives
