// A mutex that a thread holding Python's GIL waits for without the GIL.
//
// Why: the engine's external references of a buffer change under one such
// mutex (pjrt/forwarding.cc), and the last release of a reference can run a
// deleter that takes the GIL (a view of numpy memory: numpy's DLPack
// deleter). A holder may therefore wait for the GIL, so no thread may wait
// for the mutex while it holds the GIL: the one order of waiting is mutex,
// then GIL. A thread that holds the GIL and finds the mutex taken lets the
// GIL go while it waits and while it holds the mutex, and takes the GIL
// back only once it has let the mutex go. Recursive: a deleter run under
// the mutex may release another reference on the same thread (a numpy
// array whose base is jaxlib's zero-copy view of another array).
//
// The GIL calls come from the Python module, which installs them at import
// (python/module.cc); without them (a process with no Python, the unit
// tests) the mutex is a plain one.
#pragma once

#include <atomic>
#include <mutex>

namespace myplugin {

// The CPython calls a waiter needs: PyGILState_Check, PyEval_SaveThread,
// PyEval_RestoreThread.
struct GilCalls {
  int (*held)() = nullptr;
  void* (*release)() = nullptr;
  void (*restore)(void*) = nullptr;
};

class GilAwareMutex {
 public:
  // The process's GIL calls, shared by every such mutex; installed once.
  static void InstallGil(const GilCalls& calls);

  GilAwareMutex() = default;
  // A mutex with GIL calls of its own (tests model the GIL with them).
  explicit GilAwareMutex(const GilCalls& calls) : own_(calls), has_own_(true) {}
  GilAwareMutex(const GilAwareMutex&) = delete;
  GilAwareMutex& operator=(const GilAwareMutex&) = delete;

  class Lock {
   public:
    explicit Lock(GilAwareMutex& mutex);
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    GilAwareMutex& mutex_;
    void* gil_ = nullptr;  // the thread state to give the GIL back to, when it was let go
    void (*restore_)(void*) = nullptr;
  };

 private:
  GilCalls Calls() const;
  std::recursive_mutex mu_;
  GilCalls own_;
  bool has_own_ = false;
};

}  // namespace myplugin
