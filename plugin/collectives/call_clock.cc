#include "collectives/call_clock.h"

#include <algorithm>
#include <chrono>

#include "common/deadline.h"

namespace myplugin::collectives {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(CallClock::Clock::now().time_since_epoch()).count();
}

}  // namespace

void CallClock::Start() {
  start_ns_.store(NowNs(), std::memory_order_relaxed);
  agreed_.store(false, std::memory_order_relaxed);
}

CallClock::Clock::time_point CallClock::Deadline(Clock::time_point since) const {
  const auto phase = since + Millis(agreed() ? limits_.stall_s : limits_.arrival_s);
  const int64_t start = start_ns_.load(std::memory_order_relaxed);
  // Before any call (a communicator's own setup), only the phase counts.
  if (start == 0) return phase;
  const auto cap = Clock::time_point(std::chrono::nanoseconds(start)) + Millis(limits_.cap_s);
  return std::min(phase, cap);
}

double CallClock::NextWaitSeconds() const {
  const auto now = Clock::now();
  return std::max(std::chrono::duration<double>(Deadline(now) - now).count(), 1e-3);
}

bool CallClock::CapReached() const {
  const int64_t start = start_ns_.load(std::memory_order_relaxed);
  return start != 0 && (NowNs() - start) / 1e9 >= SaturatedSeconds(limits_.cap_s) - 1e-3;
}

double CallClock::ElapsedSeconds() const {
  const int64_t start = start_ns_.load(std::memory_order_relaxed);
  return start == 0 ? 0 : (NowNs() - start) / 1e9;
}

}  // namespace myplugin::collectives
