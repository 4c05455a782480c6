// Unit tests of the GPU targets that myplugin compiles for without a GPU
// (engine/gpu_target.h, pjrt/gpu_target_options.h) and of the check that a
// target's serialized executable makes before it loads
// (pjrt/serialized_executable.h).
//
// The figures below are the GPUs' published ones, written out again here
// (NVIDIA's data sheets; the CUDA C++ Programming Guide's table per compute
// capability; Chips and Cheese's B200 article for its SMs, L2 and clock), so
// that a change to the one table in gpu_target.cc shows up as a failure.
#include <string>
#include <vector>

#include "check.h"
#include "engine/gpu_target.h"
#include "pjrt/gpu_target_options.h"
#include "pjrt/serialized_executable.h"

using namespace myplugin;

namespace {

bool Mentions(const Status& st, const std::string& text) { return st.message().find(text) != std::string::npos; }
bool Contains(const std::string& s, const std::string& text) { return s.find(text) != std::string::npos; }

constexpr int64_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

struct Published {
  const char* name;
  const char* kind;
  int major, minor, sms, fp32;
  int64_t memory;
  double bandwidth;
  int64_t l2;
  double clock;
  int64_t smem_sm, smem_optin;
  int threads_sm;
};

const Published kPublished[] = {
    {"a100", "NVIDIA A100-SXM4-80GB", 8, 0, 108, 64, 80 * GiB, 2039e9, 40 * MiB, 1.41, 164 * KiB, 163 * KiB, 2048},
    {"l4", "NVIDIA L4", 8, 9, 58, 128, 24 * GiB, 300e9, 48 * MiB, 2.04, 100 * KiB, 99 * KiB, 1536},
    {"h100", "NVIDIA H100 80GB HBM3", 9, 0, 132, 128, 80 * GiB, 3.35e12, 50 * MiB, 1.98, 228 * KiB, 227 * KiB, 2048},
    {"h200", "NVIDIA H200", 9, 0, 132, 128, 141 * GiB, 4.8e12, 60 * MiB, 1.98, 228 * KiB, 227 * KiB, 2048},
    {"b200", "NVIDIA B200", 10, 0, 148, 128, 180 * GiB, 8e12, 126 * MiB, 1.965, 228 * KiB, 227 * KiB, 2048},
};

PJRT_NamedValue Str(const char* name, const std::string& value) {
  PJRT_NamedValue v{};
  v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v.name = name;
  v.name_size = std::string(name).size();
  v.type = PJRT_NamedValue_kString;
  v.string_value = value.data();
  v.value_size = value.size();
  return v;
}

SerializedExecutable H100Blob() {
  SerializedExecutable e;
  e.platform_version = "myplugin 0.1.0 (build x) for XLA's CUDA engine (PJRT C API 0.1)";
  e.for_target = true;
  e.target_device_kind = "NVIDIA H100 80GB HBM3";
  e.target_cc_major = 9;
  e.target_topology = "1x2x4";
  return e;
}

TargetLoadSite H100Site() {
  TargetLoadSite s;
  s.cuda_engine = true;
  s.engine_description = "XLA's CUDA engine";
  s.writer = "myplugin 0.1.0 (build x) for XLA's CUDA engine (PJRT C API 0.1)";
  s.device_kind = "NVIDIA H100 80GB HBM3";
  s.processes = 2;
  s.devices_per_process = 4;
  return s;
}

}  // namespace

void RunGpuTargetTests() {
  {  // the named GPUs, figure by figure
    CHECK(KnownGpus().size() == sizeof(kPublished) / sizeof(kPublished[0]));
    for (const Published& p : kPublished) {
      StatusOr<GpuSpec> s = FindGpu(p.name);
      CHECK(s.ok());
      if (!s.ok()) continue;
      const GpuSpec& g = s.value();
      CHECK(g.device_kind == p.kind);
      CHECK(g.cc_major == p.major && g.cc_minor == p.minor);
      CHECK(g.sm_count == p.sms && g.fp32_cores_per_sm == p.fp32);
      CHECK(g.memory_bytes == p.memory && g.memory_bandwidth_bytes_per_s == p.bandwidth);
      CHECK(g.l2_cache_bytes == p.l2 && g.boost_clock_ghz == p.clock);
      CHECK(g.shared_memory_per_sm == p.smem_sm && g.shared_memory_per_block_optin == p.smem_optin);
      CHECK(g.shared_memory_per_block == 48 * KiB);
      CHECK(g.threads_per_sm == p.threads_sm && g.threads_per_block == 1024 && g.threads_per_warp == 32);
      CHECK(g.registers_per_sm == 65536 && g.registers_per_block == 65536);
      CHECK(g.block_dim_x == 2147483647 && g.block_dim_y == 65535 && g.block_dim_z == 65535);
    }
    CHECK(FindGpu("H100").ok());  // names are case-insensitive
    StatusOr<GpuSpec> none = FindGpu("v100");
    CHECK(!none.ok() && Mentions(none.status(), "a100, l4, h100, h200, b200") && Mentions(none.status(), "target_config"));
  }
  {  // the text the CUDA engine reads: every field it needs, and the target read back from it
    GpuSpec h100 = FindGpu("h100").value();
    std::string text = TargetConfigText(h100, 13);
    for (const char* field : {"threads_per_warp: 32", "block_dim_limit_x: 2147483647", "core_count: 132",
                              "device_memory_size: 85899345920", "shared_memory_per_block_optin: 232448",
                              "cuda_compute_capability { major: 9 minor: 0 }", "l2_cache_size: 52428800",
                              "memory_bandwidth: 3350000000000", "clock_rate_ghz: 1.98",
                              "device_description_str: \"NVIDIA H100 80GB HBM3\"", "runtime_version { major: 13"}) {
      CHECK(Contains(text, field));
    }
    StatusOr<GpuTargetId> id = TargetIdOfConfig(text);
    CHECK(id.ok() && id.value().device_kind == "NVIDIA H100 80GB HBM3" && id.value().cc_major == 9 &&
          id.value().cc_minor == 0);
    CHECK(id.ok() && id.value().ToString() == "NVIDIA H100 80GB HBM3 (sm_90)");
    CHECK(!TargetIdOfConfig("gpu_device_info { core_count: 1 }").ok());
    StatusOr<GpuTargetId> no_cc = TargetIdOfConfig("device_description_str: \"X\"");
    CHECK(!no_cc.ok() && Mentions(no_cc.status(), "cuda_compute_capability"));
  }
  {  // topologies
    StatusOr<GpuTopologyShape> t = ParseGpuTopology("1x2x8");
    CHECK(t.ok() && t.value().processes() == 2 && t.value().devices() == 16 && t.value().ToString() == "1x2x8");
    for (const char* bad : {"", "2x8", "1x2x0", "1x2x8x1", "ax2x8", "1x-2x8", "1x2x8 "}) {
      StatusOr<GpuTopologyShape> b = ParseGpuTopology(bad);
      CHECK(!b.ok() && Mentions(b.status(), "<slices>x<hosts>x<GPUs per host>"));
    }
  }
  {  // jax's keyword options
    std::string topology = "1x2x4", gpu = "l4";
    std::vector<PJRT_NamedValue> v = {Str("topology", topology), Str("gpu", gpu)};
    StatusOr<GpuTargetOptions> o = ParseGpuTargetOptions("", v.data(), v.size(), 12);
    CHECK(o.ok() && o.value().id.device_kind == "NVIDIA L4" && o.value().shape.hosts == 2);
    CHECK(o.ok() && Contains(o.value().target_config, "runtime_version { major: 12"));
    // A user's target_config as jax's CUDA plugin takes it, passed on unchanged.
    std::string config = TargetConfigText(FindGpu("a100").value(), 13);
    v = {Str("topology", topology), Str("target_config", config)};
    o = ParseGpuTargetOptions("", v.data(), v.size(), 13);
    CHECK(o.ok() && o.value().target_config == config && o.value().id.cc_major == 8);
    // The positional name in the topology's form.
    v = {Str("gpu", gpu)};
    CHECK(ParseGpuTargetOptions("1x1x2", v.data(), v.size(), 13).ok());
    v = {Str("topology", topology), Str("gpu", gpu), Str("target_config", config)};
    StatusOr<GpuTargetOptions> both = ParseGpuTargetOptions("", v.data(), v.size(), 13);
    CHECK(!both.ok() && Mentions(both.status(), "both gpu and target_config"));
    v = {Str("topology", topology)};
    StatusOr<GpuTargetOptions> neither = ParseGpuTargetOptions("", v.data(), v.size(), 13);
    CHECK(!neither.ok() && Mentions(neither.status(), "no GPU given"));
    v = {Str("gpu", gpu)};
    CHECK(!ParseGpuTargetOptions("", v.data(), v.size(), 13).ok());  // no topology
    v = {Str("topology", topology), Str("gpu", gpu), Str("chips", gpu)};
    StatusOr<GpuTargetOptions> unknown = ParseGpuTargetOptions("", v.data(), v.size(), 13);
    CHECK(!unknown.ok() && Mentions(unknown.status(), "unknown option 'chips'"));
    PJRT_NamedValue number{};
    number.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    number.name = "gpu";
    number.name_size = 3;
    number.type = PJRT_NamedValue_kInt64;
    number.int64_value = 100;
    v = {Str("topology", topology), number};
    StatusOr<GpuTargetOptions> typed = ParseGpuTargetOptions("", v.data(), v.size(), 13);
    CHECK(!typed.ok() && Mentions(typed.status(), "must be a string"));
  }
  {  // a target's executable loads only where it was compiled for
    CHECK(CheckTargetFits(H100Blob(), H100Site()).ok());
    TargetLoadSite cpu;
    cpu.engine_description = "XLA's CPU engine (/x/pjrt_c_api_cpu_plugin.so)";
    Status st = CheckTargetFits(H100Blob(), cpu);
    CHECK(!st.ok() && Mentions(st, "NVIDIA H100 80GB HBM3 (sm_90)") && Mentions(st, "XLA's CPU engine"));
    TargetLoadSite a100 = H100Site();
    a100.device_kind = "NVIDIA A100-SXM4-80GB";
    st = CheckTargetFits(H100Blob(), a100);
    CHECK(!st.ok() && Mentions(st, "this process's GPUs are NVIDIA A100-SXM4-80GB"));
    TargetLoadSite one_host = H100Site();
    one_host.processes = 1;
    st = CheckTargetFits(H100Blob(), one_host);
    CHECK(!st.ok() && Mentions(st, "2 processes of 4 GPUs") && Mentions(st, "1 processes of 4 GPUs"));
    TargetLoadSite other_build = H100Site();
    other_build.writer = "myplugin 0.1.0 (build y) for XLA's CUDA engine (PJRT C API 0.1)";
    st = CheckTargetFits(H100Blob(), other_build);
    CHECK(!st.ok() && Mentions(st, "build y"));
  }
  {  // the target and every process's part survive the envelope
    SerializedExecutable in = H100Blob();
    in.multiprocess = true;
    in.assignment = {{0, 1, 2, 3, 4, 5, 6, 7}};
    in.process_executables = {"p0", "p1"};
    in.process_device_orders = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    in.process_engine_ids = {{0, 1, 2, 3}, {0, 1, 2, 3}};
    in.process_compile_options = {"o0", "o1"};
    StatusOr<SerializedExecutable> out = DecodeSerializedExecutable(EncodeSerializedExecutable(in));
    CHECK(out.ok());
    if (out.ok()) {
      const SerializedExecutable& e = out.value();
      CHECK(e.for_target && e.target_device_kind == in.target_device_kind && e.target_cc_major == 9);
      CHECK(e.target_topology == "1x2x4" && e.process_executables == in.process_executables);
      CHECK(e.process_device_orders == in.process_device_orders && e.process_engine_ids == in.process_engine_ids);
      CHECK(e.process_compile_options == in.process_compile_options);
    }
  }
}
