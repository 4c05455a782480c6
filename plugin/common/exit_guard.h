// Work that a fate-sharing exit must not cut in half (a flight recorder
// being written): the exit waits, for a bounded time, until none is under
// way, and work that would start once the exit has begun is refused (it
// would be cut, leaving a half-written file). Header-only; both sides live
// in libmyplugin_runtime.so, so they share one counter.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace myplugin {

inline std::atomic<int>& ExitGuardsHeld() {
  static std::atomic<int> held{0};
  return held;
}

inline std::atomic<bool>& Exiting() {
  static std::atomic<bool> exiting{false};
  return exiting;
}

class ExitGuard {
 public:
  // Held, then the exit checked: with the exit's order the reverse (flag,
  // then count), either this guard sees the exit or the exit sees it.
  ExitGuard() : granted_(true) {
    ExitGuardsHeld().fetch_add(1, std::memory_order_seq_cst);
    if (Exiting().load(std::memory_order_seq_cst)) {
      granted_ = false;
      ExitGuardsHeld().fetch_sub(1, std::memory_order_seq_cst);
    }
  }
  ~ExitGuard() {
    if (granted_) ExitGuardsHeld().fetch_sub(1, std::memory_order_seq_cst);
  }
  ExitGuard(const ExitGuard&) = delete;
  ExitGuard& operator=(const ExitGuard&) = delete;
  // False once an exit has begun: the work must not start.
  bool granted() const { return granted_; }

 private:
  bool granted_;
};

// How long an exit waits for the guards: also the time the launcher gives a
// process the service failed while it still runs to end by itself.
inline constexpr std::chrono::seconds kExitGuardLimit{5};

// The exit begins: no guard is granted from now on. Returns when none is
// held, or after `limit`.
inline void WaitForExitGuards(std::chrono::milliseconds limit = kExitGuardLimit) {
  Exiting().store(true, std::memory_order_seq_cst);
  const auto until = std::chrono::steady_clock::now() + limit;
  while (ExitGuardsHeld().load() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace myplugin
