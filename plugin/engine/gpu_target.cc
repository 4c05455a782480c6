#include "engine/gpu_target.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

namespace myplugin {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;
constexpr int64_t kGiB = 1024 * kMiB;

// Limits that every GPU here shares (CUDA C++ Programming Guide, "Compute
// Capabilities", the table of technical specifications per compute
// capability): warps of 32, blocks of up to 1024 threads, grids of
// 2^31-1 x 65535 x 65535 blocks, 64 K 32-bit registers per SM and per block,
// 48 KiB of shared memory per block without opt-in.
GpuSpec Common() {
  GpuSpec s;
  s.threads_per_warp = 32;
  s.threads_per_block = 1024;
  s.block_dim_x = 2147483647;
  s.block_dim_y = 65535;
  s.block_dim_z = 65535;
  s.registers_per_sm = 64 * 1024;
  s.registers_per_block = 64 * 1024;
  s.shared_memory_per_block = 48 * kKiB;
  return s;
}

// Per compute capability, from the same table: shared memory per SM, the
// most one block may opt in to, resident threads per SM.
void SetComputeCapability(GpuSpec& s, int major, int minor) {
  s.cc_major = major;
  s.cc_minor = minor;
  if (major == 8 && minor == 0) {
    s.shared_memory_per_sm = 164 * kKiB, s.shared_memory_per_block_optin = 163 * kKiB, s.threads_per_sm = 2048;
  } else if (major == 8 && minor == 9) {
    s.shared_memory_per_sm = 100 * kKiB, s.shared_memory_per_block_optin = 99 * kKiB, s.threads_per_sm = 1536;
  } else {  // 9.0 and 10.0
    s.shared_memory_per_sm = 228 * kKiB, s.shared_memory_per_block_optin = 227 * kKiB, s.threads_per_sm = 2048;
  }
}

// Per product, from NVIDIA's data sheets (SXM parts where there are
// several): SMs, FP32 cores per SM, memory (the marketed size, binary units
// as HBM and GDDR are built; CUDA reports a little less), bandwidth, L2,
// boost clock. B200's SM count, L2 and clock are from Chips and Cheese's
// measurement of an HGX B200 ("Nvidia's B200: Keeping the CUDA Juggernaut
// Rolling"): NVIDIA's sheet gives memory and bandwidth only.
std::vector<GpuSpec> MakeKnownGpus() {
  std::vector<GpuSpec> out;
  auto add = [&out](const char* name, const char* kind, int major, int minor, int sms, int fp32, int64_t memory,
                    double bandwidth, int64_t l2, double clock) {
    GpuSpec s = Common();
    s.name = name;
    s.device_kind = kind;
    SetComputeCapability(s, major, minor);
    s.sm_count = sms;
    s.fp32_cores_per_sm = fp32;
    s.memory_bytes = memory;
    s.memory_bandwidth_bytes_per_s = bandwidth;
    s.l2_cache_bytes = l2;
    s.boost_clock_ghz = clock;
    out.push_back(s);
  };
  add("a100", "NVIDIA A100-SXM4-80GB", 8, 0, 108, 64, 80 * kGiB, 2039e9, 40 * kMiB, 1.41);
  add("l4", "NVIDIA L4", 8, 9, 58, 128, 24 * kGiB, 300e9, 48 * kMiB, 2.04);
  add("h100", "NVIDIA H100 80GB HBM3", 9, 0, 132, 128, 80 * kGiB, 3.35e12, 50 * kMiB, 1.98);
  // H200: 141 GB of HBM3e at 4.8 TB/s on GH100 (NVIDIA's sheet); its L2
  // as CUDA reports it on the machine lent to this project (60 MiB).
  add("h200", "NVIDIA H200", 9, 0, 132, 128, 141 * kGiB, 4.8e12, 60 * kMiB, 1.98);
  add("b200", "NVIDIA B200", 10, 0, 148, 128, 180 * kGiB, 8e12, 126 * kMiB, 1.965);
  return out;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// The value after `key` (a text-format field name followed by ':' or '{'),
// or npos: enough to read the two fields that identify a target; the engine
// parses the whole text itself.
size_t FindField(const std::string& text, const std::string& key, size_t from = 0) {
  for (size_t pos = text.find(key, from); pos != std::string::npos; pos = text.find(key, pos + 1)) {
    const bool starts = pos == 0 || !(std::isalnum(static_cast<unsigned char>(text[pos - 1])) || text[pos - 1] == '_');
    size_t after = pos + key.size();
    while (after < text.size() && std::isspace(static_cast<unsigned char>(text[after]))) ++after;
    if (starts && after < text.size() && (text[after] == ':' || text[after] == '{')) return after;
  }
  return std::string::npos;
}

StatusOr<int> IntField(const std::string& text, size_t from, size_t to, const std::string& key) {
  size_t pos = FindField(text, key, from);
  if (pos == std::string::npos || pos > to) {
    return InvalidArgument("target_config: cuda_compute_capability has no " + key);
  }
  ++pos;
  while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  size_t end = pos;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  if (end == pos) return InvalidArgument("target_config: cuda_compute_capability's " + key + " is not a number");
  return std::stoi(text.substr(pos, end - pos));
}

}  // namespace

const std::vector<GpuSpec>& KnownGpus() {
  static const std::vector<GpuSpec>* gpus = new std::vector<GpuSpec>(MakeKnownGpus());
  return *gpus;
}

StatusOr<GpuSpec> FindGpu(const std::string& name) {
  std::string known;
  for (const GpuSpec& s : KnownGpus()) {
    if (s.name == Lower(name)) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  return InvalidArgument("myplugin knows no GPU called '" + name + "' (known: " + known +
                         "); describe another with target_config=<GpuTargetConfigProto text>");
}

std::string TargetConfigText(const GpuSpec& s, int cuda_major) {
  std::ostringstream t;
  t << "gpu_device_info {\n"
    << "  threads_per_block_limit: " << s.threads_per_block << "\n"
    << "  threads_per_warp: " << s.threads_per_warp << "\n"
    << "  shared_memory_per_block: " << s.shared_memory_per_block << "\n"
    << "  shared_memory_per_core: " << s.shared_memory_per_sm << "\n"
    << "  threads_per_core_limit: " << s.threads_per_sm << "\n"
    << "  core_count: " << s.sm_count << "\n"
    << "  fpus_per_core: " << s.fp32_cores_per_sm << "\n"
    << "  block_dim_limit_x: " << s.block_dim_x << "\n"
    << "  block_dim_limit_y: " << s.block_dim_y << "\n"
    << "  block_dim_limit_z: " << s.block_dim_z << "\n"
    << "  memory_bandwidth: " << static_cast<int64_t>(s.memory_bandwidth_bytes_per_s) << "\n"
    << "  l2_cache_size: " << s.l2_cache_bytes << "\n"
    << "  clock_rate_ghz: " << Number(s.boost_clock_ghz) << "\n"
    << "  device_memory_size: " << s.memory_bytes << "\n"
    << "  shared_memory_per_block_optin: " << s.shared_memory_per_block_optin << "\n"
    << "  cuda_compute_capability { major: " << s.cc_major << " minor: " << s.cc_minor << " }\n"
    << "  registers_per_core_limit: " << s.registers_per_sm << "\n"
    << "  registers_per_block_limit: " << s.registers_per_block << "\n"
    << "}\n"
    << "platform_name: \"CUDA\"\n"
    << "device_description_str: \"" << s.device_kind << "\"\n"
    << "runtime_version { major: " << cuda_major << " minor: 0 patch: 0 }\n";
  return t.str();
}

std::string GpuTargetId::ToString() const {
  return device_kind + " (sm_" + std::to_string(cc_major) + std::to_string(cc_minor) + ")";
}

StatusOr<GpuTargetId> TargetIdOfConfig(const std::string& text) {
  GpuTargetId id;
  size_t kind = FindField(text, "device_description_str");
  if (kind == std::string::npos) {
    return InvalidArgument("target_config names no GPU: myplugin needs its device_description_str (the name CUDA "
                           "reports, e.g. \"NVIDIA H100 80GB HBM3\") to check where the program may load");
  }
  size_t open = text.find('"', kind);
  size_t close = open == std::string::npos ? open : text.find('"', open + 1);
  if (close == std::string::npos) return InvalidArgument("target_config: device_description_str is not a string");
  id.device_kind = text.substr(open + 1, close - open - 1);
  size_t cc = FindField(text, "cuda_compute_capability");
  if (cc == std::string::npos || text[cc] != '{') {
    return InvalidArgument("target_config has no cuda_compute_capability { major: .. minor: .. }");
  }
  size_t end = text.find('}', cc);
  StatusOr<int> major = IntField(text, cc, end, "major");
  if (!major.ok()) return major.status();
  StatusOr<int> minor = IntField(text, cc, end, "minor");
  if (!minor.ok()) return minor.status();
  id.cc_major = major.value();
  id.cc_minor = minor.value();
  return id;
}

std::string GpuTopologyShape::ToString() const {
  return std::to_string(slices) + "x" + std::to_string(hosts) + "x" + std::to_string(gpus_per_host);
}

StatusOr<GpuTopologyShape> ParseGpuTopology(const std::string& text) {
  auto bad = [&text] {
    return InvalidArgument("topology='" + text +
                           "': expected '<slices>x<hosts>x<GPUs per host>' with positive numbers, e.g. '1x2x8'");
  };
  int v[3];
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    size_t end = pos;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == pos || end - pos > 6) return bad();
    v[i] = std::stoi(text.substr(pos, end - pos));
    if (v[i] <= 0) return bad();
    if (i < 2 && (end >= text.size() || text[end] != 'x')) return bad();
    if (i == 2 && end != text.size()) return bad();
    pos = end + 1;
  }
  GpuTopologyShape shape;
  shape.slices = v[0];
  shape.hosts = v[1];
  shape.gpus_per_host = v[2];
  return shape;
}

}  // namespace myplugin
