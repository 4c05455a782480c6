// What the FFI handlers of both engines share: element types, errors, and
// where a device stands in the job and in its replica group.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "collectives/device_ids.h"
#include "collectives/dtype.h"
#include "common/status.h"
#include "xla/ffi/api/ffi.h"

namespace myplugin::collectives {

StatusOr<DataType> FromFfi(xla::ffi::DataType t);
xla::ffi::Error ToFfi(const Status& st);

// Where this device stands: its global id, and the job's device layout.
struct Place {
  int global_id;
  int process;
  int devices_per_process;
};
Place PlaceOf(int32_t ordinal);

// The group (clique) of `replica_groups` that holds `device`.
StatusOr<std::vector<int>> GroupOf(xla::ffi::Span<const int64_t> groups, int64_t group_size, int device);

}  // namespace myplugin::collectives
