// A Gloo context whose waits all end when it is aborted
// (collectives/abortable_gloo_context.h): two ranks in one process, over
// loopback TCP. Its buffers still carry Gloo's own algorithms, and an abort
// ends a wait at once, with the abort's words, where Gloo would sleep until
// the wait's timeout.
#include <gloo/allreduce.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "collectives/abortable_gloo_context.h"

namespace {

using myplugin::collectives::AbortableGlooContext;
using Clock = std::chrono::steady_clock;

std::vector<std::shared_ptr<AbortableGlooContext>> Connect() {
  gloo::rendezvous::HashStore store;
  std::vector<std::shared_ptr<AbortableGlooContext>> contexts;
  for (int r = 0; r < 2; ++r) contexts.push_back(std::make_shared<AbortableGlooContext>(r, 2));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      contexts[r]->setTimeout(std::chrono::seconds(30));
      contexts[r]->connectFullMesh(store, device);
      contexts[r]->Wrap();
    });
  }
  for (auto& t : threads) t.join();
  return contexts;
}

// What a wait that should throw says; "" when it returned.
template <typename Wait>
std::string Thrown(Wait&& wait) {
  try {
    wait();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void TestGloosAlgorithmsRunThroughTheWrappers() {
  auto contexts = Connect();
  std::vector<std::vector<float>> data(2, std::vector<float>(1 << 20));
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < data[r].size(); ++i) data[r][i] = static_cast<float>(i % 97) * (r + 1);
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      gloo::AllreduceOptions opts(contexts[r]);
      opts.setOutput(data[r].data(), data[r].size());
      opts.setReduceFunction([](void* c, const void* a, const void* b, size_t n) {
        auto* out = static_cast<float*>(c);
        for (size_t i = 0; i < n; ++i) out[i] = static_cast<const float*>(a)[i] + static_cast<const float*>(b)[i];
      });
      opts.setTag(7);
      gloo::allreduce(opts);
    });
  }
  for (auto& t : threads) t.join();
  bool same = true;
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < data[r].size(); ++i) same = same && data[r][i] == static_cast<float>(i % 97) * 3;
  }
  CHECK(same);
}

void TestAnAbortEndsAWaitAtOnceWithItsWords() {
  auto contexts = Connect();
  std::vector<char> bytes(1 << 16);
  auto in = contexts[0]->createUnboundBuffer(bytes.data(), bytes.size());
  in->recv(1, /*slot=*/3);  // rank 1 never sends
  const auto start = Clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    contexts[0]->Abort("process 2 failed");
  });
  const std::string why = Thrown([&] { in->waitRecv(std::chrono::seconds(30)); });
  aborter.join();
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  CHECK(why == "process 2 failed");
  // Woken by the abort, not by the wait's 30 s.
  CHECK(waited < 10);
  // A wait that starts after the abort, on a buffer made before it or
  // after, throws at once too.
  CHECK(Thrown([&] { in->waitSend(std::chrono::seconds(30)); }) == "process 2 failed");
  auto later = contexts[0]->createUnboundBuffer(bytes.data(), bytes.size());
  CHECK(Thrown([&] { later->waitRecv(std::chrono::seconds(30)); }) == "process 2 failed");
  // (The communicator fails the pairs before it aborts the context, so no
  // pair touches a buffer after its wait ended; here nothing closes a pair
  // before the buffers are gone, so nothing does either.)
}

}  // namespace

void RunAbortableGlooContextTests() {
  TestGloosAlgorithmsRunThroughTheWrappers();
  TestAnAbortEndsAWaitAtOnceWithItsWords();
}
