// Unit tests of the C++ pieces that need no engine: run by
// tests/test_cpp_units.py through CMake (MYPLUGIN_BUILD_TESTS=ON).
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coordination/network_address.h"
#include "coordination/process_info.h"
#include "coordination/socket.h"
#include "coordination/wire.h"
#include "engine/engine_library.h"
#include "pjrt/client_options.h"
#include "check.h"

using myplugin::ClientOptions;
using myplugin::Code;
using myplugin::ParseClientOptions;
using myplugin::StatusOr;

// Defined in nccl_unit_tests.cc; false when the NCCL backend is not built.
bool RunNcclTests();
// Defined in serialized_executable_tests.cc.
void RunSerializedExecutableTests();
void RunCoordinationTests();
void RunCoordinationStressTests();
void RunFlightRecorderTests();

namespace {

PJRT_NamedValue Int(const char* name, int64_t v) {
  PJRT_NamedValue n{};
  n.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  n.name = name;
  n.name_size = std::strlen(name);
  n.type = PJRT_NamedValue_kInt64;
  n.int64_value = v;
  n.value_size = 1;
  return n;
}

PJRT_NamedValue Str(const char* name, const char* v) {
  PJRT_NamedValue n = Int(name, 0);
  n.type = PJRT_NamedValue_kString;
  n.string_value = v;
  n.value_size = std::strlen(v);
  return n;
}

myplugin::EnvLookup Env(std::map<std::string, std::string> vars) {
  auto holder = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [holder](const char* name) -> const char* {
    auto it = holder->find(name);
    return it == holder->end() ? nullptr : it->second.c_str();
  };
}

StatusOr<ClientOptions> Parse(std::vector<PJRT_NamedValue> values, std::map<std::string, std::string> env = {}) {
  return ParseClientOptions(values.data(), values.size(), Env(std::move(env)));
}

bool Mentions(const StatusOr<ClientOptions>& r, const char* text) {
  return r.status().message().find(text) != std::string::npos;
}

void TestDefaults() {
  auto r = Parse({});
  CHECK(r.ok());
  CHECK(r.value().num_devices == 1);
  CHECK(r.value().num_nodes == -1);
}

void TestEnvironment() {
  auto r = Parse({}, {{"MYPLUGIN_NUM_DEVICES", "8"}});
  CHECK(r.ok() && r.value().num_devices == 8);
  for (const char* bad : {"0", "-2", "abc", "4x", "99999999999999999999", "5000"}) {
    auto b = Parse({}, {{"MYPLUGIN_NUM_DEVICES", bad}});
    CHECK(!b.ok());
    CHECK(b.status().code() == Code::kInvalidArgument);
    CHECK(Mentions(b, "MYPLUGIN_NUM_DEVICES"));
  }
}

void TestOptions() {
  auto r = Parse({Int("num_devices", 4)}, {{"MYPLUGIN_NUM_DEVICES", "8"}});
  CHECK(r.ok() && r.value().num_devices == 4);  // explicit option wins
  auto s = Parse({Str("num_devices", "3")});
  CHECK(s.ok() && s.value().num_devices == 3);  // jax_pjrt_client_create_options gives strings
  auto bad = Parse({Str("num_devices", "three")});
  CHECK(!bad.ok() && Mentions(bad, "num_devices"));
  auto zero = Parse({Int("num_devices", 0)});
  CHECK(!zero.ok() && zero.status().code() == Code::kInvalidArgument);
  auto unknown = Parse({Int("num_devies", 2)});
  CHECK(!unknown.ok() && Mentions(unknown, "num_devies") && Mentions(unknown, "accepted"));
  auto single = Parse({Int("node_id", 0), Int("num_nodes", 1)});
  CHECK(single.ok() && single.value().num_nodes == 1 && single.value().node_id == 0);
}

namespace wire = myplugin::coordination;

// local_device_ids reach the client as the create option visible_devices
// (jax_plugin.distributed.client_options), never through the environment.
void TestVisibleDevices() {
  const int64_t ids[] = {2, 0};
  PJRT_NamedValue list = Int("visible_devices", 0);
  list.type = PJRT_NamedValue_kInt64List;
  list.int64_array_value = ids;
  list.value_size = 2;
  auto r = Parse({list}, {{"MYPLUGIN_VISIBLE_DEVICES", "5"}});
  CHECK(r.ok());
  CHECK((r.value().visible_devices == std::vector<int64_t>{2, 0}));
  CHECK(Parse({}, {{"MYPLUGIN_VISIBLE_DEVICES", "5"}}).value().visible_devices.empty());
  auto wrong = Parse({Int("visible_devices", 1)});
  CHECK(!wrong.ok() && wrong.status().code() == Code::kInvalidArgument && Mentions(wrong, "list of integers"));
  const int64_t negative[] = {-1};
  list.int64_array_value = negative;
  list.value_size = 1;
  auto bad = Parse({list});
  CHECK(!bad.ok() && bad.status().code() == Code::kInvalidArgument && Mentions(bad, "negative device id: -1"));
}

void TestWireRoundTrip() {
  std::string frame = wire::Writer(wire::MessageType::kKeyValueSet, 77)
                          .Bytes(std::string("k\0ey", 4))
                          .U64(0x0123456789abcdefULL)
                          .U16(65535)
                          .Finish();
  unsigned char prefix[4];
  std::memcpy(prefix, frame.data(), 4);
  uint32_t length = 0;
  CHECK(wire::DecodeLength(prefix, &length).ok());
  CHECK(length == frame.size() - 4);
  std::string payload = frame.substr(4);
  wire::Reader r(payload);
  wire::MessageType type;
  uint32_t rid;
  std::string key;
  uint64_t v64;
  uint16_t v16;
  CHECK(r.Header(&type, &rid).ok() && type == wire::MessageType::kKeyValueSet && rid == 77);
  CHECK(r.Bytes(&key).ok() && key == std::string("k\0ey", 4));
  CHECK(r.U64(&v64).ok() && v64 == 0x0123456789abcdefULL);
  CHECK(r.U16(&v16).ok() && v16 == 65535);
  CHECK(r.End().ok());
}

void TestWireRejectsMalformed() {
  unsigned char huge[4] = {0xff, 0xff, 0xff, 0x7f};
  uint32_t length;
  auto st = wire::DecodeLength(huge, &length);
  CHECK(!st.ok() && st.message().find("exceeds the limit") != std::string::npos);
  unsigned char tiny[4] = {2, 0, 0, 0};
  CHECK(!wire::DecodeLength(tiny, &length).ok());

  std::string unknown_type("\x63\0\0\0\0", 5);
  wire::Reader r1(unknown_type);
  wire::MessageType type;
  uint32_t rid;
  CHECK(!r1.Header(&type, &rid).ok());

  // A byte string whose length runs past the end.
  std::string truncated = wire::Writer(wire::MessageType::kValue, 1).U32(1000).Finish().substr(4) + "abc";
  wire::Reader r2(truncated);
  std::string value;
  CHECK(r2.Header(&type, &rid).ok());
  auto bad = r2.Bytes(&value);
  CHECK(!bad.ok() && bad.message().find("truncated") != std::string::npos);

  std::string trailing = wire::Writer(wire::MessageType::kOk, 1).U8(9).Finish().substr(4);
  wire::Reader r3(trailing);
  CHECK(r3.Header(&type, &rid).ok());
  CHECK(!r3.End().ok());
}

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

void TestNetworkAddress() {
  namespace c = myplugin::coordination;
  CHECK(c::IsLoopbackAddress("127.0.1.1") && c::IsLoopbackAddress("::1") && c::IsLoopbackAddress("::ffff:127.0.0.1"));
  CHECK(!c::IsLoopbackAddress("10.0.0.1") && !c::IsLoopbackAddress("fd00::1") && !c::IsLoopbackAddress("node-1"));
  CHECK(std::strcmp(c::AddressFamilyName("10.0.0.1"), "IPv4") == 0);
  CHECK(std::strcmp(c::AddressFamilyName("fe80::1%eth0"), "IPv6") == 0);
  CHECK(c::AddressFamilyName("node-1") == nullptr);
  auto lo = c::InterfaceAddress("lo", "127.0.0.1");
  CHECK(lo.ok() && lo.value() == "127.0.0.1");
  auto none = c::InterfaceAddress("nosuch0", "");
  CHECK(!none.ok() && none.status().message().find("does not exist") != std::string::npos);
  auto toward = c::SourceAddressToward("127.0.0.1");
  CHECK(toward.ok() && c::IsLoopbackAddress(toward.value()));
}

void TestHostPort() {
  auto a = wire::ParseHostPort("10.0.0.1:1234");
  CHECK(a.ok() && a.value().host == "10.0.0.1" && a.value().port == 1234);
  auto b = wire::ParseHostPort("[::1]:80");
  CHECK(b.ok() && b.value().host == "::1" && b.value().port == 80);
  CHECK(!wire::ParseHostPort("nohost").ok());
  CHECK(!wire::ParseHostPort("h:99999").ok());
  CHECK(!wire::ParseHostPort("h:12ab").ok());
}

// Found by UBSan in the Python tests: the engine (newer than our
// pjrt_c_api.h) lists an extension of type 24, which the lookup loaded as
// the enum. Types past ours are skipped, the one asked for is found.
void TestExtensionTypesPastOurHeader() {
  PJRT_Extension_Base ffi{}, newer{}, older{};
  ffi.type = PJRT_Extension_Type_FFI;
  const int unknown = 24;
  std::memcpy(&newer.type, &unknown, sizeof(unknown));
  newer.next = &ffi;
  older.type = PJRT_Extension_Type_Custom_Partitioner;
  older.next = &newer;
  CHECK(myplugin::FindExtensionIn(&older, PJRT_Extension_Type_FFI) == &ffi);
  CHECK(myplugin::FindExtensionIn(&older, PJRT_Extension_Type_Custom_Partitioner) == &older);
  CHECK(myplugin::FindExtensionIn(&older, PJRT_Extension_Type_Layouts) == nullptr);
  CHECK(myplugin::FindExtensionIn(nullptr, PJRT_Extension_Type_FFI) == nullptr);
}

}  // namespace

int main() {
  TestDefaults();
  TestEnvironment();
  TestOptions();
  TestVisibleDevices();
  TestWireRoundTrip();
  TestWireRejectsMalformed();
  TestProcessInfo();
  TestHostPort();
  TestNetworkAddress();
  TestExtensionTypesPastOurHeader();
  RunSerializedExecutableTests();
  RunCoordinationTests();
  RunCoordinationStressTests();
  RunFlightRecorderTests();
  bool nccl = RunNcclTests();
  std::printf("NCCL backend tests: %s\n", nccl ? "ran" : "not built (no NCCL headers)");
  std::printf("%d passed, %d failed\n", unit::passes, unit::failures);
  return unit::failures == 0 ? 0 : 1;
}
