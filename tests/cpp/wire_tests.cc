// The coordination wire framing (coordination/wire.h): what a Writer
// frames a Reader reads back, and malformed frames are refused with a reason.
#include <cstring>
#include <string>

#include "check.h"
#include "coordination/wire.h"

namespace {

namespace wire = myplugin::coordination;

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

void TestVarints() {
  const uint64_t values[] = {0, 1, 127, 128, 300, 16383, 16384, 0xffffffffULL, 1ULL << 63, ~0ULL};
  const size_t sizes[] = {1, 1, 1, 2, 2, 2, 3, 5, 10, 10};
  for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); ++i) {
    std::string payload = wire::Writer(wire::MessageType::kValue).Varint(values[i]).Finish().substr(4);
    CHECK(payload.size() == 5 + sizes[i]);
    wire::Reader r(payload);
    wire::MessageType type;
    uint32_t rid;
    uint64_t v = 0;
    CHECK(r.Header(&type, &rid).ok() && r.Varint(&v).ok() && v == values[i] && r.End().ok());
  }
}

void TestZigZagDifferences() {
  // Small steps of either sign are small numbers; the widths wrap.
  CHECK(wire::ZigZagDifference<uint32_t>(7, 7) == 0 && wire::ZigZagDifference<uint32_t>(7, 6) == 1);
  CHECK(wire::ZigZagDifference<uint32_t>(7, 8) == 2 && wire::ZigZagDifference<uint32_t>(0, UINT32_MAX) == 1);
  CHECK(wire::ZigZagDifference<uint64_t>(UINT64_MAX, 0) == 2 && wire::ZigZagDifference<uint64_t>(1, 1 + 4096) == 8192);
  for (uint64_t from : {uint64_t{0}, uint64_t{5}, UINT64_MAX, uint64_t{1} << 63}) {
    for (uint64_t to : {uint64_t{0}, uint64_t{4}, UINT64_MAX - 1, uint64_t{1} << 40}) {
      CHECK(wire::FromZigZagDifference(from, wire::ZigZagDifference(from, to)) == to);
      CHECK(wire::FromZigZagDifference<uint32_t>(static_cast<uint32_t>(from),
                                           wire::ZigZagDifference<uint32_t>(static_cast<uint32_t>(from),
                                                                      static_cast<uint32_t>(to))) ==
            static_cast<uint32_t>(to));
    }
  }
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

  // A varint cut short, or in a longer form than its value needs.
  for (const std::string& bytes : {std::string("\x80"), std::string("\x80\x00", 2), std::string("\xff\x80\x00", 3)}) {
    std::string payload = wire::Writer(wire::MessageType::kValue).Finish().substr(4) + bytes;
    wire::Reader r(payload);
    uint64_t v;
    CHECK(r.Header(&type, &rid).ok() && !r.Varint(&v).ok());
  }
}

}  // namespace

void RunWireTests() {
  TestWireRoundTrip();
  TestVarints();
  TestZigZagDifferences();
  TestWireRejectsMalformed();
}
