// libFuzzer target: the compile options' protobuf walker
// (plugin/pjrt/device_assignment.h) on arbitrary bytes, as serialized compile
// options and as a bare DeviceAssignmentProto.
//
// Invariants: no crash, over-read or unbounded allocation; a refusal is
// INVALID_ARGUMENT (or the map's own error, passed through); and on what it
// accepts, the walker agrees with itself:
//  - remapping with the identity map, then reading, gives the ids read from
//    the input, and remapping that again changes no byte (the output is in
//    the walker's canonical form);
//  - remapping with id + 1 shifts every id read by one, and a map that
//    refuses every id makes the remap fail with the map's error;
//  - the canonical compile options are a fixed point and carry the same
//    device assignment.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pjrt/device_assignment.h"

namespace {

void Require(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "device_assignment_fuzzer: invariant broken: %s\n", what);
    std::abort();
  }
}

using Ids = std::vector<std::vector<int64_t>>;

void RequireRefusal(const myplugin::Status& s) {
  Require(s.code() == myplugin::Code::kInvalidArgument, "a refusal that is not INVALID_ARGUMENT");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string options(reinterpret_cast<const char*>(data), size);
  const myplugin::DeviceIdMap identity = [](int64_t id) -> myplugin::StatusOr<int64_t> { return id; };
  const myplugin::DeviceIdMap next = [](int64_t id) -> myplugin::StatusOr<int64_t> {
    return static_cast<int64_t>(static_cast<uint64_t>(id) + 1);  // wraps, as the wire's uint64 does
  };

  auto read = myplugin::ReadCompileOptionDevices(options);
  auto same = myplugin::RemapCompileOptionDevices(options, identity);
  // Reading is the stricter (it also refuses a ragged assignment).
  if (!same.ok()) Require(!read.ok(), "options that remapping refuses were read");
  if (!read.ok()) {
    RequireRefusal(read.status());
    if (!same.ok()) RequireRefusal(same.status());
  } else {
    auto again = myplugin::ReadCompileOptionDevices(same.value());
    Require(again.ok() && again.value() == read.value(), "the identity remap changed the ids");
    auto twice = myplugin::RemapCompileOptionDevices(same.value(), identity);
    Require(twice.ok() && twice.value() == same.value(), "remapping the remapped options changed bytes");
    auto shifted = myplugin::RemapCompileOptionDevices(options, next);
    Require(shifted.ok(), "a remap that only changes ids failed");
    auto shifted_ids = myplugin::ReadCompileOptionDevices(shifted.value());
    Require(shifted_ids.ok(), "shifted options do not read");
    Ids expected = read.value();
    for (auto& replica : expected) {
      for (auto& id : replica) id = static_cast<int64_t>(static_cast<uint64_t>(id) + 1);
    }
    Require(shifted_ids.value() == expected, "remapping with id + 1 did not shift every id by one");
  }
  const myplugin::DeviceIdMap refuse = [](int64_t) -> myplugin::StatusOr<int64_t> {
    return myplugin::Status(myplugin::Code::kNotFound, "no such device");
  };
  // The map's own error comes back as it is, whenever there is an id to map.
  auto refused = myplugin::RemapCompileOptionDevices(options, refuse);
  bool any_id = false;
  if (read.ok()) {
    for (const auto& replica : read.value()) any_id = any_id || !replica.empty();
    Require(refused.ok() != any_id, "a map that refuses every id was not asked, or its refusal was lost");
    if (any_id) Require(refused.status().code() == myplugin::Code::kNotFound, "the map's error was replaced");
  } else {
    Require(!refused.ok() || same.ok(), "options that remapping refuses were accepted with another map");
  }

  auto canonical = myplugin::CanonicalCompileOptions(options);
  if (canonical.ok()) {
    auto again = myplugin::CanonicalCompileOptions(canonical.value());
    Require(again.ok() && again.value() == canonical.value(), "canonical options are not a fixed point");
    auto ids = myplugin::ReadCompileOptionDevices(canonical.value());
    Require(ids.ok() == read.ok() && (!ids.ok() || ids.value() == read.value()),
            "canonicalizing changed the device assignment");
  } else {
    RequireRefusal(canonical.status());
  }

  auto bare = myplugin::RemapDeviceAssignment(options, identity);
  if (bare.ok()) {
    auto twice = myplugin::RemapDeviceAssignment(bare.value(), identity);
    Require(twice.ok() && twice.value() == bare.value(), "a remapped device assignment is not a fixed point");
  } else {
    RequireRefusal(bare.status());
  }
  return 0;
}
