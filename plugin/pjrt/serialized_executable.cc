#include "pjrt/serialized_executable.h"

#include <cstdio>
#include <cstring>

namespace myplugin {
namespace {

// 16 bytes, then the format version. The format is ours alone (little-endian
// fixed-width integers, length-prefixed byte strings); a new layout gets a
// new version and old blobs are refused, never misread.
constexpr char kMagic[] = "myplugin-exec\n\0\0";
constexpr size_t kMagicSize = 16;
constexpr uint32_t kFormatVersion = 2;  // 2: the compile-only target section

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
  w.U64(e.for_target ? 1 : 0);
  if (e.for_target) {
    w.Bytes(e.target_device_kind);
    w.U64(static_cast<uint64_t>(e.target_cc_major));
    w.U64(static_cast<uint64_t>(e.target_cc_minor));
    w.Bytes(e.target_topology);
    w.U64(e.process_executables.size());
    for (size_t p = 0; p < e.process_executables.size(); ++p) {
      w.Bytes(e.process_executables[p]);
      w.Ids(e.process_device_orders[p]);
      w.Ids(e.process_engine_ids[p]);
      w.Bytes(e.process_compile_options[p]);
    }
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
  MYPLUGIN_READ(for_target, r.U64());
  e.for_target = for_target.value() != 0;
  if (e.for_target) {
    MYPLUGIN_READ(kind, r.Bytes());
    e.target_device_kind = kind.take();
    MYPLUGIN_READ(major, r.U64());
    MYPLUGIN_READ(minor, r.U64());
    e.target_cc_major = static_cast<int64_t>(major.value());
    e.target_cc_minor = static_cast<int64_t>(minor.value());
    MYPLUGIN_READ(topology, r.Bytes());
    e.target_topology = topology.take();
    MYPLUGIN_READ(processes, r.U64());
    if (processes.value() > bytes.size() / 16) return InvalidArgument("the serialized myplugin executable is corrupt");
    for (uint64_t p = 0; p < processes.value(); ++p) {
      MYPLUGIN_READ(exec, r.Bytes());
      MYPLUGIN_READ(order, r.Ids());
      MYPLUGIN_READ(ids, r.Ids());
      MYPLUGIN_READ(local_options, r.Bytes());
      e.process_compile_options.push_back(local_options.take());
      if (order.value().size() != ids.value().size()) {
        return InvalidArgument("the serialized myplugin executable is corrupt: device lists of different lengths");
      }
      e.process_executables.push_back(exec.take());
      e.process_device_orders.push_back(order.take());
      e.process_engine_ids.push_back(ids.take());
    }
  }
#undef MYPLUGIN_READ
  if (!r.done()) return InvalidArgument("the serialized myplugin executable has trailing bytes");
  return e;
}

Status CheckTargetFits(const SerializedExecutable& e, const TargetLoadSite& site) {
  const std::string what = "this executable was compiled ahead of time for " + e.target_device_kind + " (sm_" +
                           std::to_string(e.target_cc_major) + std::to_string(e.target_cc_minor) +
                           ") GPUs in topology " + e.target_topology;
  if (!site.cuda_engine) {
    return FailedPrecondition(what + "; this process runs myplugin over " + site.engine_description +
                              ": it loads only in a job on those GPUs (myplugin over XLA's CUDA engine)");
  }
  if (e.platform_version != site.writer) {
    return FailedPrecondition(what + " by '" + e.platform_version + "'; this process is '" + site.writer +
                              "': an executable loads only into the plugin build and engine that made it");
  }
  if (e.target_device_kind != site.device_kind) {
    return FailedPrecondition(what + "; this process's GPUs are " + site.device_kind +
                              ": compile it again for them (gpu=... or target_config=...)");
  }
  // "<slices>x<hosts>x<GPUs per host>": processes = slices * hosts.
  int dims[3] = {0, 0, 0};
  if (std::sscanf(e.target_topology.c_str(), "%dx%dx%d", &dims[0], &dims[1], &dims[2]) != 3) {
    return InvalidArgument("the serialized myplugin executable is corrupt: topology '" + e.target_topology + "'");
  }
  if (dims[0] * dims[1] != site.processes || dims[2] != site.devices_per_process) {
    return FailedPrecondition(what + " (" + std::to_string(dims[0] * dims[1]) + " processes of " +
                              std::to_string(dims[2]) + " GPUs); this job has " + std::to_string(site.processes) +
                              " processes of " + std::to_string(site.devices_per_process) + " GPUs");
  }
  return OkStatus();
}

}  // namespace myplugin
