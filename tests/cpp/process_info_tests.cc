// What a process tells the service about itself (coordination/process_info.h)
// survives encoding, and garbage is refused; a table of many (the
// registration reply) gives back every entry, takes a few bytes a process,
// and refuses hostile tables with a reason.
#include <string>
#include <vector>

#include "check.h"
#include "coordination/host_identity.h"
#include "coordination/process_info.h"

namespace {

namespace wire = myplugin::coordination;
using wire::MessageType;

void TestProcessInfo() {
  wire::ProcessInfo info;
  info.hostname = "node-7";
  info.num_devices = 4;
  info.device_kind = "cpu";
  info.pid = 4321;
  info.address = "fd00::7";
  info.host_id = "boot/node-7/net:1";
  auto back = wire::DecodeProcessInfo(wire::EncodeProcessInfo(info));
  CHECK(back.ok());
  CHECK(back.value().hostname == "node-7" && back.value().num_devices == 4 && back.value().pid == 4321);
  CHECK(back.value().address == "fd00::7" && back.value().host_id == "boot/node-7/net:1");
  CHECK(!wire::DecodeProcessInfo("garbage").ok());
}

// A job of `hosts` hosts of 8 processes, as a launcher numbers them (one
// host's processes consecutive), each host with its own random-looking boot id.
std::vector<std::string> Job(int hosts) {
  std::vector<std::string> job;
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int h = 0; h < hosts; ++h) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    char boot[40];
    std::snprintf(boot, sizeof(boot), "%016llx-%08x", static_cast<unsigned long long>(x),
                  static_cast<unsigned>(x >> 17));
    for (int i = 0; i < 8; ++i) {
      wire::ProcessInfo p;
      p.hostname = "node-" + std::to_string(h) + ".cluster.example";
      p.num_devices = 8;
      p.device_kind = "NVIDIA H100 80GB HBM3";
      p.pid = 31000 + 7 * h + i;
      p.address = "10.1." + std::to_string(h / 256) + "." + std::to_string(h % 256);
      p.host_id = wire::HostIdentityOf(boot, p.hostname, 4026531840);
      job.push_back(wire::EncodeProcessInfo(p));
    }
  }
  return job;
}

std::string Table(const std::vector<std::string>& topologies) {
  wire::Writer w(MessageType::kTopology);
  wire::TopologyEncoder table(w);
  for (const std::string& t : topologies) table.Put(t);
  return w.Finish().substr(4);
}

// Decodes `n` entries and requires the end of the payload.
myplugin::StatusOr<std::vector<std::string>> Untable(const std::string& payload, size_t n) {
  wire::Reader r(payload);
  MessageType type;
  uint32_t rid;
  MYPLUGIN_RETURN_IF_ERROR(r.Header(&type, &rid));
  wire::TopologyDecoder table(r);
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    std::string t;
    MYPLUGIN_RETURN_IF_ERROR(table.Get(&t));
    out.push_back(std::move(t));
  }
  MYPLUGIN_RETURN_IF_ERROR(r.End());
  return out;
}

bool FailsWith(const std::string& payload, size_t n, const std::string& why) {
  auto t = Untable(payload, n);
  if (t.ok()) return false;
  bool named = t.status().code() == myplugin::Code::kInvalidArgument &&
               t.status().message().find(why) != std::string::npos;
  if (!named) std::fprintf(stderr, "unexpected error: %s\n", t.status().message().c_str());
  return named;
}

void TestTableRoundTrips() {
  std::vector<std::string> job = Job(64);
  // What is not a ProcessInfo travels as it is, between entries that are;
  // so does a ProcessInfo encoded with another header (not canonical).
  job.insert(job.begin() + 3, "zero");
  job.insert(job.begin() + 20, "");
  std::string odd_header = job[30];
  odd_header[1] = 7;  // the request id's low byte
  job.insert(job.begin() + 31, odd_header);
  wire::ProcessInfo shrinking;  // pid falling, fields emptied, more devices
  shrinking.num_devices = -1;
  shrinking.pid = -5;
  job.push_back(wire::EncodeProcessInfo(shrinking));
  auto back = Untable(Table(job), job.size());
  CHECK(back.ok() && back.value() == job);
}

void TestTableIsSmall() {
  // 4,096 processes: one by one they take 100-odd bytes each; the table,
  // whose new host costs its host identity and a few bytes per changed
  // field, takes about 6 a process.
  std::vector<std::string> job = Job(512);
  size_t one_by_one = 0;
  for (const std::string& t : job) one_by_one += 4 + t.size();
  const std::string table = Table(job);
  CHECK(table.size() < job.size() * 6);
  CHECK(table.size() * 10 < one_by_one);
  auto back = Untable(table, job.size());
  CHECK(back.ok() && back.value() == job);
}

// A host's identity is 16 hex digits of the FNV-1a hash of what it is made
// of (the reference values computed apart, in Python); only equality matters.
void TestHostIdentity() {
  CHECK(wire::HostIdentityOf("0d9e-boot", "node-7", 4026531840) == "ebb807537ca7ac3a");
  CHECK(wire::HostIdentityOf("0d9e-boot", "node-8", 4026531840) != wire::HostIdentityOf("0d9e-boot", "node-7", 4026531840));
  CHECK(wire::HostIdentityOf("0d9e-boot", "node-7", 4026531841) != wire::HostIdentityOf("0d9e-boot", "node-7", 4026531840));
  const std::string here = wire::HostIdentity();
  CHECK(here.size() == 16 && here == wire::HostIdentity());
}

void TestTableRefusesHostileInput() {
  const std::vector<std::string> job = Job(2);
  const std::string good = Table(job);
  // Every truncation fails, and a table that claims one entry more.
  for (size_t n = 5; n < good.size(); ++n) CHECK(!Untable(good.substr(0, n), job.size()).ok());
  CHECK(FailsWith(good, job.size() + 1, "truncated"));
  auto header = [] { return wire::Writer(MessageType::kTopology); };
  auto payload = [](const wire::Writer& w) { return w.Finish().substr(4); };
  CHECK(FailsWith(payload(header().U8(0x40)), 1, "unknown entry flags 64"));
  CHECK(FailsWith(payload(header().U8(0xc1)), 1, "unknown entry flags 193"));
  // A ProcessInfo must be an entry, not raw bytes (one encoding per table).
  const std::string info = job[0];
  CHECK(FailsWith(payload(header().U8(0x00).Varint(info.size()).Raw(info.data(), info.size())), 1, "carried raw"));
  // A raw length beyond the payload fails before any allocation.
  CHECK(FailsWith(payload(header().U8(0x00).Varint(~0ULL)), 1, "truncated"));
  // A varint in a longer form than needed, or past 64 bits.
  CHECK(FailsWith(payload(header().U8(0x80).U8(0x81).U8(0x00)), 1, "shortest form"));
  std::string overflow = payload(header().U8(0x80));
  overflow += std::string(9, '\xff') + '\x02';
  CHECK(FailsWith(overflow, 1, "overflows 64 bits"));
  CHECK(FailsWith(payload(header().U8(0x80).Varint(1ULL << 32)), 1, "pid difference beyond 32 bits"));
  // A field marked changed that is not, or that keeps less than it could.
  CHECK(FailsWith(payload(header().U8(0x82).Varint(0).Varint(0)), 1, "device count is marked changed"));
  CHECK(FailsWith(payload(header().U8(0x81).Varint(0).Varint(0).Varint(0).Varint(0)), 1,
                  "hostname of an entry is not in its one encoding"));
  auto two_hosts = [&](uint64_t start, uint64_t end, const std::string& middle) {
    return payload(header()
                       .U8(0x81).Varint(0).Varint(0).Varint(0).Varint(3).Raw("abc", 3)
                       .U8(0x81).Varint(0).Varint(start).Varint(end).Varint(middle.size())
                       .Raw(middle.data(), middle.size()));
  };
  CHECK(Untable(two_hosts(1, 1, "x"), 2).ok());  // "abc" -> "axc"
  CHECK(FailsWith(two_hosts(0, 1, "ax"), 2, "not in its one encoding"));
  CHECK(FailsWith(two_hosts(2, 2, ""), 2, "keeps more of the previous one than it has"));
  CHECK(FailsWith(two_hosts(~0ULL, 0, ""), 2, "keeps more of the previous one than it has"));
  // Copies are cheap on the wire but not in memory: a 1 MiB hostname
  // repeated at 2 bytes an entry stops at a frame's worth.
  wire::Writer bomb = header();
  const std::string big(1u << 20, 'h');
  bomb.U8(0x81).Varint(0).Varint(0).Varint(0).Varint(big.size()).Raw(big.data(), big.size());
  for (int i = 0; i < 80; ++i) bomb.U8(0x80).Varint(0);
  CHECK(FailsWith(payload(bomb), 81, "more than 67108864 bytes"));
}

}  // namespace

void RunProcessInfoTests() {
  TestProcessInfo();
  TestTableRoundTrips();
  TestTableIsSmall();
  TestHostIdentity();
  TestTableRefusesHostileInput();
}
