// The process's NCCL watchdog: one thread that polls every live NCCL
// communicator for an asynchronous error (a kernel in flight whose peer died
// or aborted), so that a kernel the host already waits for (XLA waits for
// the stream) is aborted and explained, not left to hang until some other
// mechanism fires. NCCL's users watch the same way: ncclCommGetAsyncError
// may be called from another thread while kernels run, and ncclCommAbort
// from another thread ends them.
//
// It knows no NCCL type: each communicator watches itself with its own poll
// (NcclCommunicator::Poll), so the process runtime, built with or without
// NCCL's headers, can own it. What a poll finds is handled on a thread of
// its own: explaining an error may wait seconds for its cause, and the
// other communicators' polls go on meanwhile.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "collectives/defaults.h"

namespace myplugin::collectives {

class NcclWatchdog {
 public:
  explicit NcclWatchdog(double poll_s = kNcclWatchdogPollS);
  ~NcclWatchdog();  // Stop()
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // A poll returns what to do about what it found, or an empty function.
  using Poll = std::function<std::function<void()>()>;
  // Polls `poll` every poll period from now until Unwatch(key), except
  // while what its last poll found is being handled; the first watch
  // starts the thread (again, after a Stop).
  void Watch(const void* key, Poll poll);
  // No poll of `key`, nor the handling of what it found, runs once this
  // returns: one in progress is waited for (a communicator unwatches itself
  // before NCCL's communicator is destroyed). Never call it from a poll or
  // a handling.
  void Unwatch(const void* key);
  // Ends the thread and joins it (the job's shutdown); a poll or handling
  // in progress finishes first.
  void Stop();

  bool running();
  double poll_s() const { return poll_s_; }

 private:
  void Loop();

  const double poll_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Joins the handling threads that are done (mu_ held); all of them
  // (waiting for them) when `all`.
  void Reap(std::unique_lock<std::mutex>& lock, bool all);

  std::map<const void*, Poll> watched_;  // under mu_
  const void* polling_ = nullptr;        // under mu_: whose poll runs now
  // Under mu_: the threads handling what a poll found, by key, and the
  // keys whose handling has not finished.
  std::map<const void*, std::thread> handlers_;
  std::set<const void*> handling_;
  bool stop_ = false;  // under mu_
  std::thread thread_;                                   // started and joined under lifecycle_mu_
  std::mutex lifecycle_mu_;
};

}  // namespace myplugin::collectives
