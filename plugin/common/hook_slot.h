// A process-wide slot for a hook that the Python package installs and the
// PJRT library calls (both see one copy: the slot lives in the shared
// runtime library). Its owner allocates it once and never destroys it,
// since the PJRT library may still read it while the process exits.
#pragma once

#include <mutex>
#include <utility>

namespace myplugin {

template <typename T>
class HookSlot {
 public:
  void Set(T value) {
    std::lock_guard<std::mutex> lock(mu_);
    value_ = std::move(value);
  }
  // A copy: the caller runs it without holding the slot's lock.
  T Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return value_;
  }

 private:
  mutable std::mutex mu_;
  T value_{};
};

}  // namespace myplugin
