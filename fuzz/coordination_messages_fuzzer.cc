// libFuzzer target: every coordination message decoder (messages.h) on
// arbitrary bytes. Invariants: no decoder crashes, over-reads or allocates
// from a count it has not seen bytes for; a payload that decodes re-encodes
// to exactly the same bytes (the encoding is canonical), and decoding that
// again gives the same message.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "coordination/messages.h"

namespace coord = myplugin::coordination;
namespace msg = myplugin::coordination::msg;

namespace {

void Require(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "coordination_messages_fuzzer: invariant broken: %s\n", what);
    std::abort();
  }
}

// Decoding as the wrong type must fail cleanly; as the right one, round-trip.
template <typename M>
void Try(const std::string& payload) {
  auto m = M::Decode(payload);
  if (!m.ok()) {
    Require(m.status().code() == myplugin::Code::kInvalidArgument, "a decode error that is not INVALID_ARGUMENT");
    return;
  }
  std::string frame = m.value().Encode();
  Require(frame.size() == payload.size() + 4 && frame.compare(4, std::string::npos, payload) == 0,
          "re-encoding changed the bytes");
  auto again = M::Decode(frame.substr(4));
  Require(again.ok() && again.value().Encode() == frame, "the re-encoded message does not decode to itself");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string payload(reinterpret_cast<const char*>(data), size);
  Try<msg::Hello>(payload);
  Try<msg::HelloOk>(payload);
  Try<msg::Error>(payload);
  Try<msg::Ok>(payload);
  Try<msg::Register>(payload);
  Try<msg::Topology>(payload);
  Try<msg::KeyValueSet>(payload);
  Try<msg::KeyValueGet>(payload);
  Try<msg::KeyValueTryGet>(payload);
  Try<msg::KeyValueDelete>(payload);
  Try<msg::KeyValueList>(payload);
  Try<msg::Value>(payload);
  Try<msg::Entries>(payload);
  Try<msg::Barrier>(payload);
  Try<msg::Shutdown>(payload);
  Try<msg::Heartbeat>(payload);
  Try<msg::Failure>(payload);
  Try<msg::ReportError>(payload);
  Try<msg::PeerShutdown>(payload);
  Try<msg::Agree>(payload);
  Try<msg::Membership>(payload);
  Try<msg::KeyValueInsert>(payload);
  Try<msg::KeyValueIncrement>(payload);
  // The dispatcher agrees with the decoder its header names.
  coord::MessageType type;
  uint32_t rid;
  auto any = msg::DecodeAndEncodeAny(payload);
  if (any.ok()) {
    Require(msg::PeekType(payload, &type, &rid).ok(), "decoded a payload whose header does not parse");
    Require(any.value().compare(4, std::string::npos, payload) == 0, "DecodeAndEncodeAny changed the bytes");
  }
  return 0;
}
