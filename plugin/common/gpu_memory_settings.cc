#include "common/gpu_memory_settings.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "common/parse_int.h"

namespace myplugin {

Status SetGpuAllocator(const std::string& text, const std::string& source, GpuMemorySettings* s) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string accepted;
  for (const char* a : kGpuAllocators) {
    if (lower == a) {
      s->allocator = lower;
      return OkStatus();
    }
    accepted += std::string(accepted.empty() ? "" : ", ") + a;
  }
  return InvalidArgument(source + "='" + text + "' is not an allocator: " + accepted);
}

Status SetGpuMemoryFractionValue(double value, const std::string& source, GpuMemorySettings* s) {
  if (!(value > 0 && value <= 1)) {
    return InvalidArgument(source + "=" + std::to_string(value) +
                           " is not a share of the GPU's memory: a number above 0 and at most 1");
  }
  s->memory_fraction = value;
  return OkStatus();
}

Status SetGpuMemoryFraction(const std::string& text, const std::string& source, GpuMemorySettings* s) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  // Python's float() allows surrounding blanks; so do we.
  while (end != nullptr && *end != '\0' && std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (text.empty() || end == text.c_str() || *end != '\0' || errno != 0 || !std::isfinite(v) || !(v > 0 && v <= 1)) {
    return InvalidArgument(source + "='" + text +
                           "' is not a share of the GPU's memory: a number above 0 and at most 1 (0.75 is the "
                           "engine's default)");
  }
  s->memory_fraction = v;
  return OkStatus();
}

void SetGpuPreallocate(const std::string& text, GpuMemorySettings* s) {
  s->preallocate = !(text == "false" || text == "False" || text == "0");
}

Status SetGpuCollectiveMemoryBytes(int64_t bytes, const std::string& source, GpuMemorySettings* s) {
  if (bytes < 0) {
    return InvalidArgument(source + "=" + std::to_string(bytes) + " is not a size: 0 or more bytes");
  }
  s->collective_memory_bytes = bytes;
  return OkStatus();
}

Status SetGpuCollectiveMemoryMiB(const std::string& text, const std::string& source, GpuMemorySettings* s) {
  int64_t mib = 0;
  if (!ParseInt64(text, &mib) || mib < 0 || mib > (int64_t{1} << 40)) {
    return InvalidArgument(source + "='" + text + "' is not a whole number of MiB, 0 or more");
  }
  s->collective_memory_bytes = mib << 20;
  return OkStatus();
}

Status CheckGpuMemoryShare(int64_t bytes_limit, const GpuMemorySettings& s) {
  if (bytes_limit <= 0 || bytes_limit >= kMinGpuMemoryShareBytes) return OkStatus();
  const std::string fraction = s.memory_fraction.has_value()
                                   ? "XLA_CLIENT_MEM_FRACTION=" + std::to_string(*s.memory_fraction)
                                   : "the engine's default memory fraction";
  return FailedPrecondition("the CUDA engine may use " + std::to_string(bytes_limit >> 20) + " MiB of this GPU (" +
                            fraction + "), below the " + std::to_string(kMinGpuMemoryShareBytes >> 20) +
                            " MiB it needs: give each process a larger share (fewer processes on the GPU, or a "
                            "larger XLA_CLIENT_MEM_FRACTION)");
}

}  // namespace myplugin
