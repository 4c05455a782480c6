// The coordination codec (messages.h): every message round-trips, byte for
// byte, and the decoders refuse malformed input with an error.
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "coordination/messages.h"
#include "coordination/process_info.h"

namespace {

using namespace myplugin::coordination;
using myplugin::Code;
using myplugin::FailureDetail;
using myplugin::FailureKind;

std::string Payload(const std::string& frame) { return frame.substr(4); }

template <typename M>
M RoundTrip(const M& m) {
  std::string frame = m.Encode();
  auto back = M::Decode(Payload(frame));
  CHECK(back.ok());
  // Canonical: decoding then encoding gives the same bytes.
  CHECK(back.ok() && back.value().Encode() == frame);
  auto any = msg::DecodeAndEncodeAny(Payload(frame));
  CHECK(any.ok() && any.value() == frame);
  return back.ok() ? back.value() : M();
}

void TestEveryMessageRoundTrips() {
  msg::Hello h;
  h.request_id = 9;
  h.token = std::string("t\0k", 3);
  h.process_id = 3;
  auto h2 = RoundTrip(h);
  CHECK(h2.request_id == 9 && h2.token == h.token && h2.process_id == 3 &&
        h2.magic == kMagic && h2.version == kProtocolVersion);

  msg::HelloOk ok;
  ok.num_processes = 4;
  ok.heartbeat_interval_ms = 100;
  ok.heartbeat_timeout_ms = 1000;
  auto ok2 = RoundTrip(ok);
  CHECK(ok2.num_processes == 4 && ok2.heartbeat_interval_ms == 100 && ok2.heartbeat_timeout_ms == 1000);

  auto e = RoundTrip(msg::Error::From(5, myplugin::Status(Code::kNotFound, "gone")));
  CHECK(e.request_id == 5 && e.ToStatus().code() == Code::kNotFound && e.ToStatus().message() == "gone");
  CHECK(e.ToStatus().failure() == nullptr);
  // A failure's fields cross the wire with it (a barrier that timed out names who did not arrive).
  auto timed_out = RoundTrip(msg::Error::From(
      6, myplugin::Status(Code::kDeadlineExceeded, "late").WithFailure({FailureKind::kTimeout, {2, 5}, "barrier 'b'", 3})));
  const myplugin::Status received = timed_out.ToStatus();
  const FailureDetail* detail = received.failure();
  CHECK(detail != nullptr && detail->kind == FailureKind::kTimeout && detail->processes == std::vector<int>({2, 5}) &&
        detail->collective == "barrier 'b'" && detail->call == 3 && received.message() == "late");
  msg::Error unknown_kind = timed_out;
  unknown_kind.kind = 99;  // a kind this build does not know: no failure, the error itself kept
  CHECK(unknown_kind.ToStatus().failure() == nullptr && unknown_kind.ToStatus().code() == Code::kDeadlineExceeded);
  msg::Error odd;
  odd.code = 0;  // an "error" that claims OK must not read as success
  CHECK(!odd.ToStatus().ok());
  odd.code = 999;
  CHECK(odd.ToStatus().code() == Code::kUnknown);

  msg::Membership verdict;
  verdict.epoch = 3;
  verdict.members = {{0, 7, "a"}, {2, 9, std::string("b\0", 2)}};
  auto verdict2 = RoundTrip(verdict);
  CHECK(verdict2.epoch == 3 && verdict2.members.size() == 2 && verdict2.members[1].process_id == 2 &&
        verdict2.members[1].incarnation == 9 && verdict2.members[0].incarnation == 7 &&
        verdict2.members[1].topology == verdict.members[1].topology);
  // Members that registered a ProcessInfo travel as table entries.
  ProcessInfo host;
  host.hostname = "node-1";
  host.num_devices = 2;
  host.pid = 77;
  msg::Membership table;
  table.members = {{3, 1, EncodeProcessInfo(host)}, {9, ~0ULL, "raw"}};
  host.pid = 78;
  table.members.push_back({1u << 31, 2, EncodeProcessInfo(host)});
  auto table2 = RoundTrip(table);
  CHECK(table2.members.size() == 3 && table2.members[2].process_id == 1u << 31 &&
        table2.members[2].topology == table.members[2].topology && table2.members[1].incarnation == ~0ULL);
  msg::Agree agree;
  agree.request_id = 5;
  agree.timeout_ms = 1234;
  CHECK(RoundTrip(agree).timeout_ms == 1234);

  msg::Register reg;
  reg.num_processes = 2;
  reg.topology = "topo";
  auto reg2 = RoundTrip(reg);
  CHECK(reg2.num_processes == 2 && reg2.topology == "topo");

  msg::Topology t;
  t.processes = {{1, "a"}, {2, ""}, {3, std::string(1000, 'x')}};
  auto t2 = RoundTrip(t);
  CHECK(t2.processes.size() == 3 && t2.processes[2].topology.size() == 1000 && t2.processes[1].incarnation == 2);
  // Incarnations travel as differences from the entry before: the
  // service's (id + 1, consecutive) cost a byte each, down or up, and any
  // 64-bit values still travel.
  msg::Topology counted, random;
  for (uint64_t i = 0; i < 300; ++i) counted.processes.push_back({i + 1, "a"});
  counted.processes[150].incarnation += 300;  // a restarted process of a job of 300
  for (uint64_t i = 0; i < 300; ++i) random.processes.push_back({0xfedcba9876543210ULL * (i + 1), "a"});
  auto counted2 = RoundTrip(counted), random2 = RoundTrip(random);
  CHECK(counted2.processes.size() == 300 && counted2.processes[150].incarnation == 451 &&
        counted2.processes[151].incarnation == 152 && counted2.processes[299].incarnation == 300);
  CHECK(random2.processes.size() == 300 && random2.processes[7].incarnation == 0xfedcba9876543210ULL * 8);
  // A frame: 4 + 9 bytes, then each entry: "a" raw is 3 bytes and the difference 1 byte (2 about
  // the restart) against 9 for the random ones.
  CHECK(counted.Encode().size() <= 4 + 9 + 300 * 4 + 2 && random.Encode().size() > counted.Encode().size() + 300 * 7);

  msg::KeyValueSet set;
  set.key = "k";
  set.value = std::string("\0\xff", 2);
  auto set2 = RoundTrip(set);
  CHECK(set2.key == "k" && set2.value == set.value);

  msg::KeyValueGet get;
  get.key = "k";
  get.timeout_ms = ~0ULL;
  CHECK(RoundTrip(get).timeout_ms == ~0ULL);
  msg::KeyValueTryGet tg;
  tg.key = "q";
  CHECK(RoundTrip(tg).key == "q");
  msg::KeyValueInsert ins;
  ins.key = "i";
  ins.value = std::string("\0v", 2);
  auto ins2 = RoundTrip(ins);
  CHECK(ins2.key == "i" && ins2.value == ins.value);
  msg::KeyValueIncrement inc;
  inc.key = "n";
  inc.increment = -9223372036854775807LL - 1;
  auto inc2 = RoundTrip(inc);
  CHECK(inc2.key == "n" && inc2.increment == inc.increment);
  msg::KeyValueDelete del;
  del.key = "d";
  CHECK(RoundTrip(del).key == "d");
  msg::KeyValueList list;
  list.prefix = "p/";
  CHECK(RoundTrip(list).prefix == "p/");
  msg::Value v;
  v.value = "val";
  CHECK(RoundTrip(v).value == "val");
  msg::Entries en;
  en.entries = {{"a", "1"}, {"b", ""}};
  CHECK(RoundTrip(en).entries == en.entries);
  msg::Barrier b;
  b.name = "sync";
  b.timeout_ms = 5;
  auto b2 = RoundTrip(b);
  CHECK(b2.name == "sync" && b2.timeout_ms == 5);
  msg::Shutdown sd;
  sd.timeout_ms = 6;
  CHECK(RoundTrip(sd).timeout_ms == 6);
  RoundTrip(msg::Heartbeat());
  RoundTrip(msg::Ok());
  msg::Failure f;
  f.process_id = 2;
  f.reason = "why";
  auto f2 = RoundTrip(f);
  CHECK(f2.process_id == 2 && f2.reason == "why");
  f.blamed = {1, 3};
  CHECK(RoundTrip(f).blamed == (std::vector<uint32_t>{1, 3}));
  msg::ReportError re;
  re.reason = "oops";
  CHECK(RoundTrip(re).reason == "oops" && RoundTrip(re).blamed.empty());
  re.blamed = {0};
  CHECK(RoundTrip(re).blamed == (std::vector<uint32_t>{0}));
  // A count with no ids behind it is refused, not trusted.
  std::string cut = re.Encode();
  cut.resize(cut.size() - 4);
  CHECK(!msg::ReportError::Decode(Payload(cut)).ok());
  msg::PeerShutdown ps;
  ps.process_id = 1;
  CHECK(RoundTrip(ps).process_id == 1);
}

void TestDecodersRefuseBadInput() {
  msg::KeyValueSet set;
  set.key = "key";
  set.value = "value";
  std::string payload = Payload(set.Encode());
  // Every truncation fails, and so does a trailing byte.
  for (size_t n = 0; n < payload.size(); ++n) CHECK(!msg::KeyValueSet::Decode(payload.substr(0, n)).ok());
  CHECK(!msg::KeyValueSet::Decode(payload + "x").ok());
  // Another type's payload is not this type.
  auto wrong = msg::KeyValueGet::Decode(payload);
  CHECK(!wrong.ok() && wrong.status().message().find("expected KeyValueGet, got KeyValueSet") != std::string::npos);
  // A count of four billion entries backed by no bytes fails at once,
  // without reserving room for them.
  std::string huge = Payload(Writer(MessageType::kTopology, 1).U32(0xffffffffu).Finish());
  auto t = msg::Topology::Decode(huge);
  CHECK(!t.ok() && t.status().message().find("truncated") != std::string::npos);
  std::string many = Payload(Writer(MessageType::kEntries, 1).U32(0xffffffffu).Bytes("a").Bytes("b").Finish());
  CHECK(!msg::Entries::Decode(many).ok());
  CHECK(!msg::DecodeAndEncodeAny(std::string("\x63\0\0\0\0", 5)).ok());
  CHECK(!msg::DecodeAndEncodeAny("").ok());
}

}  // namespace

void RunMessagesTests() {
  TestEveryMessageRoundTrips();
  TestDecodersRefuseBadInput();
}
