// The flight recorder's ring: wrap-around, and readers that run while
// several threads record never see a torn entry.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "collectives/flight_recorder.h"
#include "collectives/process_runtime.h"

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
  s.group_hash = writer;
  s.sequence = n;
  s.extra = writer * 1000003 + n;
  return s;
}

bool Consistent(const CallRecord& r) {
  const Signature& s = r.signature;
  return s.count == s.sequence * 7 && s.extra == s.group_hash * 1000003 + s.sequence &&
         r.num_processes == 2 && r.processes[0] == static_cast<int>(s.group_hash) &&
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
    // A last pass after `stop`: on a loaded machine the reader's passes may
    // all have come before the first record, or after the writers were done.
    bool last = false;
    do {
      last = stop.load();
      for (const CallRecord& r : rec.Snapshot()) {
        seen.fetch_add(1);
        if (!Consistent(r)) torn.fetch_add(1);
      }
    } while (!last);
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

// The jitted function's name (FunctionScope, per thread, nested) and a
// barrier's members reach the record and its description; names longer than
// the slot's field are cut, never overrun.
void TestFunctionNamesAndBarrierMembers() {
  using myplugin::collectives::FunctionScope;
  FlightRecorder rec(16);
  Signature sig;
  sig.op = CollectiveOp::kAllReduce;
  sig.count = 4;
  CHECK(FunctionScope::Current() == nullptr);
  {
    FunctionScope outer("jit_train_step");
    {
      FunctionScope inner(std::string(100, 'x'));
      rec.Begin(sig, {0, 1}, nullptr, FunctionScope::Current());
    }
    CHECK(std::string(FunctionScope::Current()) == "jit_train_step");
    rec.Begin(sig, {0, 1}, nullptr, FunctionScope::Current());
    std::string other;
    std::thread([&] { other = FunctionScope::Current() == nullptr ? "none" : "leaked"; }).join();
    CHECK(other == "none");  // another thread's collectives are not this function's
  }
  CHECK(FunctionScope::Current() == nullptr);
  rec.Begin(sig, {0, 1});
  Signature barrier;
  barrier.op = CollectiveOp::kBarrier;
  rec.Begin(barrier, {0, 2}, "jax/pair");
  rec.Begin(barrier, {}, "jax/all");
  std::vector<CallRecord> all = rec.Snapshot();
  CHECK(all.size() == 5);
  CHECK(std::string(all[0].function) == std::string(CallRecord::kNameBytes - 1, 'x'));
  CHECK(all[1].Describe().size() > 0 && all[1].Describe().find(" on processes [0, 1] in jit_train_step") != std::string::npos);
  CHECK(all[2].function[0] == '\0' && all[2].Describe().find(" in ") == std::string::npos);
  CHECK(all[3].Describe() == "barrier 'jax/pair' of processes [0, 2]");
  CHECK(all[4].Describe() == "barrier 'jax/all'");
}

// Uses of a barrier are numbered per name and members.
void TestBarrierUses() {
  using myplugin::collectives::RecordedBarrier;
  auto& rec = myplugin::collectives::ProcessRuntime::Get().flight_recorder();
  uint64_t a0 = RecordedBarrier::Begin("unit/a", {});
  RecordedBarrier::End(a0, true, "");
  uint64_t a1 = RecordedBarrier::Begin("unit/a", {});
  uint64_t pair = RecordedBarrier::Begin("unit/a", {0, 2});
  RecordedBarrier::End(a1, true, "");
  RecordedBarrier::End(pair, true, "");
  std::vector<CallRecord> all = rec.Snapshot();
  CHECK(all.size() >= 3);
  const CallRecord& r0 = all[all.size() - 3];
  const CallRecord& r1 = all[all.size() - 2];
  const CallRecord& rp = all[all.size() - 1];
  CHECK(r0.signature.sequence == 0 && r1.signature.sequence == 1 && rp.signature.sequence == 0);
  CHECK(r0.signature.group_hash == r1.signature.group_hash && rp.signature.group_hash != r0.signature.group_hash);
  CHECK(r1.state == CallState::kDone && rp.Processes() == std::vector<int>({0, 2}));
  CHECK(r0.Describe() == "barrier 'unit/a'" && r1.Describe() == "barrier 'unit/a' (use #1)");
  CHECK(rp.Describe() == "barrier 'unit/a' of processes [0, 2]");
}

// How long the oldest compile in progress has run.
void TestCompileScope() {
  using myplugin::collectives::CompileScope;
  CHECK(CompileScope::InProgress() == 0 && CompileScope::OldestSeconds() == 0);
  {
    CompileScope first;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CompileScope second;
    CHECK(CompileScope::InProgress() == 2);
    CHECK(CompileScope::OldestSeconds() >= 0.05);
  }
  CHECK(CompileScope::InProgress() == 0 && CompileScope::OldestSeconds() == 0);
}

}  // namespace

void RunFlightRecorderTests() {
  TestWrap();
  TestConcurrentReaders();
  TestFunctionNamesAndBarrierMembers();
  TestBarrierUses();
  TestCompileScope();
}
