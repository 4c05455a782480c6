#include "common/gil_aware_mutex.h"

namespace myplugin {
namespace {

// Set once, at the Python module's import, before any thread of ours can
// wait; read without a lock.
std::atomic<int (*)()> process_held{nullptr};
std::atomic<void* (*)()> process_release{nullptr};
std::atomic<void (*)(void*)> process_restore{nullptr};

}  // namespace

void GilAwareMutex::InstallGil(const GilCalls& calls) {
  process_release.store(calls.release, std::memory_order_relaxed);
  process_restore.store(calls.restore, std::memory_order_relaxed);
  process_held.store(calls.held, std::memory_order_release);  // last: the others are set when it is seen
}

GilCalls GilAwareMutex::Calls() const {
  if (has_own_) return own_;
  GilCalls c;
  c.held = process_held.load(std::memory_order_acquire);
  c.release = process_release.load(std::memory_order_relaxed);
  c.restore = process_restore.load(std::memory_order_relaxed);
  return c;
}

GilAwareMutex::Lock::Lock(GilAwareMutex& mutex) : mutex_(mutex) {
  if (mutex_.mu_.try_lock()) return;
  const GilCalls gil = mutex_.Calls();
  if (gil.held != nullptr && gil.release != nullptr && gil.restore != nullptr && gil.held() != 0) {
    gil_ = gil.release();
    restore_ = gil.restore;
  }
  mutex_.mu_.lock();
}

GilAwareMutex::Lock::~Lock() {
  mutex_.mu_.unlock();
  if (restore_ != nullptr) restore_(gil_);
}

}  // namespace myplugin
