#include "coordination/wire.h"

namespace myplugin::coordination {

const char* MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kHello: return "Hello";
    case MessageType::kHelloOk: return "HelloOk";
    case MessageType::kError: return "Error";
    case MessageType::kOk: return "Ok";
    case MessageType::kRegister: return "Register";
    case MessageType::kTopology: return "Topology";
    case MessageType::kKeyValueSet: return "KeyValueSet";
    case MessageType::kKeyValueGet: return "KeyValueGet";
    case MessageType::kKeyValueTryGet: return "KeyValueTryGet";
    case MessageType::kKeyValueDelete: return "KeyValueDelete";
    case MessageType::kKeyValueList: return "KeyValueList";
    case MessageType::kValue: return "Value";
    case MessageType::kEntries: return "Entries";
    case MessageType::kBarrier: return "Barrier";
    case MessageType::kShutdown: return "Shutdown";
    case MessageType::kHeartbeat: return "Heartbeat";
    case MessageType::kFailure: return "Failure";
    case MessageType::kReportError: return "ReportError";
    case MessageType::kPeerShutdown: return "PeerShutdown";
    case MessageType::kAgree: return "Agree";
    case MessageType::kMembership: return "Membership";
    case MessageType::kKeyValueInsert: return "KeyValueInsert";
    case MessageType::kKeyValueIncrement: return "KeyValueIncrement";
  }
  return "Unknown";
}

Writer::Writer(MessageType type, uint32_t request_id) {
  U8(static_cast<uint8_t>(type));
  U32(request_id);
}

Writer& Writer::U8(uint8_t v) {
  payload_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::U16(uint16_t v) {
  for (int i = 0; i < 2; ++i) payload_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return *this;
}

Writer& Writer::U32(uint32_t v) {
  for (int i = 0; i < 4; ++i) payload_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return *this;
}

Writer& Writer::U64(uint64_t v) {
  for (int i = 0; i < 8; ++i) payload_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return *this;
}

Writer& Writer::Bytes(const std::string& v) {
  U32(static_cast<uint32_t>(v.size()));
  payload_.append(v);
  return *this;
}

Writer& Writer::Varint(uint64_t v) {
  for (; v >= 0x80; v >>= 7) payload_.push_back(static_cast<char>((v & 0x7f) | 0x80));
  payload_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::Raw(const char* data, size_t n) {
  payload_.append(data, n);
  return *this;
}

std::string Writer::Finish() const {
  std::string frame;
  frame.reserve(4 + payload_.size());
  uint32_t n = static_cast<uint32_t>(payload_.size());
  for (int i = 0; i < 4; ++i) frame.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  frame.append(payload_);
  return frame;
}

Status Reader::Take(size_t n, const char** out) {
  if (data_.size() - pos_ < n) {
    return InvalidArgument("malformed coordination message: truncated at byte " + std::to_string(pos_));
  }
  *out = data_.data() + pos_;
  pos_ += n;
  return OkStatus();
}

Status Reader::Header(MessageType* type, uint32_t* request_id) {
  uint8_t t;
  MYPLUGIN_RETURN_IF_ERROR(U8(&t));
  if (t < static_cast<uint8_t>(MessageType::kHello) || t > static_cast<uint8_t>(kLastMessageType)) {
    return InvalidArgument("malformed coordination message: unknown type " + std::to_string(t));
  }
  *type = static_cast<MessageType>(t);
  return U32(request_id);
}

Status Reader::U8(uint8_t* v) {
  const char* p;
  MYPLUGIN_RETURN_IF_ERROR(Take(1, &p));
  *v = static_cast<uint8_t>(p[0]);
  return OkStatus();
}

Status Reader::U16(uint16_t* v) {
  const char* p;
  MYPLUGIN_RETURN_IF_ERROR(Take(2, &p));
  *v = static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | (static_cast<uint8_t>(p[1]) << 8));
  return OkStatus();
}

Status Reader::U32(uint32_t* v) {
  const char* p;
  MYPLUGIN_RETURN_IF_ERROR(Take(4, &p));
  uint32_t r = 0;
  for (int i = 3; i >= 0; --i) r = (r << 8) | static_cast<uint8_t>(p[i]);
  *v = r;
  return OkStatus();
}

Status Reader::U64(uint64_t* v) {
  const char* p;
  MYPLUGIN_RETURN_IF_ERROR(Take(8, &p));
  uint64_t r = 0;
  for (int i = 7; i >= 0; --i) r = (r << 8) | static_cast<uint8_t>(p[i]);
  *v = r;
  return OkStatus();
}

Status Reader::I64(int64_t* v) {
  uint64_t u;
  MYPLUGIN_RETURN_IF_ERROR(U64(&u));
  *v = static_cast<int64_t>(u);
  return OkStatus();
}

Status Reader::Bytes(std::string* v) {
  uint32_t n;
  MYPLUGIN_RETURN_IF_ERROR(U32(&n));
  const char* p;
  MYPLUGIN_RETURN_IF_ERROR(Take(n, &p));
  v->assign(p, n);
  return OkStatus();
}

Status Reader::Varint(uint64_t* v) {
  const size_t start = pos_;
  uint64_t r = 0;
  for (int shift = 0;; shift += 7) {
    uint8_t byte;
    MYPLUGIN_RETURN_IF_ERROR(U8(&byte));
    // The tenth byte holds the 64th bit only; a zero last byte after the
    // first one is a longer form of a shorter value.
    if (shift == 63 && byte > 1) {
      return InvalidArgument("malformed coordination message: varint at byte " + std::to_string(start) +
                             " overflows 64 bits");
    }
    r |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) {
      if (byte == 0 && shift > 0) {
        return InvalidArgument("malformed coordination message: varint at byte " + std::to_string(start) +
                               " is not in its shortest form");
      }
      *v = r;
      return OkStatus();
    }
  }
}

Status Reader::AppendRaw(size_t n, std::string* v) {
  const char* p;
  MYPLUGIN_RETURN_IF_ERROR(Take(n, &p));
  v->append(p, n);
  return OkStatus();
}

Status Reader::End() const {
  if (pos_ != data_.size()) {
    return InvalidArgument("malformed coordination message: " + std::to_string(data_.size() - pos_) +
                           " unexpected trailing bytes");
  }
  return OkStatus();
}

Status DecodeLength(const unsigned char prefix[4], uint32_t* length, uint32_t max_bytes) {
  uint32_t n = prefix[0] | (prefix[1] << 8) | (prefix[2] << 16) | (static_cast<uint32_t>(prefix[3]) << 24);
  if (n > max_bytes) {
    return InvalidArgument("coordination frame of " + std::to_string(n) + " bytes exceeds the limit of " +
                           std::to_string(max_bytes) + " bytes (not a myplugin peer, or a corrupt stream)");
  }
  if (n < 5) return InvalidArgument("coordination frame of " + std::to_string(n) + " bytes is too short");
  *length = n;
  return OkStatus();
}

}  // namespace myplugin::coordination
