// The service's message handling (service_state.h), in-process: frames in
// through fake connections, frames out as the service would queue them. No
// sockets, no threads.
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "check.h"
#include "coordination/messages.h"
#include "coordination/service_state.h"

namespace {

using namespace myplugin::coordination;
using myplugin::Code;

std::string Payload(const std::string& frame) { return frame.substr(4); }

// A job of fake connections around one ServiceState.
struct FakeJob {
  explicit FakeJob(int n) : state([n] {
    ServiceOptions o;
    o.num_processes = n;
    o.token = "tok";
    o.heartbeat_timeout_s = 60;
    o.initialization_timeout_s = 60;
    return o;
  }()) {}

  myplugin::Status Hello(ConnectionId conn, int pid, const std::string& token = "tok") {
    msg::Hello h;
    h.token = token;
    h.process_id = static_cast<uint32_t>(pid);
    return state.OnHello(conn, "peer" + std::to_string(conn), Payload(h.Encode()), out);
  }
  template <typename M>
  myplugin::Status Send(ConnectionId conn, const M& m) {
    return state.OnFrame(conn, Payload(m.Encode()), out);
  }
  // The frames queued for `conn` since the last call, as payloads.
  std::vector<std::string> Take(ConnectionId conn) {
    std::vector<std::string> mine, rest;
    std::vector<Outbox::Frame> keep;
    for (auto& f : out.frames) {
      if (f.to == conn) {
        mine.push_back(Payload(*f.bytes));
      } else {
        keep.push_back(f);
      }
    }
    out.frames = keep;
    return mine;
  }
  // The one error `conn` got, or an empty message.
  std::string ErrorFor(ConnectionId conn, Code* code = nullptr) {
    for (const std::string& p : Take(conn)) {
      auto e = msg::Error::Decode(p);
      if (e.ok()) {
        if (code) *code = e.value().ToStatus().code();
        return e.value().message;
      }
    }
    return "";
  }
  ServiceState state;
  Outbox out;
};

template <typename M>
M One(const std::vector<std::string>& frames) {
  CHECK(frames.size() == 1);
  if (frames.size() != 1) return M();
  auto m = M::Decode(frames[0]);
  CHECK(m.ok());
  return m.ok() ? m.value() : M();
}

msg::Agree AgreeWithin(uint64_t timeout_ms, uint32_t rid = 5) {
  msg::Agree a;
  a.request_id = rid;
  a.timeout_ms = timeout_ms;
  return a;
}

void TestServiceRegistersAndServesKeyValues() {
  FakeJob job(2);
  CHECK(job.Hello(1, 0).ok());
  CHECK(job.Hello(2, 1).ok());
  CHECK(One<msg::HelloOk>(job.Take(1)).num_processes == 2);
  job.Take(2);
  msg::Register r;
  r.num_processes = 2;
  r.topology = "zero";
  r.request_id = 1;
  CHECK(job.Send(1, r).ok());
  CHECK(job.Take(1).empty());  // waits for the other
  r.topology = "one";
  CHECK(job.Send(2, r).ok());
  auto topo = One<msg::Topology>(job.Take(1));
  CHECK(topo.processes.size() == 2 && topo.processes[0].topology == "zero" && topo.processes[1].topology == "one");
  CHECK(One<msg::Topology>(job.Take(2)).processes.size() == 2);

  // A blocking get is answered by the set that comes later.
  msg::KeyValueGet get;
  get.request_id = 7;
  get.key = "k";
  get.timeout_ms = 60000;
  CHECK(job.Send(2, get).ok());
  CHECK(job.Take(2).empty());
  msg::KeyValueSet set;
  set.request_id = 8;
  set.key = "k";
  set.value = "v";
  CHECK(job.Send(1, set).ok());
  CHECK(One<msg::Ok>(job.Take(1)).request_id == 8);
  auto value = One<msg::Value>(job.Take(2));
  CHECK(value.request_id == 7 && value.value == "v");
  CHECK(job.state.store_bytes() == 2);
  msg::KeyValueList list;
  list.prefix = "";
  CHECK(job.Send(2, list).ok());
  CHECK(One<msg::Entries>(job.Take(2)).entries.size() == 1);
  msg::KeyValueDelete del;
  del.key = "k";
  CHECK(job.Send(2, del).ok());
  CHECK(job.state.store_bytes() == 0);
  CHECK(job.state.CheckInvariants().empty());
}

// Insert-if-absent and increment are each one request, handled in turn:
// of two inserts of one key exactly one succeeds, and increments add up.
void TestKeyValueInsertAndIncrement() {
  FakeJob job(2);
  CHECK(job.Hello(1, 0).ok());
  CHECK(job.Hello(2, 1).ok());
  job.Take(1);
  job.Take(2);
  msg::KeyValueGet get;
  get.request_id = 3;
  get.key = "k";
  get.timeout_ms = 60000;
  CHECK(job.Send(2, get).ok());
  msg::KeyValueInsert insert;
  insert.request_id = 4;
  insert.key = "k";
  insert.value = "first";
  CHECK(job.Send(1, insert).ok());
  CHECK(One<msg::Ok>(job.Take(1)).request_id == 4);
  CHECK(One<msg::Value>(job.Take(2)).value == "first");  // the waiting get is answered
  insert.value = "second";
  CHECK(job.Send(2, insert).ok());
  Code code = Code::kOk;
  CHECK(job.ErrorFor(2, &code).find("key \"k\" already exists") != std::string::npos && code == Code::kAlreadyExists);
  msg::KeyValueTryGet tg;
  tg.key = "k";
  CHECK(job.Send(1, tg).ok());
  CHECK(One<msg::Value>(job.Take(1)).value == "first");

  msg::KeyValueIncrement inc;
  inc.key = "n";
  inc.increment = 5;
  CHECK(job.Send(1, inc).ok());
  CHECK(One<msg::Value>(job.Take(1)).value == "5");  // absent counts as 0
  inc.increment = -7;
  CHECK(job.Send(2, inc).ok());
  CHECK(One<msg::Value>(job.Take(2)).value == "-2");
  inc.key = "k";  // "first" is not a number
  CHECK(job.Send(1, inc).ok());
  CHECK(job.ErrorFor(1, &code).find("not a decimal integer") != std::string::npos &&
        code == Code::kFailedPrecondition);
  msg::KeyValueSet set;
  set.key = "big";
  set.value = "9223372036854775807";
  CHECK(job.Send(1, set).ok());
  job.Take(1);
  inc.key = "big";
  inc.increment = 1;
  CHECK(job.Send(1, inc).ok());
  CHECK(job.ErrorFor(1, &code).find("overflows") != std::string::npos && code == Code::kOutOfRange);
  inc.increment = -1;
  CHECK(job.Send(1, inc).ok());
  CHECK(One<msg::Value>(job.Take(1)).value == "9223372036854775806");
  CHECK(job.state.CheckInvariants().empty());
}

void TestServiceRefusesStrangers() {
  FakeJob job(2);
  CHECK(job.Hello(1, 0, "wrong").code() == Code::kUnauthenticated);
  CHECK(job.ErrorFor(1).find("wrong coordination token") != std::string::npos);
  CHECK(job.state.ProcessOf(1) == -1);
  // A connection that never said Hello gets nothing done.
  msg::KeyValueSet set;
  set.key = "k";
  CHECK(!job.Send(3, set).ok());
  CHECK(job.state.store_bytes() == 0);
  CHECK(job.Hello(4, 9).code() == Code::kInvalidArgument);
  CHECK(job.Hello(5, 1).ok());
  CHECK(job.Hello(6, 1).code() == Code::kAlreadyExists);
  CHECK(job.state.CheckInvariants().empty());
  CHECK(!job.state.failure());
}

void TestKeyValueLimits() {
  FakeJob job(1);
  CHECK(job.Hello(1, 0).ok());
  job.Take(1);
  msg::KeyValueSet set;
  set.key = "k";
  set.value = std::string(kMaxValueBytes + 1, 'x');
  CHECK(job.Send(1, set).ok());  // an error reply, not a broken connection
  Code code = Code::kOk;
  std::string err = job.ErrorFor(1, &code);
  CHECK(code == Code::kResourceExhausted);
  CHECK(err.find("key_value_set of \"k\": value of 32 MiB exceeds the 32 MiB limit") != std::string::npos);
  set.key = std::string(kMaxKeyBytes + 1, 'k');
  set.value = "v";
  CHECK(job.Send(1, set).ok());
  CHECK(job.ErrorFor(1).find("key of 4.001 KiB exceeds the 4 KiB limit") != std::string::npos);

  // The store's total: values at the limit until it is full.
  set.value = std::string(kMaxValueBytes, 'v');
  size_t stored = 0;
  for (int i = 0; i < 9; ++i) {
    set.key = "big/" + std::to_string(i);
    CHECK(job.Send(1, set).ok());
    auto frames = job.Take(1);
    CHECK(frames.size() == 1);
    if (frames.size() == 1 && msg::Ok::Decode(frames[0]).ok()) {
      ++stored;
    } else if (frames.size() == 1) {
      auto e = msg::Error::Decode(frames[0]);
      CHECK(e.ok() && e.value().message.find("over its 256 MiB limit") != std::string::npos);
    }
  }
  CHECK(stored == kMaxStoreBytes / (kMaxValueBytes + 8) && stored < 9);
  CHECK(job.state.store_bytes() <= kMaxStoreBytes);
  // Overwriting a key frees its old value first.
  set.key = "big/0";
  CHECK(job.Send(1, set).ok());
  CHECK(msg::Ok::Decode(job.Take(1).at(0)).ok());

  // A list reply over the frame limit is refused, naming prefix and size.
  msg::KeyValueList list;
  list.prefix = "big/";
  CHECK(job.Send(1, list).ok());
  std::string listed = job.ErrorFor(1, &code);
  CHECK(code == Code::kResourceExhausted);
  CHECK(listed.find("key_value_list of prefix \"big/\": the reply of 224 MiB exceeds the 64 MiB message limit") !=
        std::string::npos);
  list.prefix = "big/1";
  CHECK(job.Send(1, list).ok());
  CHECK(One<msg::Entries>(job.Take(1)).entries.size() == 1);
  CHECK(job.state.CheckInvariants().empty());
  CHECK(!job.state.failure());
}

void TestStoppedReaderIsDeclaredFailed() {
  FakeJob job(3);
  for (int p = 0; p < 3; ++p) CHECK(job.Hello(10 + p, p).ok());
  job.out.frames.clear();
  msg::Barrier b;
  b.name = "sync";
  b.timeout_ms = 60000;
  CHECK(job.Send(10, b).ok());
  job.state.OnStoppedReading(12, "16777237 bytes queued, no progress for 2 s", job.out);
  auto f = job.state.failure();
  CHECK(f && f->message() ==
                 "process 2 failed: stopped reading from the coordination service (16777237 bytes queued, no "
                 "progress for 2 s)");
  CHECK(job.state.failed_process() == 2);
  // The others hear of it; the barrier waiter is released with the reason;
  // the stopped member gets nothing more.
  std::vector<std::string> to0 = job.Take(10);
  bool told = false, released = false;
  for (const auto& p : to0) {
    told |= msg::Failure::Decode(p).ok() && msg::Failure::Decode(p).value().process_id == 2;
    auto e = msg::Error::Decode(p);
    released |= e.ok() && e.value().message.find("barrier 'sync' was interrupted") != std::string::npos;
  }
  CHECK(told && released);
  CHECK(job.Take(12).empty());
  CHECK(job.state.ProcessOf(12) == -1);
  // Its connection closing afterwards changes nothing.
  job.state.OnDisconnect(12, myplugin::Status(Code::kUnavailable, "closed"), job.out);
  CHECK(job.state.failed_process() == 2);
  CHECK(job.state.CheckInvariants().empty());
}

void TestSilentProcessReasonSaysWhatTheLinkSaid() {
  // The network shell's link describer (service.cc: tcp_links.h on the
  // member's socket) is asked about the silent process's connection, and
  // its clause ends the reason everyone hears; an empty one adds nothing.
  for (const std::string& clause : {std::string("the link to 10.0.0.1 (process 0) loses what the coordinator sends"),
                                   std::string()}) {
    FakeJob job(2);
    ConnectionId asked_conn = 0;
    int asked_process = -1;
    job.state.set_link_describer([&](ConnectionId conn, int process) {
      asked_conn = conn;
      asked_process = process;
      return clause;
    });
    for (int p = 0; p < 2; ++p) CHECK(job.Hello(10 + p, p).ok());
    job.state.Tick(ServiceState::Clock::now() + std::chrono::seconds(61), job.out);
    auto f = job.state.failure();
    const std::string want = "process 0 failed: stopped responding: no heartbeat for 60 s (the process is frozen, "
                             "stopped or overloaded)" + (clause.empty() ? "" : "; " + clause);
    CHECK(f && f->message() == want);
    CHECK(asked_conn == 10 && asked_process == 0);
  }
}

void TestFailureNamesWhomTheReporterBlames() {
  // Process 2 gives up waiting for process 1, which left: the others' notice
  // and the job's failure name process 1 (ids outside the job are dropped).
  FakeJob job(3);
  for (int p = 0; p < 3; ++p) CHECK(job.Hello(10 + p, p).ok());
  job.out.frames.clear();
  msg::ReportError report;
  report.reason = "process 2 waits for process 1, which finished";
  report.blamed = {1, 7, 1};
  CHECK(job.Send(12, report).ok());
  CHECK(job.state.failed_process() == 2);
  CHECK(job.state.failure()->failure()->processes == std::vector<int>{1});
  bool told = false;
  for (const std::string& p : job.Take(10)) {
    auto f = msg::Failure::Decode(p);
    told |= f.ok() && f.value().process_id == 2 && f.value().blamed == std::vector<uint32_t>{1};
  }
  CHECK(told);
  // Without a list the failed process is the one at fault.
  FakeJob plain(2);
  for (int p = 0; p < 2; ++p) CHECK(plain.Hello(10 + p, p).ok());
  msg::ReportError own;
  own.reason = "boom";
  CHECK(plain.Send(11, own).ok());
  CHECK(plain.state.failure()->failure()->processes == std::vector<int>{1});
  CHECK(job.state.CheckInvariants().empty() && plain.state.CheckInvariants().empty());
}

void TestWaitingIsBounded() {
  // Job-wide: enough processes, each under its own cap, to reach it.
  const int n = static_cast<int>(kMaxWaiting / kMaxWaitingPerProcess) + 1;
  FakeJob job(n);
  msg::KeyValueGet get;
  get.timeout_ms = 60000;
  size_t sent = 0;
  for (int pid = 0; pid < n && sent <= kMaxWaiting; ++pid) {
    const ConnectionId conn = static_cast<ConnectionId>(pid + 1);
    CHECK(job.Hello(conn, pid).ok());
    job.Take(conn);
    for (size_t i = 0; i < kMaxWaitingPerProcess && sent <= kMaxWaiting; ++i, ++sent) {
      get.request_id = static_cast<uint32_t>(sent);
      get.key = "never/" + std::to_string(sent);
      CHECK(job.Send(conn, get).ok());
    }
  }
  // The last get sent (by process n-1, well under its own cap) was one too many.
  Code code = Code::kOk;
  std::string err = job.ErrorFor(static_cast<ConnectionId>(n), &code);
  CHECK(code == Code::kResourceExhausted && err.find("16384 blocking gets and barriers are already waiting (the limit)") !=
                                                std::string::npos);
  for (int pid = 0; pid + 1 < n; ++pid) CHECK(job.ErrorFor(static_cast<ConnectionId>(pid + 1)).empty());
  CHECK(job.state.CheckInvariants().empty());
}

void TestBigJobWaitsInFourCallsEach() {
  // Past 4,096 processes the job-wide limit is 4 per process: every
  // process of a 5,000-process job may wait in 4 gets, the next is refused.
  const int n = 5000;
  CHECK(MaxWaitingFor(n) == 20000 && MaxWaitingFor(64) == kMaxWaiting);
  FakeJob job(n);
  msg::KeyValueGet get;
  get.timeout_ms = 60000;
  for (int pid = 0; pid < n; ++pid) {
    const ConnectionId conn = static_cast<ConnectionId>(pid + 1);
    CHECK(job.Hello(conn, pid).ok());
    for (int i = 0; i < 4; ++i) {
      get.request_id = static_cast<uint32_t>(i);
      get.key = "never/" + std::to_string(pid) + "/" + std::to_string(i);
      CHECK(job.Send(conn, get).ok());
    }
  }
  size_t errors = 0;
  for (const auto& f : job.out.frames) errors += msg::Error::Decode(Payload(*f.bytes)).ok();
  CHECK(errors == 0);
  job.out.frames.clear();
  get.key = "never/one-more";
  CHECK(job.Send(1, get).ok());
  CHECK(job.ErrorFor(1).find("20000 blocking gets and barriers are already waiting (the limit)") != std::string::npos);
  CHECK(job.state.CheckInvariants().empty());
}

void TestWaitingIsBoundedPerProcess() {
  FakeJob job(2);
  CHECK(job.Hello(1, 0).ok());
  CHECK(job.Hello(2, 1).ok());
  job.Take(1);
  job.Take(2);
  msg::KeyValueGet get;
  get.timeout_ms = 1000;
  for (size_t i = 0; i < kMaxWaitingPerProcess; ++i) {
    get.request_id = static_cast<uint32_t>(i);
    get.key = "k/" + std::to_string(i);
    CHECK(job.Send(1, get).ok());
  }
  CHECK(job.Take(1).empty());  // all waiting, none refused
  // One more get, or a barrier, from the same process: refused, naming the limit.
  const std::string limit = "process 0 already has 256 blocking gets and barriers waiting (the per-process limit)";
  get.request_id = 1000;
  get.key = "k/one-more";
  CHECK(job.Send(1, get).ok());
  Code code = Code::kOk;
  std::string err = job.ErrorFor(1, &code);
  CHECK(code == Code::kResourceExhausted);
  CHECK(err == "key_value_get of \"k/one-more\": " + limit);
  msg::Barrier b;
  b.request_id = 1001;
  b.name = "sync";
  b.timeout_ms = 60000;
  CHECK(job.Send(1, b).ok());
  code = Code::kOk;
  CHECK(job.ErrorFor(1, &code) == "barrier \"sync\": " + limit && code == Code::kResourceExhausted);
  // The other process still waits as before.
  get.request_id = 7;
  get.key = "k/other";
  CHECK(job.Send(2, get).ok());
  CHECK(job.Take(2).empty());
  CHECK(job.state.CheckInvariants().empty());
  // An answered get frees its place: process 0 can wait again, once.
  msg::KeyValueSet set;
  set.request_id = 8;
  set.key = "k/0";
  set.value = "v";
  CHECK(job.Send(2, set).ok());
  CHECK(One<msg::Value>(job.Take(1)).value == "v");
  job.Take(2);
  get.request_id = 1002;
  get.key = "k/again";
  CHECK(job.Send(1, get).ok());
  CHECK(job.Take(1).empty());
  get.request_id = 1003;
  CHECK(job.Send(1, get).ok());
  CHECK(!job.ErrorFor(1).empty());
  // Expired gets free theirs too (2 s: past the gets' 1 s, inside the heartbeat timeout).
  job.state.Tick(ServiceState::Clock::now() + std::chrono::seconds(2), job.out);
  CHECK(job.state.failure() == std::nullopt);
  job.out.frames.clear();
  CHECK(job.state.CheckInvariants().empty());
  get.request_id = 1004;
  CHECK(job.Send(1, get).ok());
  CHECK(job.Take(1).empty());
  CHECK(job.state.CheckInvariants().empty());
}

// Every process of a FakeJob says Hello and registers (connection 10 + pid).
void RegisterAll(FakeJob& job, int n) {
  for (int p = 0; p < n; ++p) CHECK(job.Hello(10 + p, p).ok());
  msg::Register r;
  r.num_processes = static_cast<uint32_t>(n);
  for (int p = 0; p < n; ++p) {
    r.topology = "t" + std::to_string(p);
    CHECK(job.Send(10 + p, r).ok());
  }
  job.out.frames.clear();
}

// The one Membership among the frames `conn` got (others: the failure notice).
msg::Membership VerdictFor(FakeJob& job, ConnectionId conn) {
  msg::Membership found;
  int n = 0;
  for (const std::string& p : job.Take(conn)) {
    auto m = msg::Membership::Decode(p);
    if (m.ok()) {
      found = m.value();
      ++n;
    }
  }
  CHECK(n == 1);
  return found;
}

// Process `pid` comes back on connection `conn` (the launcher started it
// again) and registers; what it was sent so far is dropped.
void ComeBack(FakeJob& job, ConnectionId conn, int pid, uint32_t request_id = 3) {
  CHECK(job.Hello(conn, pid).ok());
  CHECK(job.Take(conn).size() == 1);  // its HelloOk
  msg::Register r;
  r.num_processes = static_cast<uint32_t>(job.state.options().num_processes);
  r.topology = "t" + std::to_string(pid) + " again";
  r.request_id = request_id;
  CHECK(job.Send(conn, r).ok());
}

// Each of `conns` asks for the agreement.
void AllAsk(FakeJob& job, std::initializer_list<ConnectionId> conns) {
  for (ConnectionId c : conns) CHECK(job.Send(c, AgreeWithin(60000)).ok());
}

std::vector<uint32_t> Ids(const msg::Membership& m) {
  std::vector<uint32_t> ids;
  for (const Member& member : m.members) ids.push_back(member.process_id);
  return ids;
}

void TestBarrierOfABigJobAfterAnAgreement() {
  // Arrivals are counted, not looked up: a barrier of every member of a
  // big job completes at its last arrival and not before, also after an
  // agreement changed who the members are.
  const int n = 3000;
  FakeJob job(n);
  RegisterAll(job, n);
  msg::Barrier b;
  b.name = "all";
  b.timeout_ms = 60000;
  for (int p = 0; p + 1 < n; ++p) CHECK(job.Send(10 + p, b).ok());
  CHECK(job.out.frames.empty());
  CHECK(job.Send(10 + n - 1, b).ok());
  CHECK(job.out.frames.size() == static_cast<size_t>(n));
  for (const auto& f : job.out.frames) CHECK(msg::Ok::Decode(Payload(*f.bytes)).ok());
  job.out.frames.clear();
  // Process n-1 fails; the others agree on a membership without it.
  job.state.OnDisconnect(10 + n - 1, myplugin::Status(Code::kUnavailable, "gone"), job.out);
  for (int p = 0; p + 1 < n; ++p) CHECK(job.Send(10 + p, AgreeWithin(60000)).ok());
  CHECK(job.state.live().size() == static_cast<size_t>(n - 1));
  job.out.frames.clear();
  b.name = "survivors";
  for (int p = 0; p + 2 < n; ++p) CHECK(job.Send(10 + p, b).ok());
  CHECK(job.out.frames.empty());
  CHECK(job.Send(10 + n - 2, b).ok());
  CHECK(job.out.frames.size() == static_cast<size_t>(n - 1));
  CHECK(job.state.CheckInvariants().empty());
}

void TestSurvivorsAgreeOnOneVerdict() {
  FakeJob job(4);
  RegisterAll(job, 4);
  // A pending barrier and a later key-value call both fail, naming process 2.
  msg::Barrier b;
  b.name = "step";
  b.timeout_ms = 60000;
  CHECK(job.Send(10, b).ok());
  job.state.OnDisconnect(12, myplugin::Status(Code::kUnavailable, "reset"), job.out);
  CHECK(job.ErrorFor(10).find("process 2 failed") != std::string::npos);
  msg::KeyValueSet set;
  set.key = "k";
  CHECK(job.Send(11, set).ok());
  Code code = Code::kOk;
  CHECK(job.ErrorFor(11, &code).find("process 2 failed") != std::string::npos && code == Code::kAborted);
  job.out.frames.clear();
  // The survivors ask; nobody hears anything until the last one asks.
  CHECK(job.Send(10, AgreeWithin(60000)).ok());
  CHECK(job.Send(13, AgreeWithin(60000)).ok());
  CHECK(job.Take(10).empty() && job.Take(13).empty());
  CHECK(job.Send(11, AgreeWithin(60000)).ok());
  msg::Membership v0 = VerdictFor(job, 10), v1 = VerdictFor(job, 11), v3 = VerdictFor(job, 13);
  CHECK(Ids(v0) == (std::vector<uint32_t>{0, 1, 3}) && v0.epoch == 1);
  CHECK(v1.Encode() == v0.Encode() && v3.epoch == v0.epoch && Ids(v3) == Ids(v0));
  CHECK(v0.members[2].topology == "t3");
  CHECK(!job.state.failure() && job.state.epoch() == 1);
  // The job goes on with three: a barrier of the three completes.
  for (ConnectionId c : {10, 11, 13}) CHECK(job.Send(c, b).ok());
  for (ConnectionId c : {10, 11, 13}) CHECK(One<msg::Ok>(job.Take(c)).request_id == 0);
  // Asking again with nobody changed keeps the epoch.
  AllAsk(job, {10, 11, 13});
  CHECK(VerdictFor(job, 13).epoch == 1);
  job.out.frames.clear();
  CHECK(job.state.CheckInvariants().empty());
}

void TestRestartedProcessRejoinsAtNextAgreement() {
  FakeJob job(3);
  RegisterAll(job, 3);
  job.state.OnDisconnect(11, myplugin::Status(Code::kUnavailable, "reset"), job.out);
  // Back before the survivors agreed: it says Hello on a new connection
  // and its registration waits for the agreement, which lets it in.
  ComeBack(job, 21, 1);
  job.out.frames.clear();
  CHECK(job.Send(10, AgreeWithin(60000)).ok());
  CHECK(job.Send(12, AgreeWithin(60000)).ok());
  msg::Membership joined = VerdictFor(job, 21);
  CHECK(joined.request_id == 3 && Ids(joined) == (std::vector<uint32_t>{0, 1, 2}) && joined.epoch == 1);
  CHECK(joined.members[1].topology == "t1 again");
  // Everyone hears the restarted process's new incarnation (id 1's second
  // process in a job of 3: 2 + 3), the others' as they were (id + 1).
  CHECK(joined.members[1].incarnation == 5 && joined.members[0].incarnation == 1 &&
        joined.members[2].incarnation == 3);
  msg::Membership v0 = VerdictFor(job, 10), v2 = VerdictFor(job, 12);
  CHECK(v0.epoch == joined.epoch && Ids(v0) == Ids(joined) && v2.Encode() == v0.Encode());
  // Failing again after the survivors agreed without it: it is let in at
  // the agreement after it registers, and the epoch moves on each time.
  job.state.OnDisconnect(21, myplugin::Status(Code::kUnavailable, "reset"), job.out);
  AllAsk(job, {10, 12});
  CHECK(Ids(VerdictFor(job, 10)) == (std::vector<uint32_t>{0, 2}) && job.state.epoch() == 2);
  ComeBack(job, 31, 1);
  CHECK(job.Take(31).empty());  // no failure now: it waits for the members' next agreement
  AllAsk(job, {10, 12});
  CHECK(Ids(VerdictFor(job, 31)) == (std::vector<uint32_t>{0, 1, 2}) && job.state.epoch() == 3);
  job.out.frames.clear();
  CHECK(job.state.CheckInvariants().empty());
}

void TestAgreementWaitsForAnExpectedRestart() {
  FakeJob job(3);
  RegisterAll(job, 3);
  job.state.OnDisconnect(12, myplugin::Status(Code::kUnavailable, "reset"), job.out);
  job.state.ExpectRejoin(2, true, job.out);  // the launcher started it again
  job.out.frames.clear();
  AllAsk(job, {10, 11});
  CHECK(job.Take(10).empty() && job.state.epoch() == 0);  // waiting for it
  ComeBack(job, 22, 2);  // its registration completes the agreement
  CHECK(Ids(VerdictFor(job, 22)) == (std::vector<uint32_t>{0, 1, 2}) && job.state.epoch() == 1);
  CHECK(Ids(VerdictFor(job, 11)) == (std::vector<uint32_t>{0, 1, 2}));
  CHECK(VerdictFor(job, 10).epoch == 1);
  // A restart that dies before it registers is no longer waited for.
  job.state.OnDisconnect(22, myplugin::Status(Code::kUnavailable, "reset"), job.out);
  job.state.ExpectRejoin(2, true, job.out);
  AllAsk(job, {10, 11});
  CHECK(job.state.epoch() == 1);
  job.state.ExpectRejoin(2, false, job.out);
  CHECK(Ids(VerdictFor(job, 10)) == (std::vector<uint32_t>{0, 1}) && job.state.epoch() == 2);
  job.out.frames.clear();
  CHECK(job.state.CheckInvariants().empty());
}

void TestEndedProcessFreesItsIdAtOnce() {
  FakeJob job(3);
  RegisterAll(job, 3);
  // While process 1 lives, its id is refused to anyone else.
  Code code = Code::kOk;
  CHECK(job.Hello(30, 1).code() == Code::kAlreadyExists);
  CHECK(job.ErrorFor(30, &code).find("process id 1 is already taken") != std::string::npos);
  // The launcher reaped it while the service still has its connection open
  // (a child holds the socket): it is failed and that connection let go.
  CHECK(job.state.failures_per_process() == (std::vector<uint64_t>{0, 0, 0}));
  CHECK(job.state.OnProcessEnded(1, "(killed by SIGKILL)", job.out) == 11);
  CHECK(job.state.failure() && job.state.failure()->message() ==
                                   "process 1 failed: its process ended (killed by SIGKILL)");
  CHECK(job.state.failures_per_process() == (std::vector<uint64_t>{0, 1, 0}));
  CHECK(job.state.ProcessOf(11) == -1 && job.state.recoverable());
  bool told = false;
  for (const std::string& p : job.Take(10)) told |= msg::Failure::Decode(p).ok();
  CHECK(told);
  // Its new process claims the id at once and is let in at the agreement.
  ComeBack(job, 21, 1);
  job.out.frames.clear();
  AllAsk(job, {10, 12});
  msg::Membership joined = VerdictFor(job, 21);
  CHECK(Ids(joined) == (std::vector<uint32_t>{0, 1, 2}) && joined.epoch == 1);
  CHECK(Ids(VerdictFor(job, 10)) == Ids(joined));
  // The old connection's late close and frames change nothing.
  CHECK(!job.state.OnFrame(11, Payload(msg::Heartbeat().Encode()), job.out).ok());
  job.state.OnDisconnect(11, myplugin::Status(Code::kUnavailable, "reset"), job.out);
  CHECK(!job.state.failure() && job.state.epoch() == 1 && job.state.live().size() == 3);
  // A process that reported its own error stays connected and failed: its
  // id is refused until the launcher says it ended.
  msg::ReportError report;
  report.reason = "boom";
  CHECK(job.Send(12, report).ok());
  job.out.frames.clear();
  // Failed while its process runs: the launcher learns it from the count.
  CHECK(job.state.failures_per_process() == (std::vector<uint64_t>{0, 1, 1}));
  CHECK(job.Hello(32, 2).code() == Code::kAlreadyExists);
  job.out.frames.clear();
  CHECK(job.state.OnProcessEnded(2, "with exit code 1", job.out) == 12);
  CHECK(job.state.failure()->message() == "process 2 failed: boom");  // the first reason stays
  CHECK(job.state.failures_per_process() == (std::vector<uint64_t>{0, 1, 1}));  // one failure, not two
  CHECK(job.Hello(32, 2).ok());
  // Ids out of range and processes never seen are no-ops.
  CHECK(job.state.OnProcessEnded(7, "x", job.out) == 0 && job.state.OnProcessEnded(-1, "x", job.out) == 0);
  job.out.frames.clear();
  CHECK(job.state.CheckInvariants().empty());
}

void TestDepartedProcessEndingIsNoFailure() {
  FakeJob job(2);
  RegisterAll(job, 2);
  msg::Shutdown sd;
  sd.timeout_ms = 60000;
  CHECK(job.Send(10, sd).ok());
  CHECK(job.Send(11, sd).ok());
  job.out.frames.clear();
  CHECK(job.state.all_departed());
  CHECK(job.state.OnProcessEnded(0, "with exit code 0", job.out) == 10);
  CHECK(!job.state.failure());
  CHECK(job.state.CheckInvariants().empty());
}

void TestRestartAfterTheJobFinishedHearsSoAtOnce() {
  FakeJob job(3);
  RegisterAll(job, 3);
  CHECK(job.state.OnProcessEnded(2, "(killed by SIGKILL)", job.out) == 12);
  AllAsk(job, {10, 11});
  CHECK(Ids(VerdictFor(job, 10)) == (std::vector<uint32_t>{0, 1}));
  msg::Shutdown sd;
  sd.timeout_ms = 60000;
  CHECK(job.Send(10, sd).ok());
  CHECK(job.Send(11, sd).ok());
  job.out.frames.clear();
  // Its new process comes only now: its registration is refused at once,
  // not left waiting for an agreement that nobody will ask for.
  CHECK(job.Hello(22, 2).ok());
  job.Take(22);
  msg::Register r;
  r.num_processes = 3;
  r.request_id = 4;
  CHECK(job.Send(22, r).ok());
  CHECK(job.ErrorFor(22).find("the job finished before this process could rejoin it") != std::string::npos);
  CHECK(job.state.CheckInvariants().empty());
}

void TestAgreementErrorReachesEveryone() {
  FakeJob job(3);
  RegisterAll(job, 3);
  job.state.OnDisconnect(12, myplugin::Status(Code::kUnavailable, "reset"), job.out);
  job.out.frames.clear();
  // Process 1 never asks: when the time is up, the one that asked gets an
  // error naming it, and process 1 hears that the job failed.
  CHECK(job.Send(10, AgreeWithin(100)).ok());
  job.state.Tick(std::chrono::steady_clock::now() + std::chrono::seconds(1), job.out);
  Code code = Code::kOk;
  const std::string why = job.ErrorFor(10, &code);
  CHECK(code == Code::kDeadlineExceeded && why.find("processes [1] did not ask for it") != std::string::npos);
  bool told = false;
  for (const std::string& p : job.Take(11)) told |= msg::Failure::Decode(p).ok();
  CHECK(told);
  // Asking later gets an error too, never a verdict.
  CHECK(job.Send(11, AgreeWithin(60000)).ok());
  CHECK(job.ErrorFor(11).find("the job cannot recover") != std::string::npos);
  CHECK(!job.state.recoverable());
  CHECK(job.state.CheckInvariants().empty());
}

void TestNoAgreementBeforeRegistration() {
  FakeJob job(2);
  CHECK(job.Hello(10, 0).ok());
  job.out.frames.clear();
  CHECK(job.Send(10, AgreeWithin(60000)).ok());
  CHECK(job.ErrorFor(10).find("before every process registered") != std::string::npos);
}

}  // namespace

void RunServiceStateTests() {
  TestServiceRegistersAndServesKeyValues();
  TestKeyValueInsertAndIncrement();
  TestServiceRefusesStrangers();
  TestKeyValueLimits();
  TestStoppedReaderIsDeclaredFailed();
  TestSilentProcessReasonSaysWhatTheLinkSaid();
  TestFailureNamesWhomTheReporterBlames();
  TestWaitingIsBounded();
  TestWaitingIsBoundedPerProcess();
  TestBigJobWaitsInFourCallsEach();
  TestBarrierOfABigJobAfterAnAgreement();
  TestSurvivorsAgreeOnOneVerdict();
  TestRestartedProcessRejoinsAtNextAgreement();
  TestAgreementWaitsForAnExpectedRestart();
  TestEndedProcessFreesItsIdAtOnce();
  TestDepartedProcessEndingIsNoFailure();
  TestRestartAfterTheJobFinishedHearsSoAtOnce();
  TestAgreementErrorReachesEveryone();
  TestNoAgreementBeforeRegistration();
}
