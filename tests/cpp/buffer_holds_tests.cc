// Holds on engine buffers (engine/buffer_holds.h): jax's delete, destroy
// and donation of a held buffer wait for its last hold, which hands the
// deferred ones back in order; a buffer being deleted cannot be held; and
// many threads holding, releasing, deleting and launching at once leave a
// consistent table (run under TSan in CI's sanitizer step).
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "check.h"
#include "engine/buffer_holds.h"

namespace {

using namespace myplugin;

PJRT_Buffer* Fake(int i) { return reinterpret_cast<PJRT_Buffer*>(static_cast<intptr_t>(0x1000 + 8 * i)); }

void TestDeferredDestroyAndDelete() {
  BufferHolds h;
  // Nothing held: jax's calls go to the engine.
  CHECK(!h.DeferDestroy(Fake(1)));
  CHECK(!h.DeferDelete(Fake(1)));
  h.DeleteEnded(Fake(1));
  CHECK(!h.DeleteDeferred(Fake(1)));
  CHECK(h.size() == 0);
  // Two holds (a send and an export); jax deletes, then destroys, between
  // them: the last release hands both back, the delete first.
  CHECK(h.Hold(Fake(2)));
  CHECK(h.Hold(Fake(2)));
  CHECK(!h.DeferDestroy(Fake(3)));  // another buffer is not held
  CHECK(h.DeferDelete(Fake(2)));
  CHECK(h.DeleteDeferred(Fake(2)));  // jax's IsDeleted: true, as after the engine's delete
  CHECK(!h.Hold(Fake(2)));          // a deleted array is sent or exported no more
  CHECK(h.DeferDestroy(Fake(2)));
  BufferHolds::Deferred first = h.Release(Fake(2));
  CHECK(!first.delete_now && !first.destroy_now);
  BufferHolds::Deferred last = h.Release(Fake(2));
  CHECK(last.delete_now && last.destroy_now);
  CHECK(h.size() == 0);
  CHECK(!h.DeferDestroy(Fake(2)));  // forgotten: the next buffer at that address is the engine's
  // Holds that end before jax's calls leave them to jax.
  CHECK(h.Hold(Fake(4)));
  BufferHolds::Deferred none = h.Release(Fake(4));
  CHECK(!none.delete_now && !none.destroy_now);
  CHECK(!h.DeferDestroy(Fake(4)));
  // A destroy alone (the array collected) is handed back without a delete.
  CHECK(h.Hold(Fake(5)));
  CHECK(h.DeferDestroy(Fake(5)));
  BufferHolds::Deferred destroy = h.Release(Fake(5));
  CHECK(!destroy.delete_now && destroy.destroy_now);
  // Releasing what was never held changes nothing.
  BufferHolds::Deferred never = h.Release(Fake(6));
  CHECK(!never.delete_now && !never.destroy_now);
  CHECK(h.size() == 0);
}

void TestDeleteInProgress() {
  BufferHolds h;
  // jax deletes in the engine now (not held when it asked): no hold can
  // begin until the delete has ended, so nothing reads memory being freed.
  CHECK(!h.DeferDelete(Fake(10)));
  CHECK(!h.Hold(Fake(10)));
  h.DeleteEnded(Fake(10));
  CHECK(h.size() == 0);
  // Afterwards a hold is taken (the engine then refuses the deleted buffer).
  CHECK(h.Hold(Fake(10)));
  h.Release(Fake(10));
  CHECK(h.size() == 0);
}

void TestHeldArguments() {
  BufferHolds h;
  PJRT_Buffer* device0[3] = {Fake(20), Fake(21), Fake(22)};
  PJRT_Buffer* device1[3] = {Fake(23), Fake(24), Fake(25)};
  PJRT_Buffer* const* lists[2] = {device0, device1};
  std::vector<int64_t> held;
  CHECK(!h.HeldArguments(lists, 2, 3, &held));  // nothing held anywhere
  CHECK(h.Hold(Fake(99)));
  CHECK(!h.HeldArguments(lists, 2, 3, &held));  // held, but no argument
  CHECK(held.empty());
  CHECK(h.Hold(Fake(22)));
  CHECK(h.Hold(Fake(24)));
  CHECK(h.Hold(Fake(25)));
  CHECK(h.HeldArguments(lists, 2, 3, &held));
  CHECK((held == std::vector<int64_t>{1, 2}));  // position 2 held on both devices: named once
  held.clear();
  CHECK(h.HeldArguments(lists, 1, 3, &held));  // one device's list (execute_device)
  CHECK((held == std::vector<int64_t>{2}));
  for (PJRT_Buffer* b : {Fake(99), Fake(22), Fake(24), Fake(25)}) h.Release(b);
  CHECK(h.size() == 0);
}

// Threads hold and release buffers as sends and exports do, while jax's
// threads delete, destroy and launch with them: every delete and destroy
// happens exactly once, either at once or from the last release.
void TestManyThreads() {
  BufferHolds h;
  constexpr int kBuffers = 16;
  constexpr int kRounds = 2000;
  std::atomic<int> deletes[kBuffers] = {};
  std::atomic<int> destroys[kBuffers] = {};
  std::atomic<int> launches_kept{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        PJRT_Buffer* b = Fake(100 + (r + t) % kBuffers);
        if (!h.Hold(b)) continue;
        std::this_thread::yield();
        BufferHolds::Deferred d = h.Release(b);
        const int i = (r + t) % kBuffers;
        if (d.delete_now) deletes[i]++;
        if (d.destroy_now) destroys[i]++;
      }
    });
  }
  threads.emplace_back([&] {
    for (int r = 0; r < kRounds; ++r) {
      PJRT_Buffer* args[kBuffers];
      for (int i = 0; i < kBuffers; ++i) args[i] = Fake(100 + i);
      PJRT_Buffer* const* lists[1] = {args};
      std::vector<int64_t> held;
      if (h.HeldArguments(lists, 1, kBuffers, &held)) launches_kept++;
    }
  });
  threads.emplace_back([&] {
    // jax deletes then destroys each buffer once, late in the run.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (int i = 0; i < kBuffers; ++i) {
      PJRT_Buffer* b = Fake(100 + i);
      if (!h.DeferDelete(b)) {
        deletes[i]++;
        h.DeleteEnded(b);
      }
      if (!h.DeferDestroy(b)) destroys[i]++;
    }
  });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kBuffers; ++i) {
    CHECK(deletes[i].load() == 1);
    CHECK(destroys[i].load() == 1);
  }
  CHECK(h.size() == 0);
}

}  // namespace

void RunBufferHoldsTests() {
  TestDeferredDestroyAndDelete();
  TestDeleteInProgress();
  TestHeldArguments();
  TestManyThreads();
}
