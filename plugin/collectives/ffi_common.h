// What the FFI handlers of both engines share: element types, errors, and
// where a device stands in the job and in its replica group.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "collectives/combined_operands.h"
#include "collectives/device_ids.h"
#include "collectives/device_collectives.h"
#include "collectives/dtype.h"
#include "common/status.h"
#include "xla/ffi/api/ffi.h"

namespace myplugin::collectives {

StatusOr<DataType> FromFfi(xla::ffi::DataType t);
xla::ffi::Error ToFfi(const Status& st);

// The device group (one of `replica_groups`) that holds `device`.
StatusOr<std::vector<int>> GroupOf(xla::ffi::Span<const int64_t> groups, int64_t group_size, int device);

// A call on replica groups, decoded: element type, reduction (kNone when
// `reduction` is empty) and the group of device `ordinal`.
struct GroupedCall {
  DataType type;
  Reduction reduction;
  std::vector<int> device_group;
};
StatusOr<GroupedCall> DecodeGrouped(int32_t ordinal, xla::ffi::DataType type, std::string_view reduction,
                                    xla::ffi::Span<const int64_t> groups, int64_t group_size);

// The operands of a call that may be combined (combined_operands.h): one
// result per operand, so the first results.size() arguments are the data
// and any after them only order the call (the rewrite's previous collective).
StatusOr<std::vector<CombinedOperand>> CallOperands(const xla::ffi::RemainingArgs& args,
                                                    const xla::ffi::RemainingRets& results);

// Device `ordinal` meets the other local devices of `device_group`; the last to
// arrive runs `op` for all of them, and each gets its status.
Status MeetLocalDevices(int32_t ordinal, const std::vector<int>& device_group, const void* send, void* recv,
                        const std::function<Status(DeviceCollectives&, const DeviceBuffers&)>& op);

}  // namespace myplugin::collectives
