// ParseSettings (common/settings.h): each variable's defaults and values,
// malformed values refused with the variable named, and the list of the
// variables read matching what the parser asks for.
#include <map>
#include <memory>
#include <set>
#include <string>

#include "check.h"
#include "common/settings.h"

using myplugin::Code;
using myplugin::Settings;
using myplugin::StatusOr;

namespace {

StatusOr<Settings> Parse(std::map<std::string, std::string> vars) {
  auto holder = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return myplugin::ParseSettings([holder](const char* name) -> const char* {
    auto it = holder->find(name);
    return it == holder->end() ? nullptr : it->second.c_str();
  });
}

// Refused as INVALID_ARGUMENT, and the message names the variable and its value.
bool Refused(const char* name, const std::string& value) {
  StatusOr<Settings> r = Parse({{name, value}});
  if (r.ok() || r.status().code() != Code::kInvalidArgument) return false;
  const std::string& m = r.status().message();
  return m.find(std::string(name) + "='" + value + "'") != std::string::npos;
}

void TestDefaults() {
  StatusOr<Settings> r = Parse({});
  CHECK(r.ok());
  const Settings& s = r.value();
  CHECK(s.collective_timeout_s == 300);
  CHECK(s.collective_stall_s == 60);
  CHECK(s.collective_cap_s == 3600);
  CHECK(s.peer_exit_grace_s == 5);
  CHECK(s.straggler_s == 15);
  CHECK(s.trace_buffer == 2000);
  CHECK(s.trace_dir.empty());
  CHECK(s.transport == "auto");
  CHECK(!s.spmd_rewrite_always);
  CHECK(!s.spmd_log);
  CHECK(s.temp_dir == "/tmp");
  // An empty variable reads as unset: a launcher passing it through empty.
  StatusOr<Settings> empty = Parse({{"MYPLUGIN_COLLECTIVE_STALL_SECONDS", ""}, {"MYPLUGIN_TRANSPORT", ""},
                                    {"TMPDIR", ""}, {"MYPLUGIN_STRAGGLER_SECONDS", ""}});
  CHECK(empty.ok());
  CHECK(empty.value().collective_stall_s == 60 && empty.value().transport == "auto");
  CHECK(empty.value().temp_dir == "/tmp" && empty.value().straggler_s == 15);
}

void TestEachVariable() {
  StatusOr<Settings> r = Parse({{"MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS", "3"},
                                {"MYPLUGIN_COLLECTIVE_STALL_SECONDS", "0.25"},
                                {"MYPLUGIN_COLLECTIVE_CAP_SECONDS", "0.05"},
                                {"MYPLUGIN_PEER_EXIT_GRACE_SECONDS", "2"},
                                {"MYPLUGIN_STRAGGLER_SECONDS", "0"},
                                {"MYPLUGIN_TRACE_BUFFER", "16"},
                                {"MYPLUGIN_TRACE_DIR", "/some/dir"},
                                {"MYPLUGIN_TRANSPORT", "hierarchical"},
                                {"MYPLUGIN_SPMD_REWRITE", "always"},
                                {"MYPLUGIN_SPMD_LOG", "1"},
                                {"TMPDIR", "/scratch"}});
  CHECK(r.ok());
  const Settings& s = r.value();
  CHECK(s.collective_timeout_s == 3);
  CHECK(s.collective_stall_s == 0.25);
  CHECK(s.collective_cap_s == 0.05);
  CHECK(s.peer_exit_grace_s == 2);
  CHECK(s.straggler_s == 0);
  CHECK(s.trace_buffer == 16);
  CHECK(s.trace_dir == "/some/dir");
  CHECK(s.transport == "hierarchical");
  CHECK(s.spmd_rewrite_always);
  CHECK(s.spmd_log);
  CHECK(s.temp_dir == "/scratch");
  for (const char* t : {"auto", "shm", "gloo"}) {
    StatusOr<Settings> one = Parse({{"MYPLUGIN_TRANSPORT", t}});
    CHECK(one.ok() && one.value().transport == t);
  }
  // MYPLUGIN_SPMD_LOG=0 is off, as any unset flag.
  StatusOr<Settings> off = Parse({{"MYPLUGIN_SPMD_LOG", "0"}});
  CHECK(off.ok() && !off.value().spmd_log);
  StatusOr<Settings> top = Parse({{"MYPLUGIN_TRACE_BUFFER", "16777216"}});
  CHECK(top.ok() && top.value().trace_buffer == (size_t{1} << 24));
}

void TestBadValues() {
  // Before settings were read once, these fell back to the default in silence.
  for (const char* name : {"MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS", "MYPLUGIN_COLLECTIVE_STALL_SECONDS",
                           "MYPLUGIN_COLLECTIVE_CAP_SECONDS", "MYPLUGIN_PEER_EXIT_GRACE_SECONDS"}) {
    for (const char* bad : {"abc", "0", "-1", "5s", "nan", "inf", "1e300", " "}) CHECK(Refused(name, bad));
  }
  for (const char* bad : {"soon", "-1", "nan", "1e300"}) CHECK(Refused("MYPLUGIN_STRAGGLER_SECONDS", bad));
  for (const char* bad : {"8", "15", "16777217", "2k", "-5"}) CHECK(Refused("MYPLUGIN_TRACE_BUFFER", bad));
  for (const char* bad : {"bogus", "infiniband", "AUTO"}) CHECK(Refused("MYPLUGIN_TRANSPORT", bad));
  for (const char* bad : {"never", "1", "Always"}) CHECK(Refused("MYPLUGIN_SPMD_REWRITE", bad));
  StatusOr<Settings> r = Parse({{"MYPLUGIN_COLLECTIVE_STALL_SECONDS", "abc"}});
  CHECK(!r.ok() && r.status().message() == "MYPLUGIN_COLLECTIVE_STALL_SECONDS='abc' is not a positive number of seconds");
}

// jax's GPU memory variables, by jax's rules (jaxlib's
// generate_pjrt_gpu_plugin_options; tests/test_gpu_memory_settings.py
// compares the two on the same environments), with the variable named in
// every refusal.
void TestGpuMemory() {
  StatusOr<Settings> r = Parse({});
  CHECK(r.ok() && r.value().gpu_memory.allocator == "default");
  CHECK(!r.value().gpu_memory.memory_fraction && !r.value().gpu_memory.preallocate &&
        !r.value().gpu_memory.collective_memory_bytes);
  r = Parse({{"XLA_PYTHON_CLIENT_ALLOCATOR", "Platform"}, {"XLA_CLIENT_MEM_FRACTION", "0.3"},
             {"XLA_PYTHON_CLIENT_PREALLOCATE", "False"}, {"XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB", "12"}});
  CHECK(r.ok());
  const myplugin::GpuMemorySettings& m = r.value().gpu_memory;
  CHECK(m.allocator == "platform");
  CHECK(m.memory_fraction && *m.memory_fraction == 0.3);
  CHECK(m.preallocate && !*m.preallocate);
  CHECK(m.collective_memory_bytes && *m.collective_memory_bytes == 12 << 20);
  // The older name, alone, means the same; both together are refused, as jax refuses them.
  r = Parse({{"XLA_PYTHON_CLIENT_MEM_FRACTION", ".5"}});
  CHECK(r.ok() && *r.value().gpu_memory.memory_fraction == 0.5);
  r = Parse({{"XLA_PYTHON_CLIENT_MEM_FRACTION", ".5"}, {"XLA_CLIENT_MEM_FRACTION", ".5"}});
  CHECK(!r.ok() && r.status().message().find("XLA_PYTHON_CLIENT_MEM_FRACTION") != std::string::npos);
  // jax preallocates for every value but false, False and 0.
  for (const char* yes : {"true", "1", "no", "FALSE"}) {
    r = Parse({{"XLA_PYTHON_CLIENT_PREALLOCATE", yes}});
    CHECK(r.ok() && *r.value().gpu_memory.preallocate);
  }
  for (const char* bad : {"big", "tcmalloc"}) CHECK(Refused("XLA_PYTHON_CLIENT_ALLOCATOR", bad));
  for (const char* bad : {"half", "0", "-0.5", "1.5", "nan", "inf"}) CHECK(Refused("XLA_CLIENT_MEM_FRACTION", bad));
  CHECK(Refused("XLA_PYTHON_CLIENT_MEM_FRACTION", "75%"));
  for (const char* bad : {"1.5", "-1", "lots"}) CHECK(Refused("XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB", bad));
}

// SettingVariables lists exactly the variables the parser asks for: the
// configuration page is checked against that list.
void TestVariablesListed() {
  auto asked = std::make_shared<std::set<std::string>>();
  StatusOr<Settings> r = myplugin::ParseSettings([asked](const char* name) -> const char* {
    asked->insert(name);
    return nullptr;
  });
  CHECK(r.ok());
  const auto& listed = myplugin::SettingVariables();
  CHECK(*asked == std::set<std::string>(listed.begin(), listed.end()));
  CHECK(listed.size() == asked->size());
}

}  // namespace

void RunSettingsTests() {
  TestDefaults();
  TestEachVariable();
  TestBadValues();
  TestGpuMemory();
  TestVariablesListed();
}
