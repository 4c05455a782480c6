// The flight recorder's ring: wrap-around, and readers that run while
// several threads record never see a torn entry.
#include <atomic>
#include <thread>
#include <vector>

#include "check.h"
#include "collectives/flight_recorder.h"

using myplugin::collectives::CallRecord;
using myplugin::collectives::CallState;
using myplugin::collectives::CollectiveOp;
using myplugin::collectives::FlightRecorder;
using myplugin::collectives::Signature;

namespace {

Signature Sig(uint64_t writer, uint64_t n) {
  Signature s;
  s.op = CollectiveOp::kAllGather;
  s.count = n * 7;  // count, hash and extra derive from (writer, n): a torn copy breaks the relation
  s.clique_hash = writer;
  s.sequence = n;
  s.extra = writer * 1000003 + n;
  return s;
}

bool Consistent(const CallRecord& r) {
  const Signature& s = r.signature;
  return s.count == s.sequence * 7 && s.extra == s.clique_hash * 1000003 + s.sequence &&
         r.num_processes == 2 && r.processes[0] == static_cast<int>(s.clique_hash) &&
         r.processes[1] == static_cast<int>(s.sequence % 1000) && r.start_ns > 0;
}

void TestWrap() {
  FlightRecorder rec(16);
  for (uint64_t n = 0; n < 40; ++n) {
    uint64_t id = rec.Begin(Sig(1, n), {1, static_cast<int>(n % 1000)});
    rec.Matched(id);
    rec.End(id, n != 39);
  }
  std::vector<CallRecord> all = rec.Snapshot();
  CHECK(all.size() == 16);
  CHECK(rec.recorded() == 40);
  for (size_t i = 0; i < all.size(); ++i) {
    CHECK(all[i].signature.sequence == 24 + i);
    CHECK(Consistent(all[i]));
  }
  CHECK(all.back().state == CallState::kFailed && all.front().state == CallState::kDone);
  CHECK(all.front().start_ns <= all.front().match_ns && all.front().match_ns <= all.front().end_ns);
  CHECK(!rec.OldestInFlight(myplugin::collectives::MonotonicNanos()));
  uint64_t open = rec.Begin(Sig(1, 40), {1, 40});
  auto late = rec.OldestInFlight(myplugin::collectives::MonotonicNanos());
  CHECK(late && late->id == open && late->state == CallState::kIssued);
  CHECK(!rec.OldestInFlight(late->start_ns - 1));  // not yet old enough
  rec.End(0, true);  // an entry never recorded: ignored
}

void TestConcurrentReaders() {
  FlightRecorder rec(64);
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, seen{0};
  std::thread reader([&] {
    while (!stop.load()) {
      for (const CallRecord& r : rec.Snapshot()) {
        seen.fetch_add(1);
        if (!Consistent(r)) torn.fetch_add(1);
      }
    }
  });
  std::vector<std::thread> writers;
  for (uint64_t w = 1; w <= 4; ++w) {
    writers.emplace_back([&rec, w] {
      for (uint64_t n = 0; n < 20000; ++n) {
        uint64_t id = rec.Begin(Sig(w, n), {static_cast<int>(w), static_cast<int>(n % 1000)});
        rec.Matched(id);
        rec.End(id, true);
      }
    });
  }
  for (auto& t : writers) t.join();
  stop.store(true);
  reader.join();
  CHECK(torn.load() == 0);
  CHECK(seen.load() > 0);
  CHECK(rec.recorded() == 80000);
}

}  // namespace

void RunFlightRecorderTests() {
  TestWrap();
  TestConcurrentReaders();
}
