// Device ids inside serialized XLA protos. jax names devices by their
// global id (process p's local device j is p*D + j); the engine knows only
// its local devices, numbered 0..D-1. Compile options going to the engine
// and device assignments coming back are rewritten at the protobuf wire
// level (no protobuf library): only the ids change, every other byte is
// copied as it is.
//
// Field numbers are those of xla's compile_options.proto / xla_data.proto:
// CompileOptionsProto.executable_build_options = 3;
// ExecutableBuildOptionsProto.device_assignment = 9;
// DeviceAssignmentProto.computation_devices = 3;
// ComputationDevice.replica_device_ids = 1 (packed int64);
// ExecutableBuildOptionsProto.debug_options = 3.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace myplugin {

using DeviceIdMap = std::function<StatusOr<int64_t>(int64_t)>;

// Rewrites the ids of the device assignment inside serialized compile
// options. Options without a device assignment come back unchanged.
StatusOr<std::string> RemapCompileOptionDevices(const std::string& compile_options, const DeviceIdMap& map);

// The device assignment inside serialized compile options, as
// [replica][computation] device ids; empty when the options carry none.
StatusOr<std::vector<std::vector<int64_t>>> ReadCompileOptionDevices(const std::string& compile_options);

// The compile options with the fields of their DebugOptions in a fixed
// order: jaxlib serializes DebugOptions' map fields in hash order, so equal
// options can differ byte for byte. A cache key, never sent to the engine.
StatusOr<std::string> CanonicalCompileOptions(const std::string& compile_options);

// Rewrites the ids of a serialized DeviceAssignmentProto.
StatusOr<std::string> RemapDeviceAssignment(const std::string& device_assignment, const DeviceIdMap& map);

// A DeviceAssignmentProto of [replica][computation] device ids.
std::string WriteDeviceAssignment(const std::vector<std::vector<int64_t>>& assignment);

// `hlo_with_config` (an HloModuleProtoWithConfig: the module, field 1, and
// its HloModuleConfigProto, field 2) with `module` (an HloModuleProto) as its
// module and the config's replica_count (4) and num_partitions (5) set.
StatusOr<std::string> WholeProgramModule(const std::string& hlo_with_config, const std::string& module,
                                         int64_t replicas, int64_t partitions);

// The same, keeping `hlo_with_config`'s own module (a local program, with
// our collectives) but with the partitioner's parameter and output
// shardings (HloModuleProto fields 14 and 12) of `partitioned` (the whole
// program after SPMD partitioning) in place of its own: what jax reads
// back as the executable's shardings, while its text shows the code made.
StatusOr<std::string> LocalProgramAsWhole(const std::string& hlo_with_config, const std::string& partitioned,
                                          int64_t replicas, int64_t partitions);

}  // namespace myplugin
