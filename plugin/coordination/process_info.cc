#include "coordination/process_info.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace myplugin::coordination {

// Framed as a Register message body so the one codec serves; the type byte is unused.
std::string EncodeProcessInfo(const ProcessInfo& info) {
  std::string frame = Writer(MessageType::kRegister)
                          .Bytes(info.hostname)
                          .U32(static_cast<uint32_t>(info.num_devices))
                          .Bytes(info.device_kind)
                          .U32(static_cast<uint32_t>(info.pid))
                          .Bytes(info.address)
                          .Bytes(info.host_id)
                          .Finish();
  return frame.substr(4);
}

StatusOr<ProcessInfo> DecodeProcessInfo(const std::string& bytes) {
  Reader r(bytes);
  MessageType type;
  uint32_t rid, n, pid;
  ProcessInfo info;
  MYPLUGIN_RETURN_IF_ERROR(r.Header(&type, &rid));
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&info.hostname));
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&n));
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&info.device_kind));
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&pid));
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&info.address));
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&info.host_id));
  MYPLUGIN_RETURN_IF_ERROR(r.End());
  info.num_devices = static_cast<int>(n);
  info.pid = static_cast<int>(pid);
  return info;
}

// --- the table of many ------------------------------------------------------

namespace {

// An entry's first byte: kRaw, or kInfo with the bits of the fields that
// differ from the previous ProcessInfo entry's (the first one's: a
// default ProcessInfo).
enum : uint8_t {
  kRaw = 0x00,
  kHostname = 0x01,
  kNumDevices = 0x02,
  kDeviceKind = 0x04,
  kAddress = 0x08,
  kHostId = 0x10,
  kInfo = 0x80,
};
constexpr uint8_t kFieldBits = kHostname | kNumDevices | kDeviceKind | kAddress | kHostId;

struct StringField {
  uint8_t bit;
  std::string ProcessInfo::*member;
  const char* name;
};
constexpr StringField kStringFields[] = {{kHostname, &ProcessInfo::hostname, "hostname"},
                                         {kDeviceKind, &ProcessInfo::device_kind, "device kind"},
                                         {kAddress, &ProcessInfo::address, "address"},
                                         {kHostId, &ProcessInfo::host_id, "host id"}};

// How much of `was` a delta from it to `is` keeps: the longest common
// start, then the longest common end of what is left of both.
std::pair<size_t, size_t> Kept(const std::string& was, const std::string& is) {
  const size_t n = std::min(was.size(), is.size());
  size_t start = 0;
  while (start < n && was[start] == is[start]) ++start;
  size_t end = 0;
  while (end < n - start && was[was.size() - 1 - end] == is[is.size() - 1 - end]) ++end;
  return {start, end};
}

// True when `bytes` is exactly the encoding of a ProcessInfo (then *info is it).
bool AsProcessInfo(const std::string& bytes, ProcessInfo* info) {
  StatusOr<ProcessInfo> decoded = DecodeProcessInfo(bytes);
  if (!decoded.ok() || EncodeProcessInfo(decoded.value()) != bytes) return false;
  *info = decoded.take();
  return true;
}

Status Malformed(const std::string& what) { return InvalidArgument("malformed topology table: " + what); }

}  // namespace

void TopologyEncoder::Put(const std::string& topology) {
  ProcessInfo info;
  if (!AsProcessInfo(topology, &info)) {
    w_.U8(kRaw).Varint(topology.size()).Raw(topology.data(), topology.size());
    return;
  }
  uint8_t flags = kInfo;
  if (info.num_devices != previous_.num_devices) flags |= kNumDevices;
  for (const StringField& f : kStringFields) {
    if (info.*f.member != previous_.*f.member) flags |= f.bit;
  }
  // Pids move by small steps either way within a host: a difference.
  w_.U8(flags).Varint(ZigZagDifference(static_cast<uint32_t>(previous_.pid), static_cast<uint32_t>(info.pid)));
  if (flags & kNumDevices) w_.Varint(static_cast<uint32_t>(info.num_devices));
  for (const StringField& f : kStringFields) {
    if (!(flags & f.bit)) continue;
    const std::string& is = info.*f.member;
    const auto [start, end] = Kept(previous_.*f.member, is);
    const size_t middle = is.size() - start - end;
    w_.Varint(start).Varint(end).Varint(middle).Raw(is.data() + start, middle);
  }
  previous_ = std::move(info);
}

Status TopologyDecoder::Get(std::string* topology) {
  uint8_t flags;
  MYPLUGIN_RETURN_IF_ERROR(r_.U8(&flags));
  if (flags == kRaw) {
    uint64_t n;
    MYPLUGIN_RETURN_IF_ERROR(r_.Varint(&n));
    topology->clear();
    MYPLUGIN_RETURN_IF_ERROR(r_.AppendRaw(n, topology));
    ProcessInfo unused;
    if (AsProcessInfo(*topology, &unused)) return Malformed("a process's topology is carried raw, not as an entry");
  } else if (!(flags & kInfo) || (flags & ~(kInfo | kFieldBits))) {
    return Malformed("unknown entry flags " + std::to_string(flags));
  } else {
    ProcessInfo info = previous_;
    uint64_t v;
    MYPLUGIN_RETURN_IF_ERROR(r_.Varint(&v));
    if (v > UINT32_MAX) return Malformed("a pid difference beyond 32 bits");
    info.pid = static_cast<int>(FromZigZagDifference(static_cast<uint32_t>(previous_.pid), static_cast<uint32_t>(v)));
    if (flags & kNumDevices) {
      MYPLUGIN_RETURN_IF_ERROR(r_.Varint(&v));
      if (v > UINT32_MAX) return Malformed("a device count beyond 32 bits");
      info.num_devices = static_cast<int>(static_cast<uint32_t>(v));
      if (info.num_devices == previous_.num_devices) return Malformed("the device count is marked changed but is not");
    }
    for (const StringField& f : kStringFields) {
      if (!(flags & f.bit)) continue;
      const std::string& was = previous_.*f.member;
      uint64_t start, end, middle;
      MYPLUGIN_RETURN_IF_ERROR(r_.Varint(&start));
      MYPLUGIN_RETURN_IF_ERROR(r_.Varint(&end));
      MYPLUGIN_RETURN_IF_ERROR(r_.Varint(&middle));
      if (start > was.size() || end > was.size() - start) {
        return Malformed(std::string("the ") + f.name + " keeps more of the previous one than it has");
      }
      std::string is = was.substr(0, start);
      MYPLUGIN_RETURN_IF_ERROR(r_.AppendRaw(middle, &is));
      is.append(was, was.size() - end, end);
      // One encoding per table: a field marked changed differs, and keeps
      // all it can of the previous one.
      if (is == was || Kept(was, is) != std::make_pair(static_cast<size_t>(start), static_cast<size_t>(end))) {
        return Malformed(std::string("the ") + f.name + " of an entry is not in its one encoding");
      }
      info.*f.member = std::move(is);
    }
    *topology = EncodeProcessInfo(info);
    previous_ = std::move(info);
  }
  // Copies of earlier fields cost a few bytes each: a table must not make
  // its reader hold more than a frame of the old one-by-one form could.
  total_bytes_ += topology->size();
  if (total_bytes_ > kMaxFrameBytes) {
    return Malformed("its topologies come to more than " + std::to_string(kMaxFrameBytes) + " bytes");
  }
  return OkStatus();
}

}  // namespace myplugin::coordination
