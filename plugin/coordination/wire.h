// The coordination protocol on the wire: length-prefixed binary frames.
//
//   frame   := u32 length (little endian) | payload[length]
//   payload := u8 type | u32 request_id | fields...
//   fields  := u8 | u32 | u64 (little endian) | bytes (u32 length + data)
//            | varint (LEB128: 7 bits a byte, low first; the shortest form only)
//
// The first frame of every connection is a Hello carrying the magic, the
// protocol version and the shared token. Anything malformed is an error for
// that connection only: the service closes it and keeps serving the others.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace myplugin::coordination {

inline constexpr uint32_t kMagic = 0x4d59504c;  // "MYPL"
// 2: membership agreement (kAgree, kMembership). 3: atomic insert and
// increment. 4: a membership names each member's incarnation. 5: an error
// carries its failure's kind, processes, collective and call. 6: topologies
// travel as a table (process_info.h's TopologyEncoder), not one by one.
// 7: the service numbers the incarnations (id + 1, then + N at each restart;
// in tables, a varint of the difference from the entry before), so a
// table's entries carry no random 8 bytes each.
inline constexpr uint16_t kProtocolVersion = 7;
// Frames above this are refused before any allocation: a garbage or hostile
// length prefix must not make the service allocate gigabytes.
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;
// Before a connection has proven the token, only a Hello is read, and no
// Hello is larger than this: an unauthenticated peer cannot make the
// service allocate more.
inline constexpr uint32_t kMaxHelloBytes = 64u << 10;

enum class MessageType : uint8_t {
  kHello = 1,         // client -> service: magic, version, token, process id
  kHelloOk = 2,       // service -> client: heartbeat interval, timeout
  kError = 3,         // either way: code, message (the reply to a failed request)
  kOk = 4,            // service -> client: an empty success reply
  kRegister = 5,      // num processes, local topology
  kTopology = 6,      // reply to kRegister, once all have registered: n, (incarnation difference, table entry) * n
  kKeyValueSet = 7,   // key, value
  kKeyValueGet = 8,   // key, timeout ms (blocking)
  kKeyValueTryGet = 9,
  kKeyValueDelete = 10,
  kKeyValueList = 11,  // prefix
  kValue = 12,         // reply: value
  kEntries = 13,       // reply: n, (key, value) * n
  kBarrier = 14,       // name, timeout ms
  kShutdown = 15,      // timeout ms: the shutdown barrier
  kHeartbeat = 16,     // either way, no reply
  kFailure = 17,       // service -> client: failed process id, reason
  kReportError = 18,   // client -> service: this process is failing, and why (no reply)
  kPeerShutdown = 19,  // service -> client: process id has entered the shutdown barrier (it finished)
  kAgree = 20,         // client -> service: timeout ms: agree on the live members (recovery)
  kMembership = 21,    // reply to kAgree (and to a rejoining kRegister): epoch, n, (id, incarnation difference, table entry) * n
  kKeyValueInsert = 22,     // key, value: set only if absent (ALREADY_EXISTS otherwise), atomically
  kKeyValueIncrement = 23,  // key, increment: add to a decimal integer value (absent: 0); reply kValue
};
inline constexpr MessageType kLastMessageType = MessageType::kKeyValueIncrement;

const char* MessageTypeName(MessageType type);

// A value as its difference from another (modulo 2^bits of U), zigzagged
// so that small differences of either sign make short varints; and back.
template <typename U>
constexpr U ZigZagDifference(U from, U to) {
  const U d = static_cast<U>(to - from);
  return static_cast<U>((d << 1) ^ (U{0} - (d >> (sizeof(U) * 8 - 1))));
}
template <typename U>
constexpr U FromZigZagDifference(U from, U z) {
  return static_cast<U>(from + ((z >> 1) ^ (U{0} - (z & 1))));
}

class Writer {
 public:
  explicit Writer(MessageType type, uint32_t request_id = 0);
  Writer& U8(uint8_t v);
  Writer& U16(uint16_t v);
  Writer& U32(uint32_t v);
  Writer& U64(uint64_t v);
  Writer& I64(int64_t v) { return U64(static_cast<uint64_t>(v)); }
  Writer& Bytes(const std::string& v);
  Writer& Varint(uint64_t v);
  // Bytes without a length (the reader knows it from an earlier field).
  Writer& Raw(const char* data, size_t n);
  // The frame, length prefix included.
  std::string Finish() const;

 private:
  std::string payload_;
};

class Reader {
 public:
  // `payload` must outlive the reader.
  explicit Reader(const std::string& payload) : data_(payload) {}
  Status Header(MessageType* type, uint32_t* request_id);
  Status U8(uint8_t* v);
  Status U16(uint16_t* v);
  Status U32(uint32_t* v);
  Status U64(uint64_t* v);
  Status I64(int64_t* v);
  Status Bytes(std::string* v);
  // A longer form than needed is refused: every value has one encoding.
  Status Varint(uint64_t* v);
  // The next n bytes, appended to *v.
  Status AppendRaw(size_t n, std::string* v);
  // Trailing bytes are a protocol error too.
  Status End() const;

 private:
  Status Take(size_t n, const char** out);
  const std::string& data_;
  size_t pos_ = 0;
};

// Decodes the u32 length prefix of a frame and checks it against kMaxFrameBytes.
Status DecodeLength(const unsigned char prefix[4], uint32_t* length, uint32_t max_bytes = kMaxFrameBytes);

}  // namespace myplugin::coordination
