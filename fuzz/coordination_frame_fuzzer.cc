// libFuzzer target: the frame decoder, as the service and the client run it
// (Socket::RecvFrame: the u32 length prefix of wire.h, checked against the
// cap, then the payload) on a byte stream from a socket pair, followed by the
// header of each payload (msg::PeekType) and the dispatcher
// (msg::DecodeAndEncodeAny). coordination_messages_fuzzer covers each
// message's fields; this one, how a stream splits into frames.
//
// The first input byte picks the cap: the Hello cap of an unauthenticated
// connection, or a small one so that frames at and past it are common.
// Invariants: the frames read are exactly the stream's bytes in order, each
// of 5 bytes or more and within the cap; the stream ends in INVALID_ARGUMENT
// exactly when a length prefix is out of range, otherwise in UNAVAILABLE
// (the peer closed), never a timeout; a payload whose header parses has the
// type and request id of its first five bytes, and parses exactly when
// that type is known.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "coordination/messages.h"
#include "coordination/socket.h"
#include "coordination/wire.h"

namespace coord = myplugin::coordination;
namespace msg = myplugin::coordination::msg;

namespace {

void Require(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "coordination_frame_fuzzer: invariant broken: %s\n", what);
    std::abort();
  }
}

uint32_t Le32(const std::string& s, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(s[at])) |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 1])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 2])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 3])) << 24;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A socket pair holds this much without a reader.
  if (size == 0 || size > 100000) return 0;
  const uint32_t cap = data[0] & 1 ? coord::kMaxHelloBytes : 64;
  const std::string stream(reinterpret_cast<const char*>(data + 1), size - 1);
  int fds[2];
  Require(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0, "socketpair");
  coord::Socket reader(fds[0]);
  Require(write(fds[1], stream.data(), stream.size()) == static_cast<ssize_t>(stream.size()), "write");
  close(fds[1]);

  size_t at = 0;
  while (true) {
    std::string payload;
    myplugin::Status s = reader.RecvFrame(&payload, 0, cap);
    if (!s.ok()) {
      const bool whole_prefix = stream.size() - at >= 4;
      const uint32_t n = whole_prefix ? Le32(stream, at) : 0;
      const bool bad_prefix = whole_prefix && (n > cap || n < 5);
      Require(s.code() != myplugin::Code::kDeadlineExceeded, "a timeout on a stream that had ended");
      Require((s.code() == myplugin::Code::kInvalidArgument) == bad_prefix,
              "INVALID_ARGUMENT is not the verdict on the length prefix");
      if (!bad_prefix) Require(s.code() == myplugin::Code::kUnavailable, "a closed stream is not UNAVAILABLE");
      break;
    }
    Require(payload.size() >= 5 && payload.size() <= cap, "a frame outside the size limits");
    Require(at + 4 + payload.size() <= stream.size() && Le32(stream, at) == payload.size() &&
                stream.compare(at + 4, payload.size(), payload) == 0,
            "a frame that is not the stream's next bytes");
    at += 4 + payload.size();
    coord::MessageType type;
    uint32_t rid;
    const uint8_t t = static_cast<uint8_t>(payload[0]);
    const bool known = t >= static_cast<uint8_t>(coord::MessageType::kHello) &&
                       t <= static_cast<uint8_t>(coord::kLastMessageType);
    const bool peeked = msg::PeekType(payload, &type, &rid).ok();
    Require(peeked == known, "a header of five bytes parsed exactly when its type is known: not so");
    if (peeked) {
      Require(static_cast<uint8_t>(type) == t && rid == Le32(payload, 1),
              "the header is not the payload's first five bytes");
    }
    auto any = msg::DecodeAndEncodeAny(payload);
    if (any.ok()) Require(any.value().compare(4, std::string::npos, payload) == 0, "re-encoding changed the bytes");
  }
  return 0;
}
