// Device ids inside serialized XLA protos (pjrt/device_assignment.h), on
// compile options written byte by byte here from the protobuf wire format
// (field numbers as in xla's compile_options.proto and xla_data.proto).
#include <string>
#include <vector>

#include "check.h"
#include "pjrt/device_assignment.h"

namespace {

using myplugin::StatusOr;

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

std::string Field(int number, const std::string& payload) {  // length-delimited
  return Varint((static_cast<uint64_t>(number) << 3) | 2) + Varint(payload.size()) + payload;
}

std::string PackedIds(const std::vector<uint64_t>& ids) {  // ComputationDevice.replica_device_ids = 1
  std::string packed;
  for (uint64_t id : ids) packed += Varint(id);
  return Field(1, packed);
}

// DeviceAssignmentProto: replica_count = 1, computation_count = 2, computation_devices = 3.
std::string Assignment(const std::vector<std::string>& computations, int replicas) {
  std::string da = "\x08" + Varint(replicas) + "\x10" + Varint(computations.size());
  for (const auto& c : computations) da += Field(3, c);
  return da;
}

// CompileOptionsProto.executable_build_options = 3 holding ExecutableBuildOptionsProto's
// num_replicas = 4 (a varint) and device_assignment = 9; plus a field of its own (5) after it.
std::string CompileOptions(const std::string& assignment) {
  std::string build = "\x20\x02" + Field(9, assignment);
  return Field(3, build) + "\x28\x01";
}

using Matrix = std::vector<std::vector<int64_t>>;

void TestRead() {
  // Computation 0 runs replicas on devices 0 and 2, computation 1 on 1 and 3.
  std::string options = CompileOptions(Assignment({PackedIds({0, 2}), PackedIds({1, 3})}, 2));
  auto devices = myplugin::ReadCompileOptionDevices(options);
  CHECK(devices.ok() && devices.value() == (Matrix{{0, 1}, {2, 3}}));  // [replica][computation]
  auto none = myplugin::ReadCompileOptionDevices(Field(3, "\x20\x01") + "\x28\x01");
  CHECK(none.ok() && none.value().empty());
}

void TestRemap() {
  std::string options = CompileOptions(Assignment({PackedIds({0, 1, 2})}, 3));
  auto plus = [](int64_t id) -> StatusOr<int64_t> { return id + 126; };  // 128 needs two varint bytes
  auto remapped = myplugin::RemapCompileOptionDevices(options, plus);
  CHECK(remapped.ok());
  // Only the ids changed: everything else is byte for byte what was written.
  CHECK(remapped.ok() && remapped.value() == CompileOptions(Assignment({PackedIds({126, 127, 128})}, 3)));
  // One varint per id (unpacked, also valid proto): each comes back as a
  // packed field of one id, which a parser concatenates.
  std::string unpacked = "\x08\x05\x08\x07";
  auto packed = myplugin::RemapDeviceAssignment(Assignment({unpacked}, 2), [](int64_t id) -> StatusOr<int64_t> {
    return id * 2;
  });
  CHECK(packed.ok() && packed.value() == Assignment({PackedIds({10}) + PackedIds({14})}, 2));
  auto read = myplugin::ReadCompileOptionDevices(CompileOptions(packed.value()));
  CHECK(read.ok() && read.value() == (Matrix{{10}, {14}}));
  // Options without an assignment come back unchanged.
  std::string bare = Field(3, "\x20\x01") + "\x28\x01";
  CHECK(myplugin::RemapCompileOptionDevices(bare, plus).value() == bare);
}

void TestRefusals() {
  auto unknown = [](int64_t id) -> StatusOr<int64_t> {
    if (id == 3) return myplugin::InvalidArgument("device 3 is not in this job");
    return id;
  };
  auto st = myplugin::RemapCompileOptionDevices(CompileOptions(Assignment({PackedIds({0, 3})}, 2)), unknown);
  CHECK(!st.ok() && st.status().message() == "device 3 is not in this job");
  // A length running past the end, a truncated varint, a ragged assignment.
  std::string options = CompileOptions(Assignment({PackedIds({0, 1})}, 2));
  auto cut = myplugin::ReadCompileOptionDevices(options.substr(0, options.size() - 4));
  CHECK(!cut.ok() && cut.status().message().find("malformed serialized proto") != std::string::npos);
  CHECK(!myplugin::RemapDeviceAssignment("\x08\x80", unknown).ok());
  auto ragged = myplugin::ReadCompileOptionDevices(CompileOptions(Assignment({PackedIds({0, 1}), PackedIds({2})}, 2)));
  CHECK(!ragged.ok() && ragged.status().message().find("ragged") != std::string::npos);
}

void TestCanonicalOrder() {
  // DebugOptions (ExecutableBuildOptionsProto.debug_options = 3) with the
  // same two fields in either order canonicalize to the same bytes.
  std::string a = "\x08\x01", b = Field(2, "xla_flag");
  std::string one = Field(3, Field(3, a + b)), two = Field(3, Field(3, b + a));
  CHECK(one != two);
  auto c1 = myplugin::CanonicalCompileOptions(one), c2 = myplugin::CanonicalCompileOptions(two);
  CHECK(c1.ok() && c2.ok() && c1.value() == c2.value());
  CHECK(c1.value().size() == one.size());
}

void TestWriteAssignment() {
  // Two replicas of three computations, [replica][computation]: written as
  // replica_count, computation_count, then each computation's device per replica.
  std::string written = myplugin::WriteDeviceAssignment(Matrix{{4, 5, 6}, {7, 8, 9}});
  CHECK(written == Assignment({PackedIds({4, 7}), PackedIds({5, 8}), PackedIds({6, 9})}, 2));
  // It reads back through the compile options as it was given.
  auto back = myplugin::ReadCompileOptionDevices(CompileOptions(written));
  CHECK(back.ok() && back.value() == (Matrix{{4, 5, 6}, {7, 8, 9}}));
}

void TestWholeProgramModule() {
  // HloModuleProtoWithConfig: hlo_module = 1, config = 2; the config holds
  // entry_computation_layout = 1, replica_count = 4 and num_partitions = 5.
  std::string layout = Field(1, "layout");
  std::string config = layout + "\x20\x02" + "\x28\x01" + "\x38\x01";  // 2 replicas, 1 partition, field 7 set
  std::string engine = Field(1, "local module") + Field(2, config) + Field(3, "other");
  auto whole = myplugin::WholeProgramModule(engine, "whole module", 1, 8);
  CHECK(whole.ok());
  // The module replaced, the counts the whole program's, every other byte kept.
  CHECK(whole.value() == Field(1, "whole module") + Field(2, layout + "\x38\x01" + "\x20\x01" + "\x28\x08") +
                             Field(3, "other"));
  // No module to replace: refused, not made up.
  CHECK(!myplugin::WholeProgramModule(Field(2, config), "whole module", 1, 8).ok());
  CHECK(!myplugin::WholeProgramModule("\x0a\x05" "ab", "whole module", 1, 8).ok());  // truncated
}

void TestLocalProgramAsWhole() {
  // HloModuleProto: name = 2, spmd_output_sharding = 12, spmd_parameters_shardings = 14.
  std::string config = std::string("\x20\x02") + "\x28\x01";  // 2 replicas, 1 partition
  std::string local = Field(2, "local") + Field(12, "local out") + Field(3, "code");
  std::string engine = Field(1, local) + Field(2, config);
  std::string partitioned = Field(2, "whole") + Field(14, "param 0") + Field(12, "out") + Field(14, "param 1");
  auto whole = myplugin::LocalProgramAsWhole(engine, partitioned, 1, 4);
  CHECK(whole.ok());
  // The local module's own code and name, the partitioner's shardings in
  // place of its own, the whole program's counts.
  CHECK(whole.value() == Field(1, Field(2, "local") + Field(3, "code") + Field(14, "param 0") + Field(12, "out") +
                                      Field(14, "param 1")) +
                             Field(2, std::string("\x20\x01") + "\x28\x04"));
  CHECK(!myplugin::LocalProgramAsWhole(Field(2, config), partitioned, 1, 4).ok());
}

}  // namespace

void RunDeviceAssignmentTests() {
  TestLocalProgramAsWhole();
  TestWriteAssignment();
  TestWholeProgramModule();
  TestRead();
  TestRemap();
  TestRefusals();
  TestCanonicalOrder();
}
