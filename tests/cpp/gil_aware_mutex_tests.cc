// A mutex that a thread holding the GIL waits for without it
// (common/gil_aware_mutex.h), with the GIL modelled by a mutex and a
// thread-local flag: the deadlock that a plain lock had (a holder waiting
// for the GIL, the GIL's holder waiting for the lock) ends; a thread gets
// the GIL back once it let the lock go; a holder may lock again on its own
// thread; with no GIL calls it is a plain lock. A deadlock fails the test
// after 20 s instead of hanging it.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "check.h"
#include "common/gil_aware_mutex.h"

namespace {

using namespace myplugin;

// The model GIL.
std::mutex gil;
thread_local bool holds_gil = false;
int Held() { return holds_gil ? 1 : 0; }
void* Release() {
  holds_gil = false;
  gil.unlock();
  return reinterpret_cast<void*>(0x1);
}
void Restore(void*) {
  gil.lock();
  holds_gil = true;
}
void TakeGil() { Restore(nullptr); }
void DropGil() { (void)Release(); }

// Runs `body` on a thread; the process fails loudly if it is not done in time.
void WithinDeadline(const char* what, std::function<void()> body) {
  auto done = std::async(std::launch::async, std::move(body));
  if (done.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    std::fprintf(stderr, "gil_aware_mutex_tests: %s did not finish in 20 s (a deadlock)\n", what);
    std::fflush(stderr);
    std::_Exit(1);
  }
  done.get();
}

// Thread A holds the lock and then needs the GIL (a last release running
// numpy's deleter); thread B holds the GIL and then needs the lock (jaxlib
// releasing a buffer-protocol view).
void TestHolderNeedingTheGil() {
  WithinDeadline("lock holder needing the GIL", [] {
    GilAwareMutex mutex(GilCalls{&Held, &Release, &Restore});
    std::promise<void> a_locked;
    bool b_held_gil_after = false;
    std::thread b([&] {
      TakeGil();
      a_locked.get_future().wait();
      {
        GilAwareMutex::Lock lock(mutex);
        // B waited without the GIL and holds the lock without it.
        CHECK(!holds_gil);
      }
      b_held_gil_after = holds_gil;  // given back once the lock went
      DropGil();
    });
    std::thread a([&] {
      GilAwareMutex::Lock lock(mutex);
      a_locked.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // B is waiting now
      TakeGil();  // the deleter: only possible because B let the GIL go
      DropGil();
    });
    a.join();
    b.join();
    CHECK(b_held_gil_after);
  });
}

// A holder that holds the GIL too keeps it (nothing to wait for), and a
// deleter run under the lock may lock it again on the same thread.
void TestRecursiveAndUncontended() {
  WithinDeadline("recursive lock", [] {
    GilAwareMutex mutex(GilCalls{&Held, &Release, &Restore});
    TakeGil();
    {
      GilAwareMutex::Lock outer(mutex);
      CHECK(holds_gil);
      GilAwareMutex::Lock inner(mutex);
      CHECK(holds_gil);
    }
    CHECK(holds_gil);
    DropGil();
  });
}

// Without GIL calls (no Python in the process): a plain lock, which still
// excludes: two threads' changes never overlap.
void TestPlain() {
  WithinDeadline("plain lock", [] {
    GilAwareMutex mutex;
    int inside = 0;
    int overlaps = 0;
    std::thread threads[4];
    for (std::thread& t : threads) {
      t = std::thread([&] {
        for (int i = 0; i < 10000; ++i) {
          GilAwareMutex::Lock lock(mutex);
          if (++inside != 1) ++overlaps;
          --inside;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    CHECK(overlaps == 0);
  });
}

}  // namespace

void RunGilAwareMutexTests() {
  TestHolderNeedingTheGil();
  TestRecursiveAndUncontended();
  TestPlain();
}
