// What keeps an engine buffer's memory alive while one of our threads uses
// it: a cross-process send reading it in place, a receive writing into it,
// a DLPack export lending it. Holds of ours, not the engine's external
// references.
//
// Why not external references: the engine's C API keeps a buffer's
// external references in a plain list that PJRT_Buffer_Increase/
// DecreaseExternalReferenceCount change without a lock (DESIGN §11). jaxlib
// changes it on Python threads (np.asarray, the buffer protocol, its DLPack
// export); a send's or a receive's thread changing it at the same moment
// corrupted the heap. A lock around every change deadlocked instead: the
// last release of a view of numpy memory runs numpy's deleter, which takes
// the GIL, while a Python thread holding the GIL waited for the lock. So no
// thread of ours touches that list any more; only jaxlib's calls do, which
// our entry points serialize under one lock (pjrt/forwarding.cc). What the
// external reference gave a send, a hold gives:
//   - jax's PJRT_Buffer_Delete of a held buffer (x.delete()) is deferred to
//     the release of its last hold, and PJRT_Buffer_IsDeleted answers true
//     meanwhile, as the engine would;
//   - jax's PJRT_Buffer_Destroy of a held buffer (the array collected) is
//     deferred the same way;
//   - an executable launched with a held buffer as an argument gets that
//     argument in its non-donatable list, so a call that donates the array
//     allocates its result elsewhere (what the engine did for a buffer with
//     an external reference).
// The last release hands the deferred delete and destroy to its caller,
// which makes them with no lock held: either may run a view's deleter,
// which takes the GIL.
//
// Threads: any thread may hold and release; jax's threads delete, destroy
// and launch. One mutex guards the table and is held only inside these
// functions, never across an engine call or a wait.
//
// The process's table belongs to the process runtime
// (collectives/process_runtime.h, buffer_holds()), which never destroys it:
// the PJRT library (entry points, transfers) and the Python module (DLPack
// exports) see the same one, and buffers are destroyed while the process
// exits. The class sits on the engine's floor: it knows engine buffers and
// the C API, nothing above.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

struct PJRT_Api;
struct PJRT_Buffer;

namespace myplugin {

class BufferHolds {
 public:
  BufferHolds() = default;
  BufferHolds(const BufferHolds&) = delete;
  BufferHolds& operator=(const BufferHolds&) = delete;

  // A user of `buffer`'s memory begins. False (no hold taken) when jax
  // deleted the buffer, or is deleting it on another thread: the memory may
  // be gone.
  bool Hold(PJRT_Buffer* buffer);

  // What the last release of a buffer hands back: the delete and destroy
  // that jax asked for meanwhile, for the caller to make now, in this order.
  struct Deferred {
    bool delete_now = false;
    bool destroy_now = false;
  };
  // A user of `buffer` ends (each Hold is released once).
  Deferred Release(PJRT_Buffer* buffer);
  // Release, then the deferred delete and destroy made through `api` (the
  // engine's table, or ours), with no lock held; their errors are dropped:
  // jax let go of the buffer already.
  void ReleaseThrough(const PJRT_Api* api, PJRT_Buffer* buffer);

  // jax's PJRT_Buffer_Delete: true when it is deferred (the caller answers
  // success without the engine). False: the caller deletes now, then calls
  // DeleteEnded; until then no Hold of the buffer succeeds.
  bool DeferDelete(PJRT_Buffer* buffer);
  void DeleteEnded(PJRT_Buffer* buffer);
  // jax's PJRT_Buffer_IsDeleted: true when its delete was deferred.
  bool DeleteDeferred(PJRT_Buffer* buffer);
  // jax's PJRT_Buffer_Destroy: true when it is deferred.
  bool DeferDestroy(PJRT_Buffer* buffer);

  // Appends to `held` the positions of `arguments` (one list of `count`
  // buffers per device) that are a held buffer on any device, sorted, no
  // repeats; false when there is none (with nothing held at all, the common
  // case, no lock is taken).
  bool HeldArguments(PJRT_Buffer* const* const* arguments, size_t devices, size_t count,
                     std::vector<int64_t>* held);

  // Buffers with an entry (held, or being deleted), for tests.
  size_t size();

 private:
  struct Entry {
    int holds = 0;
    int deleting = 0;  // jax's deletes in the engine now
    bool delete_deferred = false;
    bool destroy_deferred = false;
  };
  void EraseIfUnused(std::unordered_map<PJRT_Buffer*, Entry>::iterator it);

  std::mutex mu_;
  std::unordered_map<PJRT_Buffer*, Entry> entries_;  // under mu_
  std::atomic<size_t> count_{0};  // entries_.size(), read without the lock
};

}  // namespace myplugin
