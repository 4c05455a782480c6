// AgreementGate (collectives/agreement_gate.h) against a stand-in stream: a
// thread that runs what is enqueued on it in order, where a wait on the
// gate word blocks until the word reaches its number (cyclically, as
// CU_STREAM_WAIT_VALUE_GEQ compares), as a GPU's stream does. The
// agreements are functions that the test releases, fails or delays.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "collectives/agreement_gate.h"
#include "suites.h"

namespace {

using myplugin::collectives::AgreementGate;
using myplugin::Status;

// A stream: its operations run in order on its own thread.
class StandInStream {
 public:
  explicit StandInStream(const uint32_t* word) : word_(word), thread_([this] { Loop(); }) {}
  ~StandInStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Run(std::function<void()> op) { Push({std::move(op), 0, false}); }
  // cuStreamWaitValue32(word, number, GEQ).
  void Wait(uint32_t number) { Push({nullptr, number, true}); }
  // Whether everything enqueued so far has run, within `timeout_s`.
  bool Drained(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return ops_.empty() && !busy_; });
  }

 private:
  struct Op {
    std::function<void()> run;
    uint32_t number;
    bool wait;
  };
  void Push(Op op) {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back(std::move(op));
    cv_.notify_all();
  }
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !ops_.empty(); });
      // Stopped: what is still queued (behind a gate that never opened) is
      // dropped, as a destroyed context's work is.
      if (stop_ || ops_.empty()) return;
      Op op = std::move(ops_.front());
      ops_.pop_front();
      busy_ = true;
      lock.unlock();
      if (op.wait) {
        // The device polls the word; a stopped test ends the wait.
        while (static_cast<int32_t>(__atomic_load_n(word_, __ATOMIC_ACQUIRE) - op.number) < 0) {
          {
            std::lock_guard<std::mutex> stopping(mu_);
            if (stop_) break;
          }
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      } else {
        op.run();
      }
      lock.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }
  const uint32_t* word_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> ops_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

// An agreement that waits until the test lets it finish, with a result.
class HeldAgreement {
 public:
  std::function<Status()> Fn() {
    return [this] {
      std::unique_lock<std::mutex> lock(mu_);
      started_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return released_; });
      return result_;
    };
  }
  void Release(Status result = Status()) {
    std::lock_guard<std::mutex> lock(mu_);
    result_ = std::move(result);
    released_ = true;
    cv_.notify_all();
  }
  bool WaitStarted(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return started_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false, released_ = false;
  Status result_;
};

// Whether `done` holds within `timeout_s` (polled).
bool WaitFor(const std::function<bool()>& done, double timeout_s = 10) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// The calls are enqueued before anyone agreed; their results' consumers
// run only once the agreements have, in order.
void TestEnqueueFirstConsumersWait() {
  uint32_t word = 0;
  std::vector<std::string> log;
  std::mutex log_mu;
  auto note = [&](const std::string& s) {
    std::lock_guard<std::mutex> lock(log_mu);
    log.push_back(s);
  };
  std::atomic<int> failures{0};
  {
    AgreementGate gate(&word, [&](const Status&) { ++failures; });
    StandInStream stream(&word);
    HeldAgreement first, second;
    for (int i = 0; i < 2; ++i) {
      HeldAgreement& held = i == 0 ? first : second;
      Status st = gate.Enqueue([&, i] {
        stream.Run([&, i] { note("kernel " + std::to_string(i)); });
        return Status();
      }, [&](uint32_t number) {
        stream.Wait(number);
        return Status();
      }, held.Fn());
      CHECK(st.ok());
      // The consumer of call i's result, enqueued after it (XLA's done).
      stream.Run([&, i] { note("consumer " + std::to_string(i)); });
    }
    // Both calls were enqueued without waiting for any agreement; the
    // kernels of call 0 ran, and nothing after its gate did.
    auto logged = [&] {
      std::lock_guard<std::mutex> lock(log_mu);
      return log;
    };
    CHECK(first.WaitStarted(10));
    CHECK(WaitFor([&] { return logged().size() == 1; }));
    CHECK(!stream.Drained(0.2));  // it cannot: the stream waits at call 0's gate
    CHECK((logged() == std::vector<std::string>{"kernel 0"}));
    CHECK(gate.opened() == 0);
    first.Release();
    CHECK(second.WaitStarted(10));  // in order: the second after the first
    // The first gate opened: its consumer and the second kernel ran, and
    // the second consumer waits.
    CHECK(WaitFor([&] { return logged().size() == 3; }));
    CHECK(gate.opened() == 1);
    CHECK(!stream.Drained(0.2));  // at call 1's gate
    CHECK((logged() == std::vector<std::string>{"kernel 0", "consumer 0", "kernel 1"}));
    second.Release();
    CHECK(stream.Drained(10));
    CHECK(gate.opened() == 2);
    CHECK(gate.Drain(1));
  }
  CHECK((log == std::vector<std::string>{"kernel 0", "consumer 0", "kernel 1", "consumer 1"}));
  CHECK(failures == 0);
}

// A failed agreement: the gate never opens past the call before it, the
// owner hears it once, later calls are not enqueued and get the failure,
// and the agreements queued after it do not run.
void TestFailedAgreementKeepsTheGateShut() {
  uint32_t word = 0;
  std::vector<Status> heard;
  std::mutex heard_mu;
  std::atomic<int> later_ran{0};
  {
    AgreementGate gate(&word, [&](const Status& why) {
      std::lock_guard<std::mutex> lock(heard_mu);
      heard.push_back(why);
    });
    std::atomic<int> consumers{0};  // before the stream, which outlives none of what its ops touch
    StandInStream stream(&word);
    auto call = [&](std::function<Status()> agree) {
      Status st = gate.Enqueue([] { return Status(); }, [&](uint32_t number) {
        stream.Wait(number);
        return Status();
      }, std::move(agree));
      stream.Run([&] { ++consumers; });
      return st;
    };
    HeldAgreement failing;
    CHECK(call([] { return Status(); }).ok());
    CHECK(call(failing.Fn()).ok());
    CHECK(call([&] {
            ++later_ran;
            return Status();
          }).ok());
    failing.Release(Status(myplugin::Code::kFailedPrecondition, "mismatch in all-reduce sum f32[8]: process 1 "
                                                                "calls all-gather s32[3]"));
    CHECK(gate.Drain(10));
    CHECK(WaitFor([&] { return consumers == 1; }));
    CHECK(!stream.Drained(0.3));  // held at the second call's gate for good
    CHECK(consumers == 1 && gate.opened() == 1);
    CHECK(!gate.failure().ok() && gate.failure().message().find("process 1 calls all-gather") != std::string::npos);
    // A later call is refused before anything is enqueued.
    bool enqueued = false;
    Status refused = gate.Enqueue([&] {
      enqueued = true;
      return Status();
    }, [](uint32_t) { return Status(); }, [] { return Status(); });
    CHECK(!refused.ok() && !enqueued && refused.message() == gate.failure().message());
    // So is an agreement before a first enqueue.
    CHECK(!gate.AgreeNow([] { return Status(); }).ok());
  }
  CHECK(later_ran == 0);
  CHECK(heard.size() == 1 && heard[0].message().find("mismatch in all-reduce") != std::string::npos);
}

// AgreeNow runs after what is queued and returns its own result; its
// failure is its caller's (the gate stays open).
void TestAgreeNowInOrder() {
  uint32_t word = 0;
  std::vector<int> order;
  std::mutex order_mu;
  auto note = [&](int i) {
    std::lock_guard<std::mutex> lock(order_mu);
    order.push_back(i);
  };
  AgreementGate gate(&word, [](const Status&) {});
  HeldAgreement held;
  CHECK(gate.Enqueue([] { return Status(); }, [](uint32_t) { return Status(); }, [&, fn = held.Fn()] {
          Status st = fn();
          note(1);
          return st;
        }).ok());
  CHECK(held.WaitStarted(10));
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    held.Release();
  });
  Status now = gate.AgreeNow([&] {
    note(2);
    return Status(myplugin::Code::kDeadlineExceeded, "process 3 did not reach all-reduce sum f32[8] in 1 s");
  });
  release.join();
  CHECK(!now.ok() && now.code() == myplugin::Code::kDeadlineExceeded);
  CHECK((order == std::vector<int>{1, 2}));
  CHECK(gate.failure().ok() && gate.opened() == 1);
  CHECK(gate.AgreeNow([] { return Status(); }).ok());
}

// The numbers wrap: the word is compared cyclically, so a gate past 2^32
// calls still holds a call's consumers until its own agreement.
void TestNumbersWrap() {
  uint32_t word = 0;
  AgreementGate gate(&word, [](const Status&) {});
  std::vector<uint32_t> numbers;
  for (int i = 0; i < 3; ++i) {
    CHECK(gate.Enqueue([] { return Status(); }, [&](uint32_t n) {
            numbers.push_back(n);
            return Status();
          }, [] { return Status(); }).ok());
  }
  CHECK(gate.Drain(10));
  CHECK((numbers == std::vector<uint32_t>{1, 2, 3}) && gate.opened() == 3);
  // The comparison the stream makes, at the wrap.
  const uint32_t before_wrap = 0xffffffffu, after_wrap = 1;
  CHECK(static_cast<int32_t>(before_wrap - after_wrap) < 0);  // 2^32 - 1 has not reached 1 (after the wrap)
  CHECK(static_cast<int32_t>(after_wrap - before_wrap) >= 0);
}

// An error enqueueing is returned, and nothing is queued or numbered.
void TestEnqueueErrorQueuesNothing() {
  uint32_t word = 0;
  AgreementGate gate(&word, [](const Status&) {});
  bool agreed = false;
  Status st = gate.Enqueue([] { return Status(myplugin::Code::kInternal, "ncclAllReduce failed"); },
                           [](uint32_t) { return Status(); }, [&] {
                             agreed = true;
                             return Status();
                           });
  CHECK(!st.ok() && st.message() == "ncclAllReduce failed");
  std::vector<uint32_t> numbers;
  CHECK(gate.Enqueue([] { return Status(); }, [&](uint32_t n) {
          numbers.push_back(n);
          return Status();
        }, [] { return Status(); }).ok());
  CHECK(gate.Drain(10));
  CHECK(!agreed && (numbers == std::vector<uint32_t>{1}) && gate.failure().ok());
}

}  // namespace

void RunAgreementGateTests() {
  TestEnqueueFirstConsumersWait();
  TestFailedAgreementKeepsTheGateShut();
  TestAgreeNowInOrder();
  TestNumbersWrap();
  TestEnqueueErrorQueuesNothing();
}
