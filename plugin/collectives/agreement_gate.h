// Agreement beside the launch: one device's NCCL calls across processes,
// each enqueued at once and checked after.
//
// Every NCCL call across processes is first agreed: the processes exchange
// its signature (a barrier of the device group's processes; signature.h).
// Run before the enqueue, that exchange holds the host thread that launches
// the device's kernels until the slowest peer's host reaches the same call,
// and a GPU whose queue drains meanwhile idles even when the peer is only
// behind in enqueuing (docs/performance.md, "The agreement on every call").
//
// So, where the call's communicator already exists, the handler enqueues
// the NCCL call and then, on the same stream, a wait until the device's gate
// word reaches the call's number (cuStreamWaitValue32, GEQ: a cyclic
// comparison, so the number may wrap). Nothing the stream runs after the
// call, and nothing that waits for the stream (XLA's call-done, the
// execution's end), runs before the word does. The agreement itself runs on
// the gate's thread, in the order of the calls; when it succeeds the thread
// writes the call's number into the word. When one fails (a mismatch, a
// peer that died or left, a timeout), the word never moves again: the
// consumers of a result that no one agreed to never run, and `on_failure`
// (given by the owner) aborts the communicators, which ends the kernels in
// flight, and ends this process with the error naming the collective
// (fate-sharing: the gate is only used where a failure ends the process;
// elsewhere the agreement runs before the enqueue).
//
// The first call of a communicator still agrees before anything is
// enqueued (ncclCommInitRank must follow an agreement): it runs on the
// gate's thread too (AgreeNow), after the calls queued before it, so the
// agreements run in the calls' order either way.
//
// Threads (docs/architecture.md, "Threads"): the device's handler thread
// calls Enqueue and AgreeNow (one device's calls come from one thread at a
// time); the gate's own thread runs the agreements and writes the word;
// mu_ orders the two. The word is written only by the gate's thread and
// read by the GPU.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "common/status.h"

namespace myplugin::collectives {

class AgreementGate {
 public:
  // `word`: the gate word (host memory the device reads: in the product
  // page-locked memory mapped into the device's address space), 0 at the
  // start. `on_failure`: called once, on the gate's thread, with the first
  // failed agreement.
  AgreementGate(uint32_t* word, std::function<void(const Status&)> on_failure);
  // Runs what is queued (each agreement has its own deadline), then joins
  // the thread.
  ~AgreementGate();
  AgreementGate(const AgreementGate&) = delete;
  AgreementGate& operator=(const AgreementGate&) = delete;

  // The gated call: `enqueue` (the NCCL call), then `close(number)` (the
  // stream's wait for the word to reach `number`), on the caller's thread,
  // then `agree` queued for the gate's thread. An error of `enqueue` or
  // `close` is returned and nothing is queued; after a failed agreement
  // nothing is enqueued and the failure is returned.
  Status Enqueue(const std::function<Status()>& enqueue, const std::function<Status(uint32_t number)>& close,
                 std::function<Status()> agree);
  // The agreement run now, on the gate's thread after those queued, and
  // its result. A failure here is the caller's to handle (nothing was
  // enqueued): the gate stays open for later calls.
  Status AgreeNow(std::function<Status()> agree);
  // Waits until every queued agreement has run (`timeout_s` at most);
  // false if some are still queued then.
  bool Drain(double timeout_s);

  // The first failed agreement of a gated call; OK while there is none.
  Status failure();
  // The number of the last call whose agreement opened the gate.
  uint32_t opened();

 private:
  struct Job {
    std::function<Status()> agree;
    std::optional<uint32_t> number;  // a gated call's; none: AgreeNow's
    Status* result = nullptr;        // AgreeNow's, set under mu_
    bool* done = nullptr;
  };
  void Loop();

  uint32_t* const word_;
  const std::function<void(const Status&)> on_failure_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;     // under mu_
  bool running_ = false;      // under mu_: the thread is running a job
  uint32_t next_ = 0;         // under mu_: the last number given
  Status failure_;            // under mu_
  bool stop_ = false;         // under mu_
  std::thread thread_;        // started in the constructor, joined in the destructor
};

}  // namespace myplugin::collectives
