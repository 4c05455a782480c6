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

// Copies `message`, passing the payload of length-delimited field `field`
// through `rewrite` (for repeated fields, each occurrence).
StatusOr<std::string> RewriteField(const std::string& message, int field,
                                   const std::function<StatusOr<std::string>(const std::string&)>& rewrite) {
  std::string out;
  size_t pos = 0;
  while (pos < message.size()) {
    size_t start = pos;
    uint64_t key;
    if (!ReadVarint(message, &pos, &key)) return Malformed("bad field key");
    int wire = static_cast<int>(key & 7);
    int number = static_cast<int>(key >> 3);
    if (wire == kVarint) {
      uint64_t ignored;
      if (!ReadVarint(message, &pos, &ignored)) return Malformed("bad varint");
    } else if (wire == kFixed64 || wire == kFixed32) {
      pos += wire == kFixed64 ? 8 : 4;
      if (pos > message.size()) return Malformed("truncated fixed field");
    } else if (wire == kLengthDelimited) {
      uint64_t len;
      if (!ReadVarint(message, &pos, &len) || len > message.size() - pos) return Malformed("bad length");
      if (number == field) {
        StatusOr<std::string> inner = rewrite(message.substr(pos, len));
        if (!inner.ok()) return inner.status();
        WriteVarint(&out, key);
        WriteVarint(&out, inner.value().size());
        out += inner.value();
        pos += len;
        continue;
      }
      pos += len;
    } else {
      return Malformed("unsupported wire type");
    }
    out.append(message, start, pos - start);
  }
  return out;
}

// The encoded fields of `message`, each with its key, in wire order.
StatusOr<std::vector<std::string>> SplitFields(const std::string& message) {
  std::vector<std::string> fields;
  size_t pos = 0;
  while (pos < message.size()) {
    size_t start = pos;
    uint64_t key;
    if (!ReadVarint(message, &pos, &key)) return Malformed("bad field key");
    int wire = static_cast<int>(key & 7);
    uint64_t v;
    if (wire == kVarint) {
      if (!ReadVarint(message, &pos, &v)) return Malformed("bad varint");
    } else if (wire == kLengthDelimited) {
      if (!ReadVarint(message, &pos, &v) || v > message.size() - pos) return Malformed("bad length");
      pos += v;
    } else if (wire == kFixed64 || wire == kFixed32) {
      pos += wire == kFixed64 ? 8 : 4;
      if (pos > message.size()) return Malformed("truncated fixed field");
    } else {
      return Malformed("unsupported wire type");
    }
    fields.push_back(message.substr(start, pos - start));
  }
  return fields;
}

StatusOr<std::string> RemapComputationDevice(const std::string& computation, const DeviceIdMap& map) {
  // replica_device_ids: packed (the proto3 default) or one varint each.
  std::string out;
  size_t pos = 0;
  while (pos < computation.size()) {
    size_t start = pos;
    uint64_t key;
    if (!ReadVarint(computation, &pos, &key)) return Malformed("bad field key");
    int wire = static_cast<int>(key & 7);
    int number = static_cast<int>(key >> 3);
    if (number == kReplicaDeviceIds && (wire == kLengthDelimited || wire == kVarint)) {
      std::vector<uint64_t> ids;
      if (wire == kVarint) {
        uint64_t v;
        if (!ReadVarint(computation, &pos, &v)) return Malformed("bad id");
        ids.push_back(v);
      } else {
        uint64_t len;
        if (!ReadVarint(computation, &pos, &len) || len > computation.size() - pos) return Malformed("bad length");
        size_t end = pos + len;
        while (pos < end) {
          uint64_t v;
          if (!ReadVarint(computation, &pos, &v)) return Malformed("bad packed id");
          ids.push_back(v);
        }
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
      continue;
    }
    // Any other field: copy it whole.
    if (wire == kVarint) {
      uint64_t ignored;
      if (!ReadVarint(computation, &pos, &ignored)) return Malformed("bad varint");
    } else if (wire == kLengthDelimited) {
      uint64_t len;
      if (!ReadVarint(computation, &pos, &len) || len > computation.size() - pos) return Malformed("bad length");
      pos += len;
    } else if (wire == kFixed64 || wire == kFixed32) {
      pos += wire == kFixed64 ? 8 : 4;
    } else {
      return Malformed("unsupported wire type");
    }
    out.append(computation, start, pos - start);
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

}  // namespace myplugin
