// The parts of multi-process programs that this process's devices have been
// given and not yet finished (pjrt/executable.cc counts each launch's
// device parts and each one's end).
//
// Why: jax dispatches asynchronously and a program may read one shard of a
// replicated result (multihost_utils.process_allgather does), so a process
// could reach its end while another local device's part of its last
// program still waited in a collective. Entering shutdown then told the
// peers it would issue no more collectives, and a peer waiting in that very
// collective failed ("finished (entered shutdown) without issuing it"), or
// the client's teardown waited on a rendezvous that could no longer
// complete. ShutdownJob (process_runtime.h) waits here first, bounded.
//
// Threads: jax's thread counts launches; engine threads count ends (an
// event's callback); the shutdown's thread waits. One mutex.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace myplugin::collectives {

class ExecutionsInFlight {
 public:
  // A device part of a program was launched.
  void Launched();
  // One of them ended (done or failed).
  void Ended();
  // Waits until none is in flight or `timeout_s` passed; the number still
  // in flight (0 when all ended).
  int64_t WaitForNone(double timeout_s);

 private:
  std::mutex mu_;
  std::condition_variable none_;
  int64_t in_flight_ = 0;  // under mu_
};

}  // namespace myplugin::collectives
