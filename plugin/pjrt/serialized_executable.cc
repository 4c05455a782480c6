#include "pjrt/serialized_executable.h"

#include <cstring>

namespace myplugin {
namespace {

// 16 bytes, then the format version. The format is ours alone (little-endian
// fixed-width integers, length-prefixed byte strings); a new layout gets a
// new version and old blobs are refused, never misread.
constexpr char kMagic[] = "myplugin-exec\n\0\0";
constexpr size_t kMagicSize = 16;
constexpr uint32_t kFormatVersion = 1;

class Writer {
 public:
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void Bytes(const std::string& s) {
    U64(s.size());
    out_.append(s);
  }
  void Ids(const std::vector<int64_t>& ids) {
    U64(ids.size());
    for (int64_t v : ids) U64(static_cast<uint64_t>(v));
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  StatusOr<uint64_t> U64() {
    if (in_.size() - pos_ < 8) return Truncated();
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  StatusOr<std::string> Bytes() {
    StatusOr<uint64_t> n = U64();
    if (!n.ok()) return n.status();
    if (in_.size() - pos_ < n.value()) return Truncated();
    std::string s = in_.substr(pos_, n.value());
    pos_ += n.value();
    return s;
  }
  StatusOr<std::vector<int64_t>> Ids() {
    StatusOr<uint64_t> n = U64();
    if (!n.ok()) return n.status();
    if ((in_.size() - pos_) / 8 < n.value()) return Truncated();
    std::vector<int64_t> ids;
    for (uint64_t i = 0; i < n.value(); ++i) ids.push_back(static_cast<int64_t>(U64().value()));
    return ids;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  static Status Truncated() { return InvalidArgument("the serialized myplugin executable is truncated"); }
  const std::string& in_;
  size_t pos_ = kMagicSize;
};

}  // namespace

std::string EncodeSerializedExecutable(const SerializedExecutable& e) {
  Writer w;
  w.out().append(kMagic, kMagicSize);
  w.U64(kFormatVersion);
  w.Bytes(e.platform_version);
  w.U64(e.multiprocess ? 1 : 0);
  w.Bytes(e.engine_executable);
  if (e.multiprocess) {
    w.U64(e.process_independent ? 1 : 0);
    w.U64(e.assignment.size());
    for (const auto& replica : e.assignment) w.Ids(replica);
    w.Ids(e.device_order);
    w.Ids(e.engine_ids);
    w.Bytes(e.local_compile_options);
    w.Bytes(e.shadow_executable);
  }
  return std::move(w.out());
}

StatusOr<SerializedExecutable> DecodeSerializedExecutable(const std::string& bytes) {
  if (bytes.size() < kMagicSize || std::memcmp(bytes.data(), kMagic, kMagicSize) != 0) {
    return InvalidArgument("these bytes are not a serialized myplugin executable (no myplugin header): they were "
                           "written by another PJRT plugin or backend");
  }
  Reader r(bytes);
  SerializedExecutable e;
#define MYPLUGIN_READ(var, expr)             \
  auto var = (expr);                         \
  if (!var.ok()) return var.status();
  MYPLUGIN_READ(version, r.U64());
  if (version.value() != kFormatVersion) {
    return FailedPrecondition("this serialized myplugin executable has format version " +
                              std::to_string(version.value()) + "; this build reads version " +
                              std::to_string(kFormatVersion));
  }
  MYPLUGIN_READ(platform_version, r.Bytes());
  e.platform_version = platform_version.take();
  MYPLUGIN_READ(multiprocess, r.U64());
  e.multiprocess = multiprocess.value() != 0;
  MYPLUGIN_READ(engine_executable, r.Bytes());
  e.engine_executable = engine_executable.take();
  if (e.multiprocess) {
    MYPLUGIN_READ(independent, r.U64());
    e.process_independent = independent.value() != 0;
    MYPLUGIN_READ(replicas, r.U64());
    for (uint64_t i = 0; i < replicas.value(); ++i) {
      MYPLUGIN_READ(replica, r.Ids());
      e.assignment.push_back(replica.take());
    }
    MYPLUGIN_READ(order, r.Ids());
    e.device_order = order.take();
    MYPLUGIN_READ(engine_ids, r.Ids());
    e.engine_ids = engine_ids.take();
    MYPLUGIN_READ(options, r.Bytes());
    e.local_compile_options = options.take();
    MYPLUGIN_READ(shadow, r.Bytes());
    e.shadow_executable = shadow.take();
    if (e.engine_ids.size() != e.device_order.size()) {
      return InvalidArgument("the serialized myplugin executable is corrupt: device lists of different lengths");
    }
  }
#undef MYPLUGIN_READ
  if (!r.done()) return InvalidArgument("the serialized myplugin executable has trailing bytes");
  return e;
}

}  // namespace myplugin
