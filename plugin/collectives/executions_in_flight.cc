#include "collectives/executions_in_flight.h"

#include <chrono>

namespace myplugin::collectives {

void ExecutionsInFlight::Launched() {
  std::lock_guard<std::mutex> lock(mu_);
  ++in_flight_;
}

void ExecutionsInFlight::Ended() {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_ > 0 && --in_flight_ == 0) none_.notify_all();
}

int64_t ExecutionsInFlight::WaitForNone(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s > 0 ? timeout_s : 0));
  none_.wait_until(lock, deadline, [&] { return in_flight_ == 0; });
  return in_flight_;
}

}  // namespace myplugin::collectives
