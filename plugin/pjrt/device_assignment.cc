#include "pjrt/device_assignment.h"

#include <algorithm>
#include <vector>

namespace myplugin {
namespace {

constexpr int kExecutableBuildOptions = 3;  // in CompileOptionsProto
constexpr int kDebugOptions = 3;            // in ExecutableBuildOptionsProto
constexpr int kDeviceAssignment = 9;        // in ExecutableBuildOptionsProto
constexpr int kComputationDevices = 3;      // in DeviceAssignmentProto
constexpr int kReplicaDeviceIds = 1;        // in ComputationDevice
constexpr int kHloModule = 1;               // in HloModuleProtoWithConfig
constexpr int kModuleConfig = 2;            // in HloModuleProtoWithConfig
constexpr int kReplicaCount = 4;            // in HloModuleConfigProto
constexpr int kNumPartitions = 5;           // in HloModuleConfigProto

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

Status Malformed(const char* what) { return InvalidArgument(std::string("malformed serialized proto: ") + what); }

bool ReadVarint(const std::string& b, size_t* pos, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= b.size()) return false;
    uint8_t c = static_cast<uint8_t>(b[(*pos)++]);
    v |= static_cast<uint64_t>(c & 0x7f) << shift;
    if ((c & 0x80) == 0) {
      *out = v;
      return true;
    }
  }
  return false;
}

void WriteVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// One field of a serialized message: bytes [start, end) hold it whole, and
// [value_start, end) its value (for a length-delimited field, its payload).
struct Field {
  uint64_t key;
  int number;
  int wire;
  size_t start, value_start, end;
};

// Reads the field at `*pos` and moves past it.
StatusOr<Field> NextField(const std::string& m, size_t* pos) {
  Field f{};
  f.start = *pos;
  if (!ReadVarint(m, pos, &f.key)) return Malformed("bad field key");
  f.wire = static_cast<int>(f.key & 7);
  f.number = static_cast<int>(f.key >> 3);
  f.value_start = *pos;
  uint64_t v;
  if (f.wire == kVarint) {
    if (!ReadVarint(m, pos, &v)) return Malformed("bad varint");
  } else if (f.wire == kLengthDelimited) {
    if (!ReadVarint(m, pos, &v) || v > m.size() - *pos) return Malformed("bad length");
    f.value_start = *pos;
    *pos += v;
  } else if (f.wire == kFixed64 || f.wire == kFixed32) {
    *pos += f.wire == kFixed64 ? 8 : 4;
    if (*pos > m.size()) return Malformed("truncated fixed field");
  } else {
    return Malformed("unsupported wire type");
  }
  f.end = *pos;
  return f;
}

// Copies `message`, passing the payload of length-delimited field `field`
// through `rewrite` (for repeated fields, each occurrence).
StatusOr<std::string> RewriteField(const std::string& message, int field,
                                   const std::function<StatusOr<std::string>(const std::string&)>& rewrite) {
  std::string out;
  for (size_t pos = 0; pos < message.size();) {
    StatusOr<Field> f = NextField(message, &pos);
    if (!f.ok()) return f.status();
    const Field& fd = f.value();
    if (fd.wire == kLengthDelimited && fd.number == field) {
      StatusOr<std::string> inner = rewrite(message.substr(fd.value_start, fd.end - fd.value_start));
      if (!inner.ok()) return inner.status();
      WriteVarint(&out, fd.key);
      WriteVarint(&out, inner.value().size());
      out += inner.value();
    } else {
      out.append(message, fd.start, fd.end - fd.start);
    }
  }
  return out;
}

// The encoded fields of `message`, each with its key, in wire order.
StatusOr<std::vector<std::string>> SplitFields(const std::string& message) {
  std::vector<std::string> fields;
  for (size_t pos = 0; pos < message.size();) {
    StatusOr<Field> f = NextField(message, &pos);
    if (!f.ok()) return f.status();
    fields.push_back(message.substr(f.value().start, f.value().end - f.value().start));
  }
  return fields;
}

StatusOr<std::string> RemapComputationDevice(const std::string& computation, const DeviceIdMap& map) {
  // replica_device_ids: packed (the proto3 default) or one varint each.
  std::string out;
  for (size_t pos = 0; pos < computation.size();) {
    StatusOr<Field> f = NextField(computation, &pos);
    if (!f.ok()) return f.status();
    const Field& fd = f.value();
    if (fd.number != kReplicaDeviceIds || (fd.wire != kLengthDelimited && fd.wire != kVarint)) {
      out.append(computation, fd.start, fd.end - fd.start);  // any other field: copied whole
      continue;
    }
    std::vector<uint64_t> ids;
    for (size_t at = fd.value_start; at < fd.end;) {
      uint64_t v;
      if (!ReadVarint(computation, &at, &v) || at > fd.end) return Malformed("bad packed id");
      ids.push_back(v);
    }
    std::string packed;
    for (uint64_t id : ids) {
      StatusOr<int64_t> mapped = map(static_cast<int64_t>(id));
      if (!mapped.ok()) return mapped.status();
      WriteVarint(&packed, static_cast<uint64_t>(mapped.value()));
    }
    WriteVarint(&out, (static_cast<uint64_t>(kReplicaDeviceIds) << 3) | kLengthDelimited);
    WriteVarint(&out, packed.size());
    out += packed;
  }
  return out;
}

}  // namespace

StatusOr<std::string> RemapDeviceAssignment(const std::string& device_assignment, const DeviceIdMap& map) {
  return RewriteField(device_assignment, kComputationDevices,
                      [&](const std::string& c) { return RemapComputationDevice(c, map); });
}

StatusOr<std::string> CanonicalCompileOptions(const std::string& compile_options) {
  return RewriteField(compile_options, kExecutableBuildOptions, [&](const std::string& build) {
    return RewriteField(build, kDebugOptions, [&](const std::string& debug) -> StatusOr<std::string> {
      StatusOr<std::vector<std::string>> fields = SplitFields(debug);
      if (!fields.ok()) return fields.status();
      std::sort(fields.value().begin(), fields.value().end());
      std::string out;
      for (const auto& f : fields.value()) out += f;
      return out;
    });
  });
}

StatusOr<std::vector<std::vector<int64_t>>> ReadCompileOptionDevices(const std::string& compile_options) {
  std::vector<std::vector<int64_t>> computations;  // [computation][replica]
  auto record = [&](int64_t id) -> StatusOr<int64_t> {
    computations.back().push_back(id);
    return id;
  };
  StatusOr<std::string> walked = RewriteField(compile_options, kExecutableBuildOptions, [&](const std::string& build) {
    return RewriteField(build, kDeviceAssignment, [&](const std::string& da) {
      return RewriteField(da, kComputationDevices, [&](const std::string& c) {
        computations.emplace_back();
        return RemapComputationDevice(c, record);
      });
    });
  });
  if (!walked.ok()) return walked.status();
  std::vector<std::vector<int64_t>> by_replica;
  for (size_t c = 0; c < computations.size(); ++c) {
    if (computations[c].size() != computations[0].size()) return Malformed("ragged device assignment");
    for (size_t r = 0; r < computations[c].size(); ++r) {
      if (by_replica.size() <= r) by_replica.emplace_back();
      by_replica[r].push_back(computations[c][r]);
    }
  }
  return by_replica;
}

StatusOr<std::string> RemapCompileOptionDevices(const std::string& compile_options, const DeviceIdMap& map) {
  return RewriteField(compile_options, kExecutableBuildOptions, [&](const std::string& build) {
    return RewriteField(build, kDeviceAssignment, [&](const std::string& da) { return RemapDeviceAssignment(da, map); });
  });
}

std::string WriteDeviceAssignment(const std::vector<std::vector<int64_t>>& assignment) {
  const size_t replicas = assignment.size();
  const size_t computations = replicas == 0 ? 0 : assignment[0].size();
  std::string out;
  WriteVarint(&out, (1 << 3) | kVarint);  // replica_count
  WriteVarint(&out, replicas);
  WriteVarint(&out, (2 << 3) | kVarint);  // computation_count
  WriteVarint(&out, computations);
  for (size_t c = 0; c < computations; ++c) {
    std::string ids;
    for (size_t r = 0; r < replicas; ++r) WriteVarint(&ids, static_cast<uint64_t>(assignment[r][c]));
    std::string device;
    WriteVarint(&device, (kReplicaDeviceIds << 3) | kLengthDelimited);
    WriteVarint(&device, ids.size());
    device += ids;
    WriteVarint(&out, (kComputationDevices << 3) | kLengthDelimited);
    WriteVarint(&out, device.size());
    out += device;
  }
  return out;
}

StatusOr<std::string> WholeProgramModule(const std::string& hlo_with_config, const std::string& module,
                                         int64_t replicas, int64_t partitions) {
  bool replaced = false;
  std::string out;
  for (size_t pos = 0; pos < hlo_with_config.size();) {
    StatusOr<Field> f = NextField(hlo_with_config, &pos);
    if (!f.ok()) return f.status();
    const Field& fd = f.value();
    std::string value;
    if (fd.wire == kLengthDelimited && fd.number == kHloModule) {
      value = module;
      replaced = true;
    } else if (fd.wire == kLengthDelimited && fd.number == kModuleConfig) {
      // The config's counts, the whole program's; every other field as it is.
      const std::string config = hlo_with_config.substr(fd.value_start, fd.end - fd.value_start);
      for (size_t c = 0; c < config.size();) {
        StatusOr<Field> g = NextField(config, &c);
        if (!g.ok()) return g.status();
        if (g.value().wire == kVarint && (g.value().number == kReplicaCount || g.value().number == kNumPartitions)) {
          continue;
        }
        value.append(config, g.value().start, g.value().end - g.value().start);
      }
      WriteVarint(&value, (kReplicaCount << 3) | kVarint);
      WriteVarint(&value, static_cast<uint64_t>(replicas));
      WriteVarint(&value, (kNumPartitions << 3) | kVarint);
      WriteVarint(&value, static_cast<uint64_t>(partitions));
    } else {
      out.append(hlo_with_config, fd.start, fd.end - fd.start);
      continue;
    }
    WriteVarint(&out, fd.key);
    WriteVarint(&out, value.size());
    out += value;
  }
  if (!replaced) return Malformed("no module in the engine's optimized program");
  return out;
}

StatusOr<std::string> LocalProgramAsWhole(const std::string& hlo_with_config, const std::string& partitioned,
                                          int64_t replicas, int64_t partitions) {
  constexpr int kSpmdOutputSharding = 12, kSpmdParametersShardings = 14;
  auto is_sharding = [](const Field& f) {
    return f.wire == kLengthDelimited && (f.number == kSpmdOutputSharding || f.number == kSpmdParametersShardings);
  };
  std::string module;
  bool found = false;
  for (size_t pos = 0; pos < hlo_with_config.size();) {
    StatusOr<Field> f = NextField(hlo_with_config, &pos);
    if (!f.ok()) return f.status();
    if (f.value().wire != kLengthDelimited || f.value().number != kHloModule) continue;
    const std::string local = hlo_with_config.substr(f.value().value_start, f.value().end - f.value().value_start);
    for (size_t m = 0; m < local.size();) {
      StatusOr<Field> g = NextField(local, &m);
      if (!g.ok()) return g.status();
      if (!is_sharding(g.value())) module.append(local, g.value().start, g.value().end - g.value().start);
    }
    found = true;
  }
  if (!found) return Malformed("no module in the engine's optimized program");
  for (size_t pos = 0; pos < partitioned.size();) {
    StatusOr<Field> f = NextField(partitioned, &pos);
    if (!f.ok()) return f.status();
    if (is_sharding(f.value())) module.append(partitioned, f.value().start, f.value().end - f.value().start);
  }
  return WholeProgramModule(hlo_with_config, module, replicas, partitions);
}

}  // namespace myplugin
