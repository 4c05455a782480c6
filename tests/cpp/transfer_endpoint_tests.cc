// The transfer endpoint (collectives/transfer_endpoint.h) between two
// processes' endpoints in one binary, over a real coordination service: on
// one host (the Unix socket and ring) and as if on two (TCP over loopback).
// The bytes against what was sent; the failures that jax cannot provoke (a
// source that cannot be read, a sink that cannot take the data) named on
// both sides; a mismatch; an empty array; an abort.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "collectives/transfer_endpoint.h"
#include "coordination/client.h"
#include "coordination/service.h"
#include "local_clients.h"

namespace {

using myplugin::Status;
using myplugin::StatusOr;
using namespace myplugin::collectives;
using namespace myplugin::coordination;

bool Has(const Status& st, const std::string& text) { return st.message().find(text) != std::string::npos; }

struct Pair {
  std::unique_ptr<CoordinationService> service;
  std::shared_ptr<CoordinationClient> client[2];
  std::unique_ptr<TransferEndpoint> end[2];
};

bool MakePair(Pair& p, bool same_host) {
  ServiceOptions options;
  options.num_processes = 2;
  options.token = "t";
  options.heartbeat_timeout_s = 60;
  auto service = CoordinationService::Start("127.0.0.1", 0, options);
  CHECK(service.ok());
  if (!service.ok()) return false;
  p.service = service.take();
  std::thread t[2];
  for (int i = 0; i < 2; ++i) {
    t[i] = std::thread([&p, i] {
      auto c = CoordinationClient::Connect(unit::LocalClientOptions(p.service->port(), "t", i, 2));
      if (c.ok() && c.value()->Register("").ok()) p.client[i] = std::shared_ptr<CoordinationClient>(c.take().release());
    });
  }
  for (auto& th : t) th.join();
  CHECK(p.client[0] && p.client[1]);
  if (!p.client[0] || !p.client[1]) return false;
  WaitLimits limits;
  limits.arrival_s = 5;
  limits.stall_s = 5;
  for (int i = 0; i < 2; ++i) {
    auto e = TransferEndpoint::Create(p.client[i], 0, i, 2, "127.0.0.1", {same_host, same_host}, limits);
    CHECK(e.ok());
    if (!e.ok()) return false;
    p.end[i] = e.take();
  }
  return true;
}

TransferSpec Spec(int64_t key, uint64_t bytes) {
  TransferSpec s;
  s.key = key;
  s.src_device = 0;
  s.dst_device = 1;
  s.element_type = 6;  // u8, say
  s.dims = {static_cast<int64_t>(bytes)};
  s.bytes = bytes;
  return s;
}

// Sends `data` from end[from] to end[1 - from]; the sender's result.
std::future<Status> Send(Pair& p, int from, const TransferSpec& spec, const std::vector<char>* data,
                         uint64_t fail_at = ~uint64_t{0}) {
  auto done = std::make_shared<std::promise<Status>>();
  auto future = done->get_future();
  p.end[from]->Send(
      1 - from, spec,
      [data, fail_at](uint64_t offset, size_t size, char*) -> StatusOr<const char*> {
        if (offset + size > fail_at) return myplugin::Internal("the source went away");
        return data->data() + offset;
      },
      [done](const Status& st) { done->set_value(st); });
  return future;
}

void TestRoundTrip(bool same_host) {
  Pair p;
  if (!MakePair(p, same_host)) return;
  // 40 MiB + 3 each way at once (several pieces, a short last one).
  const uint64_t n = (40u << 20) + 3;
  std::vector<char> a(n), b(n), got_a(n), got_b(n);
  for (uint64_t i = 0; i < n; ++i) a[i] = static_cast<char>(i * 7), b[i] = static_cast<char>(i * 13 + 1);
  auto into = [](std::vector<char>* out) {
    return [out](uint64_t offset, const char* d, size_t size, bool) {
      std::memcpy(out->data() + offset, d, size);
      return myplugin::OkStatus();
    };
  };
  TransferSpec back = Spec(2, n);
  back.src_device = 1;
  back.dst_device = 0;
  auto r1 = p.end[1]->Post(0, Spec(1, n), into(&got_a));
  auto r0 = p.end[0]->Post(1, back, into(&got_b));
  auto s0 = Send(p, 0, Spec(1, n), &a);
  auto s1 = Send(p, 1, back, &b);
  CHECK(p.end[1]->Wait(r1).ok());
  CHECK(p.end[0]->Wait(r0).ok());
  CHECK(s0.get().ok() && s1.get().ok());
  CHECK(got_a == a && got_b == b);

  // A landing area: over a socket every piece is read into it (the sink
  // gets pointers into it, in order); through a ring the pieces come from
  // the ring's slots and the area is not written.
  {
    std::vector<char> area(n, 0);
    uint64_t in_place = 0, elsewhere = 0, next = 0;
    bool ordered = true;
    auto r = p.end[1]->Post(
        0, Spec(9, n),
        [&](uint64_t offset, const char* d, size_t size, bool) {
          ordered = ordered && offset == next;
          next = offset + size;
          if (d == area.data() + offset) {
            in_place += size;
          } else {
            elsewhere += size;
            std::memcpy(got_a.data() + offset, d, size);
          }
          return myplugin::OkStatus();
        },
        area.data());
    auto sl = Send(p, 0, Spec(9, n), &a);
    CHECK(p.end[1]->Wait(r).ok() && sl.get().ok() && ordered && next == n);
    if (same_host) {
      CHECK(in_place == 0 && elsewhere == n && got_a == a);
      CHECK(std::all_of(area.begin(), area.end(), [](char c) { return c == 0; }));
    } else {
      CHECK(in_place == n && elsewhere == 0 && area == a);
    }
  }

  // An empty array: the sink sees one last piece of no bytes.
  int calls = 0;
  auto r = p.end[1]->Post(0, Spec(3, 0), [&calls](uint64_t, const char*, size_t size, bool last) {
    calls += (size == 0 && last) ? 1 : 100;
    return myplugin::OkStatus();
  });
  auto s = Send(p, 0, Spec(3, 0), &a);
  CHECK(p.end[1]->Wait(r).ok() && s.get().ok() && calls == 1);

  // The source fails after the first piece: the receiver hears why.
  auto rf = p.end[1]->Post(0, Spec(4, n), into(&got_a));
  auto sf = Send(p, 0, Spec(4, n), &a, kTransferPieceBytes + 1);
  Status got = p.end[1]->Wait(rf);
  CHECK(!got.ok() && Has(got, "process 0 failed") && Has(got, "the source went away"));
  if (!Has(got, "the source went away")) std::fprintf(stderr, "[%d] %s\n", same_host, got.message().c_str());
  CHECK(!sf.get().ok());

  // The sink fails: the sender hears that the receiver gave up, and why.
  auto rs = p.end[1]->Post(0, Spec(5, n), [](uint64_t, const char*, size_t, bool) {
    return myplugin::Internal("no room");
  });
  auto ss = Send(p, 0, Spec(5, n), &a);
  got = p.end[1]->Wait(rs);
  CHECK(!got.ok() && Has(got, "no room"));
  Status sent = ss.get();
  CHECK(!sent.ok() && Has(sent, "process 1 gave up") && Has(sent, "could not take the data: no room"));
  if (!Has(sent, "no room")) std::fprintf(stderr, "[%d] %s\n", same_host, sent.message().c_str());

  // A mismatch fails both sides, naming both; the connection stays usable.
  auto rm = p.end[1]->Post(0, Spec(6, 8), into(&got_a));
  auto sm = Send(p, 0, Spec(6, 16), &a);
  got = p.end[1]->Wait(rm);
  sent = sm.get();
  CHECK(!got.ok() && Has(got, "process 0 sends type 6 [16]") && Has(got, "process 1 expects type 6 [8]"));
  CHECK(!sent.ok() && Has(sent, "refused it"));
  auto r7 = p.end[1]->Post(0, Spec(7, 8), into(&got_a));
  auto s7 = Send(p, 0, Spec(7, 8), &a);
  CHECK(p.end[1]->Wait(r7).ok() && s7.get().ok());

  // An abort (a failure the service reported) ends a wait for a header.
  auto ra = p.end[1]->Post(0, Spec(8, 8), into(&got_a));
  std::thread abort([&p] { p.end[1]->Abort(myplugin::Status(myplugin::Code::kAborted, "process 0 failed: test")); });
  got = p.end[1]->Wait(ra);
  abort.join();
  CHECK(!got.ok() && Has(got, "was aborted: process 0 failed: test"));

  for (auto& e : p.end) e.reset();
  for (auto& c : p.client) (void)c->Shutdown(10);
  p.service->Stop();
}

}  // namespace

void RunTransferEndpointTests() {
  TestRoundTrip(true);
  TestRoundTrip(false);
}
