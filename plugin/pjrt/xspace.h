// A profile's spans as a serialized tensorflow.profiler.XSpace, the format
// that jax's profiler merges from every source and writes to
// *.xplane.pb (TensorBoard's profile plugin reads it; jax turns it into the
// trace.json.gz that Perfetto reads). Written at the protobuf wire level:
// one plane, one line per thread, one event per span, the span's stats as
// the event's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/profile_spans.h"

namespace myplugin {

struct PlaneDescription {
  // "/device:CUSTOM:..." makes jax's trace conversion show the plane
  // beside the host's and the devices' (tsl's kCustomPlanePrefix).
  std::string name;
  int64_t id = 0;
  std::vector<profile::Stat> stats;  // the plane's own
};

// `wall_minus_monotonic_ns` turns the spans' monotonic times into the Unix
// epoch times of XLine.timestamp_ns. `warnings` go to XSpace.warnings.
std::string EncodeXSpace(const PlaneDescription& plane, const profile::Collected& collected,
                         int64_t wall_minus_monotonic_ns, const std::vector<std::string>& warnings);

}  // namespace myplugin
