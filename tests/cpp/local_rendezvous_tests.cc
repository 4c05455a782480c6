// The local rendezvous (collectives/local_rendezvous.h): threads standing in
// for one process's devices meet, the last to arrive runs the operation once
// with every device's buffers in slot order, all get its status, the group
// is reusable call after call, and a missing device is a named timeout.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "collectives/local_rendezvous.h"
#include "collectives/process_runtime.h"

namespace {

using namespace myplugin::collectives;
using myplugin::Code;
using myplugin::Status;

void TestDevicesMeet() {
  constexpr int kDevices = 4, kCalls = 50;
  const std::vector<int> group = {100, 101, 102, 103};  // ids no other test uses
  std::atomic<int> runs{0};
  std::vector<int> send(kDevices), recv(kDevices, -1);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int d = 0; d < kDevices; ++d) {
    threads.emplace_back([&, d] {
      for (int call = 0; call < kCalls; ++call) {
        send[d] = call * 10 + d;
        Status st = myplugin::collectives::ProcessRuntime::Get().local_rendezvous().Join(
            group, d, kDevices, &send[d], &recv[d],
            [&](const DeviceBuffers& b) {
              ++runs;
              // Every device's buffers, in slot order: recv[i] = sum of all sends.
              int sum = 0;
              for (const void* p : b.send) sum += *static_cast<const int*>(p);
              for (void* p : b.recv) *static_cast<int*>(p) = sum;
              return myplugin::OkStatus();
            },
            30);
        // sum over d of (call*10 + d) = 40*call + 6
        if (!st.ok() || recv[d] != 40 * call + 6) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(runs == kCalls);  // once per call, not once per device
}

void TestEveryDeviceGetsTheStatus() {
  const std::vector<int> group = {200, 201};
  int x[2], y[2];
  Status got[2];
  std::vector<std::thread> threads;
  for (int d = 0; d < 2; ++d) {
    threads.emplace_back([&, d] {
      got[d] = myplugin::collectives::ProcessRuntime::Get().local_rendezvous().Join(
          group, d, 2, &x[d], &y[d], [](const DeviceBuffers&) { return Status(Code::kAborted, "peer gone"); }, 30);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(got[0].code() == Code::kAborted && got[1].code() == Code::kAborted && got[1].message() == "peer gone");
}

void TestOneDeviceRunsAlone() {
  int x = 3, y = 0;
  Status st = myplugin::collectives::ProcessRuntime::Get().local_rendezvous().Join({300}, 0, 1, &x, &y, [](const DeviceBuffers& b) {
    *static_cast<int*>(b.recv[0]) = *static_cast<const int*>(b.send[0]) * 2;
    return myplugin::OkStatus();
  }, 1);
  CHECK(st.ok() && y == 6);
}

void TestMissingDeviceTimesOut() {
  int x = 0, y = 0;
  bool ran = false;
  Status st = myplugin::collectives::ProcessRuntime::Get().local_rendezvous().Join({400, 401, 402}, 0, 3, &x, &y, [&](const DeviceBuffers&) {
    ran = true;
    return myplugin::OkStatus();
  }, 0.2);
  CHECK(!ran && st.code() == Code::kDeadlineExceeded);
  // The error names the slots that never came.
  CHECK(st.message().find("devices [400, 401, 402] timed out waiting for local device slots [1, 2]") !=
        std::string::npos);
}

// Three devices meet on `group` and the operation runs once: the group's
// state is whole again after devices left it early.
void CheckAFullMeeting(const std::vector<int>& group) {
  std::atomic<int> runs{0};
  std::vector<Status> got(group.size());
  std::vector<int> x(group.size()), y(group.size());
  std::vector<std::thread> threads;
  for (size_t d = 0; d < group.size(); ++d) {
    threads.emplace_back([&, d] {
      got[d] = ProcessRuntime::Get().local_rendezvous().Join(group, static_cast<int>(d), static_cast<int>(group.size()),
                                                            &x[d], &y[d], [&](const DeviceBuffers& b) {
                                                              ++runs;
                                                              for (const void* p : b.send) CHECK(p != nullptr);
                                                              return myplugin::OkStatus();
                                                            }, 10.0);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(runs == 1);
  for (const Status& st : got) CHECK(st.ok());
}

void TestATimedOutDeviceLeavesTheGroupWhole() {
  // TestMissingDeviceTimesOut left slot 0 of this group: it took itself out.
  CheckAFullMeeting({400, 401, 402});
}

// The client's teardown closes the rendezvous: a device waiting for local
// devices whose parts will never run leaves at once (it held the teardown
// for the collective timeout), the close names what it cut short, new joins
// are refused, and after Reopen the group meets again.
void TestCloseEndsTheWaitsAndReopenServesAgain() {
  LocalRendezvous& r = ProcessRuntime::Get().local_rendezvous();
  const std::vector<int> group = {500, 501};
  int x = 0, y = 0;
  Status waited;
  auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    waited = r.Join(group, 0, 2, &x, &y, [](const DeviceBuffers&) { return myplugin::OkStatus(); }, 60.0);
  });
  while (r.Arrived(group) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<std::string> cut = r.Close("the client is being destroyed");
  waiter.join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(cut.size() == 1 && cut[0] == "the collective on devices [500, 501]: local device slots [0] waited for slots [1]");
  CHECK(waited.code() == Code::kAborted);
  CHECK(waited.message() == "the collective on devices [500, 501] was cut short waiting for local device slots [1] of "
                            "this process: the client is being destroyed");
  CHECK(took < 10.0);
  Status refused = r.Join(group, 1, 2, &x, &y, [](const DeviceBuffers&) { return myplugin::OkStatus(); }, 60.0);
  CHECK(refused.code() == Code::kAborted &&
        refused.message() == "the collective on devices [500, 501] was not started: the client is being destroyed");
  r.Reopen();
  CheckAFullMeeting(group);
}

}  // namespace

void RunLocalRendezvousTests() {
  TestDevicesMeet();
  TestEveryDeviceGetsTheStatus();
  TestOneDeviceRunsAlone();
  TestMissingDeviceTimesOut();
  TestATimedOutDeviceLeavesTheGroupWhole();
  TestCloseEndsTheWaitsAndReopenServesAgain();
}
