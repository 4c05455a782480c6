// The coordination service and its clients over real sockets, with many
// clients at once: every thread of the service (its event loops and its
// monitor) and of each client (reader, heartbeat) runs concurrently. Built
// with MYPLUGIN_SANITIZE=thread by ci/sanitizers.sh, this is the data-race
// check of the service and the client; in the normal build, a stress test of
// their results.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "coordination/client.h"
#include "coordination/service.h"
#include "local_clients.h"

namespace {

using namespace myplugin::coordination;

// Enough clients that the service's threads outnumber the cores many times.
constexpr int kClients = 32;
// Generous: a TSan build runs several times slower on a loaded 2-core machine.
constexpr double kTimeoutS = 120;

// `io_threads` event loops: with several, members on different loops
// arrive, read and are answered at once.
void TestManyConcurrentClients(int io_threads) {
  ServiceOptions options;
  options.num_processes = kClients;
  options.io_threads = io_threads;
  options.token = "stress-token";
  options.heartbeat_timeout_s = 60;
  options.initialization_timeout_s = kTimeoutS;
  auto service = CoordinationService::Start("127.0.0.1", 0, options);
  CHECK(service.ok());
  if (!service.ok()) return;

  std::atomic<int> registered{0}, values_right{0}, lists_right{0}, barriers{0}, shutdowns{0}, failures{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < kClients; ++p) {
    threads.emplace_back([&, p] {
      auto client = CoordinationClient::Connect(
          unit::LocalClientOptions(service.value()->port(), options.token, p, kClients, kTimeoutS));
      if (!client.ok()) {
        ++failures;
        return;
      }
      CoordinationClient& c = *client.value();
      int callback_calls = 0;
      c.AddFailureCallback([&](const myplugin::Status&) { ++callback_calls; });
      auto topo = c.Register("topology of " + std::to_string(p));
      if (topo.ok() && topo.value().members.size() == kClients &&
          topo.value().members[(p + 1) % kClients].topology ==
                                                                "topology of " + std::to_string((p + 1) % kClients)) {
        ++registered;
      }
      // Every process publishes a value and reads its neighbours' (blocking
      // gets that may arrive before the set), then the whole store.
      if (!c.KeyValueSet("stress/" + std::to_string(p), std::string(100 + p, static_cast<char>('a' + p % 26))).ok()) {
        ++failures;
      }
      bool right = true;
      for (int d = 1; d <= 3; ++d) {
        int q = (p + d) % kClients;
        auto v = c.KeyValueGet("stress/" + std::to_string(q), kTimeoutS);
        right = right && v.ok() && v.value() == std::string(100 + q, static_cast<char>('a' + q % 26));
      }
      if (right) ++values_right;
      if (c.Barrier("after-set", kTimeoutS).ok()) ++barriers;
      auto all = c.KeyValueList("stress/");
      if (all.ok() && all.value().size() == kClients) ++lists_right;
      if (!c.Barrier("after-list", kTimeoutS).ok()) ++failures;
      if (!c.KeyValueDelete("stress/" + std::to_string(p)).ok()) ++failures;
      if (c.Shutdown(kTimeoutS).ok()) ++shutdowns;
      if (callback_calls != 0 || c.failure().has_value()) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(registered == kClients);
  CHECK(values_right == kClients);
  CHECK(barriers == kClients);
  CHECK(lists_right == kClients);
  CHECK(shutdowns == kClients);
  CHECK(failures == 0);
  CHECK(service.value()->all_departed());
  CHECK(!service.value()->failure().has_value());
  service.value()->Stop();
}

// Found by the ASan run of tests/test_coordination.py (its timing): members
// that close their connections while the host stops its service. A reader
// that ends during the stop leaves its queue for Stop to close; the accept
// thread's last reap joined that connection's writer, still waiting on the
// queue, while Stop waited for the accept thread: Stop never returned.
void TestStopWhileMembersClose() {
  for (int round = 0; round < 4; ++round) {
    ServiceOptions options;
    options.num_processes = 4;
    options.io_threads = 1 + round % 2 * 2;  // 1 and 3 loops
    options.token = "t";
    auto service = CoordinationService::Start("127.0.0.1", 0, options);
    CHECK(service.ok());
    if (!service.ok()) return;
    std::vector<std::unique_ptr<CoordinationClient>> clients;
    for (int p = 0; p < 4; ++p) {
      auto c = CoordinationClient::Connect(unit::LocalClientOptions(service.value()->port(), "t", p, 4, 30));
      CHECK(c.ok());
      if (c.ok()) clients.push_back(c.take());
    }
    // Stop, and close every member while the accept thread is still in its
    // last wait (100 ms) before it sees the stop.
    auto stopped = std::async(std::launch::async, [&] { service.value()->Stop(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    clients.clear();
    if (stopped.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      std::fprintf(stderr, "%s:%d: CHECK failed: CoordinationService::Stop() deadlocked\n", __FILE__, __LINE__);
      std::_Exit(1);  // the hung threads cannot be joined
    }
    CHECK(true);
  }
}

}  // namespace

// The number of event loops: chosen from the job's size and the cores, and
// a wrong one refused at start, naming the range.
void TestIoThreads() {
  CHECK(IoThreadsFor(1, 16) == 1);
  CHECK(IoThreadsFor(kProcessesPerIoThread, 16) == 1);
  CHECK(IoThreadsFor(kProcessesPerIoThread + 1, 16) == 2);
  CHECK(IoThreadsFor(4096, 16) == 2);
  CHECK(IoThreadsFor(16384, 16) == 8);
  CHECK(IoThreadsFor(16384, 8) == 4);  // half the cores
  CHECK(IoThreadsFor(16384, 2) == 1);
  CHECK(IoThreadsFor(1 << 20, 64) == kMaxIoThreads);
  CHECK(IoThreadsFor(16384, 0) == 1);  // cores unknown
  for (int bad : {-1, kMaxIoThreads + 1}) {
    ServiceOptions options;
    options.num_processes = 2;
    options.io_threads = bad;
    auto service = CoordinationService::Start("127.0.0.1", 0, options);
    CHECK(!service.ok());
    if (!service.ok()) {
      CHECK(service.status().code() == myplugin::Code::kInvalidArgument);
      CHECK(service.status().message().find("io_threads must be between 1 and " + std::to_string(kMaxIoThreads)) !=
            std::string::npos);
    }
  }
}

void RunCoordinationStressTests() {
  TestIoThreads();
  TestManyConcurrentClients(1);
  TestManyConcurrentClients(3);
  TestStopWhileMembersClose();
}
