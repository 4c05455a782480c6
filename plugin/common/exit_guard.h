// Work that a fate-sharing exit must not cut in half (a flight recorder
// being written): the exit waits, for a bounded time, until none is under
// way. Header-only; both sides live in libmyplugin_runtime.so, so they share
// one counter.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace myplugin {

inline std::atomic<int>& ExitGuardsHeld() {
  static std::atomic<int> held{0};
  return held;
}

class ExitGuard {
 public:
  ExitGuard() { ExitGuardsHeld().fetch_add(1); }
  ~ExitGuard() { ExitGuardsHeld().fetch_sub(1); }
  ExitGuard(const ExitGuard&) = delete;
  ExitGuard& operator=(const ExitGuard&) = delete;
};

// How long an exit waits for the guards: also the time the launcher gives a
// process the service failed while it still runs to end by itself.
inline constexpr std::chrono::seconds kExitGuardLimit{5};

// Returns when no guard is held, or after `limit`.
inline void WaitForExitGuards(std::chrono::milliseconds limit = kExitGuardLimit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (ExitGuardsHeld().load() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace myplugin
