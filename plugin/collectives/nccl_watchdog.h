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
// NCCL's headers, can own it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "collectives/defaults.h"

namespace myplugin::collectives {

class NcclWatchdog {
 public:
  explicit NcclWatchdog(double poll_s = kNcclWatchdogPollS);
  ~NcclWatchdog();  // Stop()
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // Polls `poll` every poll period from now until Unwatch(key); the first
  // watch starts the thread (again, after a Stop).
  void Watch(const void* key, std::function<void()> poll);
  // No poll of `key` runs once this returns: one in progress is waited for
  // (a communicator unwatches itself before NCCL's communicator is
  // destroyed). Never call it from a poll.
  void Unwatch(const void* key);
  // Ends the thread and joins it (the job's shutdown); a poll in progress
  // finishes first.
  void Stop();

  bool running();
  double poll_s() const { return poll_s_; }

 private:
  void Loop();

  const double poll_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<const void*, std::function<void()>> watched_;  // under mu_
  const void* polling_ = nullptr;                        // under mu_: whose poll runs now
  bool stop_ = false;                                    // under mu_
  std::thread thread_;                                   // started and joined under lifecycle_mu_
  std::mutex lifecycle_mu_;
};

}  // namespace myplugin::collectives
