#include "common/fault_delays.h"

#include <atomic>
#include <cstdint>
#include <chrono>
#include <thread>

namespace myplugin {
namespace {

std::atomic<int64_t> g_delay_us[static_cast<int>(FaultPoint::kCount)];

}  // namespace

void SetFaultDelay(FaultPoint point, double seconds) {
  g_delay_us[static_cast<int>(point)].store(seconds > 0 ? static_cast<int64_t>(seconds * 1e6) : 0,
                                            std::memory_order_relaxed);
}

void FaultDelay(FaultPoint point) {
  const int64_t us = g_delay_us[static_cast<int>(point)].load(std::memory_order_relaxed);
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

}  // namespace myplugin
