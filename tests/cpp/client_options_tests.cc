// ParseClientOptions (pjrt/client_options.h): defaults, the environment,
// explicit create options winning over it, and clear refusals of bad values.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "pjrt/client_options.h"

using myplugin::ClientOptions;
using myplugin::Code;
using myplugin::ParseClientOptions;
using myplugin::StatusOr;

namespace {

PJRT_NamedValue Int(const char* name, int64_t v) {
  PJRT_NamedValue n{};
  n.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  n.name = name;
  n.name_size = std::strlen(name);
  n.type = PJRT_NamedValue_kInt64;
  n.int64_value = v;
  n.value_size = 1;
  return n;
}

PJRT_NamedValue Str(const char* name, const char* v) {
  PJRT_NamedValue n = Int(name, 0);
  n.type = PJRT_NamedValue_kString;
  n.string_value = v;
  n.value_size = std::strlen(v);
  return n;
}

myplugin::EnvLookup Env(std::map<std::string, std::string> vars) {
  auto holder = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [holder](const char* name) -> const char* {
    auto it = holder->find(name);
    return it == holder->end() ? nullptr : it->second.c_str();
  };
}

StatusOr<ClientOptions> Parse(std::vector<PJRT_NamedValue> values, std::map<std::string, std::string> env = {}) {
  return ParseClientOptions(values.data(), values.size(), Env(std::move(env)));
}

bool Mentions(const StatusOr<ClientOptions>& r, const char* text) {
  return r.status().message().find(text) != std::string::npos;
}

void TestDefaults() {
  auto r = Parse({});
  CHECK(r.ok());
  CHECK(r.value().num_devices == 1);
  CHECK(r.value().num_nodes == -1);
}

void TestEnvironment() {
  auto r = Parse({}, {{"MYPLUGIN_NUM_DEVICES", "8"}});
  CHECK(r.ok() && r.value().num_devices == 8);
  for (const char* bad : {"0", "-2", "abc", "4x", "99999999999999999999", "5000"}) {
    auto b = Parse({}, {{"MYPLUGIN_NUM_DEVICES", bad}});
    CHECK(!b.ok());
    CHECK(b.status().code() == Code::kInvalidArgument);
    CHECK(Mentions(b, "MYPLUGIN_NUM_DEVICES"));
  }
}

void TestOptions() {
  auto r = Parse({Int("num_devices", 4)}, {{"MYPLUGIN_NUM_DEVICES", "8"}});
  CHECK(r.ok() && r.value().num_devices == 4);  // explicit option wins
  auto s = Parse({Str("num_devices", "3")});
  CHECK(s.ok() && s.value().num_devices == 3);  // jax_pjrt_client_create_options gives strings
  auto bad = Parse({Str("num_devices", "three")});
  CHECK(!bad.ok() && Mentions(bad, "num_devices"));
  auto zero = Parse({Int("num_devices", 0)});
  CHECK(!zero.ok() && zero.status().code() == Code::kInvalidArgument);
  auto unknown = Parse({Int("num_devies", 2)});
  CHECK(!unknown.ok() && Mentions(unknown, "num_devies") && Mentions(unknown, "accepted"));
  auto single = Parse({Int("node_id", 0), Int("num_nodes", 1)});
  CHECK(single.ok() && single.value().num_nodes == 1 && single.value().node_id == 0);
}


// local_device_ids reach the client as the create option visible_devices
// (jax_plugin.distributed.client_options), never through the environment.
void TestVisibleDevices() {
  const int64_t ids[] = {2, 0};
  PJRT_NamedValue list = Int("visible_devices", 0);
  list.type = PJRT_NamedValue_kInt64List;
  list.int64_array_value = ids;
  list.value_size = 2;
  auto r = Parse({list}, {{"MYPLUGIN_VISIBLE_DEVICES", "5"}});
  CHECK(r.ok());
  CHECK((r.value().visible_devices == std::vector<int64_t>{2, 0}));
  CHECK(Parse({}, {{"MYPLUGIN_VISIBLE_DEVICES", "5"}}).value().visible_devices.empty());
  auto wrong = Parse({Int("visible_devices", 1)});
  CHECK(!wrong.ok() && wrong.status().code() == Code::kInvalidArgument && Mentions(wrong, "list of integers"));
  const int64_t negative[] = {-1};
  list.int64_array_value = negative;
  list.value_size = 1;
  auto bad = Parse({list});
  CHECK(!bad.ok() && bad.status().code() == Code::kInvalidArgument && Mentions(bad, "negative device id: -1"));
}

// jax_pjrt_client_create_options for the CUDA engine's memory: typed (a
// dict) or text ("memory_fraction:0.5"), winning over jax's variables.
void TestGpuMemoryOptions() {
  PJRT_NamedValue fraction = Str("memory_fraction", "0.4");
  PJRT_NamedValue prealloc = Str("preallocate", "false");
  PJRT_NamedValue allocator = Str("allocator", "BFC");
  PJRT_NamedValue collective = Int("collective_memory_size", 1 << 20);
  std::vector<PJRT_NamedValue> given = {fraction, prealloc, allocator, collective};
  StatusOr<ClientOptions> r = ParseClientOptions(
      given.data(), given.size(),
      Env({{"XLA_CLIENT_MEM_FRACTION", "0.9"}, {"XLA_PYTHON_CLIENT_PREALLOCATE", "true"}}));
  CHECK(r.ok());
  const myplugin::GpuMemorySettings& m = r.value().settings.gpu_memory;
  CHECK(*m.memory_fraction == 0.4 && !*m.preallocate && m.allocator == "bfc" && *m.collective_memory_bytes == 1 << 20);

  PJRT_NamedValue typed = Int("memory_fraction", 0);
  typed.type = PJRT_NamedValue_kFloat;
  typed.float_value = 0.25f;
  PJRT_NamedValue flag = Int("preallocate", 0);
  flag.type = PJRT_NamedValue_kBool;
  flag.bool_value = true;
  std::vector<PJRT_NamedValue> typed_given = {typed, flag};
  r = ParseClientOptions(typed_given.data(), typed_given.size(), Env({}));
  CHECK(r.ok() && *r.value().settings.gpu_memory.memory_fraction == 0.25f && *r.value().settings.gpu_memory.preallocate);

  for (PJRT_NamedValue bad : {Str("memory_fraction", "2"), Str("allocator", "fast"), Int("collective_memory_size", -1),
                              Int("memory_fraction", 1)}) {
    StatusOr<ClientOptions> refused = ParseClientOptions(&bad, 1, Env({}));
    CHECK(!refused.ok() && refused.status().code() == Code::kInvalidArgument);
    CHECK(!refused.ok() && refused.status().message().find(std::string("'") + bad.name + "'") != std::string::npos);
  }
}

}  // namespace

void RunClientOptionsTests() {
  TestDefaults();
  TestEnvironment();
  TestOptions();
  TestVisibleDevices();
  TestGpuMemoryOptions();
}
