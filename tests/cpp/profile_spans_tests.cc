// The span recorder of profiles: inert outside a session, a session gets
// the spans that began in it (from every thread), overlapping sessions
// each get theirs, and a recorded call of the flight recorder becomes the
// call with its wait and its data movement inside.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "collectives/flight_recorder.h"
#include "common/profile_spans.h"

namespace profile = myplugin::profile;
using myplugin::collectives::CollectiveOp;
using myplugin::collectives::FlightRecorder;
using myplugin::collectives::Signature;

namespace {

size_t Count(const profile::Collected& c, const std::string& name) {
  return std::count_if(c.spans.begin(), c.spans.end(), [&](const profile::SpanRecord& s) { return s.name == name; });
}

const profile::SpanRecord* Find(const profile::Collected& c, const std::string& name) {
  for (const auto& s : c.spans) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

void TestInertOutsideSessions() {
  CHECK(!profile::Active());
  { profile::Span span("before"); CHECK(!span.on()); }
  const int64_t start = profile::StartSession();
  CHECK(profile::Active());
  {
    profile::Span span("inside");
    CHECK(span.on());
    span.Add(profile::Stat::Uint("bytes", 4000));
  }
  std::thread([] { profile::Span span("other thread"); }).join();
  profile::Collected c = profile::StopSession(start);
  CHECK(!profile::Active());
  { profile::Span span("after"); CHECK(!span.on()); }
  CHECK(Count(c, "inside") == 1 && Count(c, "other thread") == 1 && Count(c, "before") == 0 && Count(c, "after") == 0);
  const profile::SpanRecord* inside = Find(c, "inside");
  const profile::SpanRecord* other = Find(c, "other thread");
  CHECK(inside && other && inside->thread == profile::CurrentThread() && other->thread != inside->thread);
  CHECK(inside && inside->end_ns >= inside->start_ns && inside->stats.size() == 1 &&
        inside->stats[0].uint_value == 4000);
  CHECK(c.thread_names.count(profile::CurrentThread()) == 1 && c.dropped == 0);
}

void TestOverlappingSessions() {
  const int64_t first = profile::StartSession();
  { profile::Span span("both"); }
  const int64_t second = profile::StartSession();
  { profile::Span span("second only"); }
  profile::Collected a = profile::StopSession(first);
  CHECK(profile::Active());  // the second is still open
  { profile::Span span("late"); }
  profile::Collected b = profile::StopSession(second);
  CHECK(Count(a, "both") == 1 && Count(a, "second only") == 1 && Count(a, "late") == 0);
  CHECK(Count(b, "both") == 0 && Count(b, "second only") == 1 && Count(b, "late") == 1);
  CHECK(!profile::Active());
}

// A collective recorded while a profile is taken: the call, and inside it
// the wait (issue to match) and the data movement (match to end).
void TestRecordedCallsBecomeSpans() {
  FlightRecorder rec(8);
  Signature sig;
  sig.op = CollectiveOp::kAllReduce;
  sig.dtype = myplugin::collectives::DataType::kF32;
  sig.count = 1000;
  sig.sequence = 5;
  rec.End(rec.Begin(sig, {0, 1}), true);  // outside a profile: nothing
  const int64_t start = profile::StartSession();
  const uint64_t id = rec.Begin(sig, {0, 1});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  rec.Matched(id);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  rec.End(id, true);
  const uint64_t barrier = rec.Begin(Signature{}, {}, "unit");
  rec.End(barrier, true);
  profile::Collected c = profile::StopSession(start);
  CHECK(c.spans.size() == 4);
  const profile::SpanRecord* call = Find(c, sig.Operation());
  const profile::SpanRecord* wait = Find(c, "wait for peers");
  const profile::SpanRecord* move = Find(c, "move data");
  const profile::SpanRecord* b = Find(c, "barrier unit");
  CHECK(call && wait && move && b);
  if (!call || !wait || !move || !b) return;
  CHECK(wait->start_ns == call->start_ns && wait->end_ns == move->start_ns && move->end_ns == call->end_ns);
  CHECK(wait->end_ns - wait->start_ns >= 20000000 && move->end_ns - move->start_ns >= 10000000);
  auto stat = [](const profile::SpanRecord& s, const std::string& name) -> const profile::Stat* {
    for (const auto& st : s.stats) {
      if (st.name == name) return &st;
    }
    return nullptr;
  };
  CHECK(stat(*call, "bytes") && stat(*call, "bytes")->uint_value == 1000 * 4);
  CHECK(stat(*call, "call") && stat(*call, "call")->uint_value == 5);
  CHECK(stat(*call, "group") && stat(*call, "group")->text == "[0, 1]");
  CHECK(stat(*b, "group") && stat(*b, "group")->text == "all");
}

}  // namespace

void RunProfileSpansTests() {
  TestInertOutsideSessions();
  TestOverlappingSessions();
  TestRecordedCallsBecomeSpans();
}
