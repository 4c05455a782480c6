// The buffers that combined calls (ffi_handlers.cc) pack their operands
// into, kept per device between calls; owned by the process's runtime.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace myplugin::collectives {

struct PackBuffers {
  std::mutex mu;  // held by the call using them; a second call at once packs into its own
  std::vector<char> send, recv;
};

// Fresh buffers of a bucket's megabytes would cost page faults on every step,
// and per device (not per engine thread, any of which may run a call) they
// stay bounded.
class KeptPackBuffers {
 public:
  PackBuffers& ForDevice(int32_t ordinal) {
    std::lock_guard<std::mutex> lock(mu_);
    return of_[ordinal];  // std::map: a device's buffers never move
  }

 private:
  std::mutex mu_;
  std::map<int32_t, PackBuffers> of_;
};

}  // namespace myplugin::collectives
