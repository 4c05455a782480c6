// How long a collective may wait, by phase. Until every process has reached
// the call (their signatures agree), a wait is bounded by the arrival
// timeout: a peer may legitimately compute for minutes before it comes.
// Once all have arrived, data is moving, and a wait is bounded by the time
// since the last progress (a step done, a piece received), so a large call
// over a slow link may take as long as it keeps moving, while a peer that
// stopped moving bytes is known within the stall bound. The cap bounds a
// whole call, however it moves.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "collectives/defaults.h"

namespace myplugin::collectives {

struct WaitLimits {
  double arrival_s = kDefaultCollectiveTimeoutSeconds;  // MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS
  double stall_s = kDefaultCollectiveStallSeconds;      // MYPLUGIN_COLLECTIVE_STALL_SECONDS
  double cap_s = kDefaultCollectiveCapSeconds;          // MYPLUGIN_COLLECTIVE_CAP_SECONDS
};

// The phase and start of the call in flight. Shared by a communicator and
// the ones it composes (a hierarchical one's host and leader groups), which
// move the data of its calls.
class CallClock {
 public:
  using Clock = std::chrono::steady_clock;

  explicit CallClock(WaitLimits limits) : limits_(limits) {}

  const WaitLimits& limits() const { return limits_; }
  // A call begins: its processes are arriving.
  void Start();
  // Every process arrived: from now on, waits follow progress.
  void Agreed() { agreed_.store(true, std::memory_order_relaxed); }
  bool agreed() const { return agreed_.load(std::memory_order_relaxed); }
  // When a wait whose last progress was at `since` ends: the phase's
  // bound after it, or the cap, whichever comes first.
  Clock::time_point Deadline(Clock::time_point since) const;
  // The same for a wait that starts now, in seconds; at least a millisecond.
  double NextWaitSeconds() const;
  // The call has run for its whole cap.
  bool CapReached() const;
  // Seconds since the call began (0 before any call).
  double ElapsedSeconds() const;

 private:
  const WaitLimits limits_;
  std::atomic<int64_t> start_ns_{0};  // Clock's epoch: the call's start
  std::atomic<bool> agreed_{false};
};

}  // namespace myplugin::collectives
