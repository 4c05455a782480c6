#include "common/settings.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/deadline.h"
#include "common/parse_int.h"

namespace myplugin {
namespace {

// Unset and empty read alike: a launcher that passes a variable through
// empty means "not set".
const char* Given(const EnvLookup& getenv, const char* name) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// A whole decimal number of seconds in (min, kMaxWaitSeconds] (or
// [0, ...] when zero_allowed); false for anything else, "inf" and "nan" included.
bool ParseSeconds(const char* text, bool zero_allowed, double* out) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0) return false;
  if (!(zero_allowed ? v >= 0 : v > 0) || !(v <= kMaxWaitSeconds)) return false;
  *out = v;
  return true;
}

Status SecondsSetting(const EnvLookup& getenv, const char* name, double* out) {
  const char* v = Given(getenv, name);
  if (v == nullptr) return OkStatus();
  if (!ParseSeconds(v, /*zero_allowed=*/false, out)) {
    return InvalidArgument(std::string(name) + "='" + v + "' is not a positive number of seconds");
  }
  return OkStatus();
}

// jax's rules (jaxlib's xla_client.generate_pjrt_gpu_plugin_options), with
// an error naming the variable where jax's would only say "could not
// convert string to float".
Status ParseGpuMemory(const EnvLookup& getenv, GpuMemorySettings* s) {
  if (const char* v = Given(getenv, "XLA_PYTHON_CLIENT_ALLOCATOR")) {
    MYPLUGIN_RETURN_IF_ERROR(SetGpuAllocator(v, "XLA_PYTHON_CLIENT_ALLOCATOR", s));
  }
  const char* fraction = Given(getenv, "XLA_CLIENT_MEM_FRACTION");
  if (const char* older = Given(getenv, "XLA_PYTHON_CLIENT_MEM_FRACTION")) {
    if (fraction != nullptr) {
      return InvalidArgument("XLA_CLIENT_MEM_FRACTION is set together with XLA_PYTHON_CLIENT_MEM_FRACTION: "
                             "remove the latter, it is deprecated (as jax says)");
    }
    MYPLUGIN_RETURN_IF_ERROR(SetGpuMemoryFraction(older, "XLA_PYTHON_CLIENT_MEM_FRACTION", s));
  } else if (fraction != nullptr) {
    MYPLUGIN_RETURN_IF_ERROR(SetGpuMemoryFraction(fraction, "XLA_CLIENT_MEM_FRACTION", s));
  }
  if (const char* v = Given(getenv, "XLA_PYTHON_CLIENT_PREALLOCATE")) SetGpuPreallocate(v, s);
  if (const char* v = Given(getenv, "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB")) {
    MYPLUGIN_RETURN_IF_ERROR(SetGpuCollectiveMemoryMiB(v, "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB", s));
  }
  return OkStatus();
}

}  // namespace

StatusOr<Settings> ParseSettings(const EnvLookup& getenv) {
  Settings s;
  MYPLUGIN_RETURN_IF_ERROR(SecondsSetting(getenv, "MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS", &s.collective_timeout_s));
  MYPLUGIN_RETURN_IF_ERROR(SecondsSetting(getenv, "MYPLUGIN_COLLECTIVE_STALL_SECONDS", &s.collective_stall_s));
  MYPLUGIN_RETURN_IF_ERROR(SecondsSetting(getenv, "MYPLUGIN_COLLECTIVE_CAP_SECONDS", &s.collective_cap_s));
  MYPLUGIN_RETURN_IF_ERROR(SecondsSetting(getenv, "MYPLUGIN_PEER_EXIT_GRACE_SECONDS", &s.peer_exit_grace_s));
  if (const char* v = Given(getenv, "MYPLUGIN_STRAGGLER_SECONDS")) {
    if (!ParseSeconds(v, /*zero_allowed=*/true, &s.straggler_s)) {
      return InvalidArgument(std::string("MYPLUGIN_STRAGGLER_SECONDS='") + v +
                             "' is not a number of seconds (0 turns the straggler reports off)");
    }
  }
  if (const char* v = Given(getenv, "MYPLUGIN_TRACE_BUFFER")) {
    int64_t n = 0;
    if (!ParseInt64(v, &n) || n < static_cast<int64_t>(kMinTraceBuffer) || n > static_cast<int64_t>(kMaxTraceBuffer)) {
      return InvalidArgument(std::string("MYPLUGIN_TRACE_BUFFER='") + v + "' is not a whole number from " +
                             std::to_string(kMinTraceBuffer) + " to " + std::to_string(kMaxTraceBuffer) +
                             " (the calls each flight recorder keeps)");
    }
    s.trace_buffer = static_cast<size_t>(n);
  }
  if (const char* v = Given(getenv, "MYPLUGIN_TRACE_DIR")) s.trace_dir = v;
  if (const char* v = Given(getenv, "MYPLUGIN_TRANSPORT")) {
    s.transport = v;
    if (s.transport != "auto" && s.transport != "shm" && s.transport != "gloo" && s.transport != "hierarchical") {
      return InvalidArgument("MYPLUGIN_TRANSPORT='" + s.transport + "' is not a transport: auto (shared memory "
                             "within a host, else Gloo), shm, gloo or hierarchical");
    }
  }
  if (const char* v = Given(getenv, "MYPLUGIN_NCCL_AGREEMENT")) {
    s.nccl_agreement = v;
    if (s.nccl_agreement != "beside" && s.nccl_agreement != "before") {
      return InvalidArgument("MYPLUGIN_NCCL_AGREEMENT='" + s.nccl_agreement +
                             "' is not a place for the NCCL calls' signature agreement: beside (enqueue, agree on "
                             "a thread of its own, the result held on the GPU until it agrees) or before (agree, "
                             "then enqueue)");
    }
  }
  if (const char* v = Given(getenv, "MYPLUGIN_SPMD_REWRITE")) {
    if (std::string(v) != "always") {
      return InvalidArgument(std::string("MYPLUGIN_SPMD_REWRITE='") + v +
                             "' is not a rewrite mode: always (every program of several devices takes the "
                             "multi-process compile), or unset");
    }
    s.spmd_rewrite_always = true;
  }
  if (const char* v = Given(getenv, "MYPLUGIN_SPMD_LOG")) s.spmd_log = std::string(v) != "0";
  if (const char* v = Given(getenv, "TMPDIR")) s.temp_dir = v;
  if (const char* v = Given(getenv, "NCCL_HOSTID")) s.nccl_host_id = v;
  MYPLUGIN_RETURN_IF_ERROR(ParseGpuMemory(getenv, &s.gpu_memory));
  return s;
}

const std::vector<std::string>& SettingVariables() {
  static const std::vector<std::string>* names = new std::vector<std::string>{
      "MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS", "MYPLUGIN_COLLECTIVE_STALL_SECONDS", "MYPLUGIN_COLLECTIVE_CAP_SECONDS",
      "MYPLUGIN_PEER_EXIT_GRACE_SECONDS",    "MYPLUGIN_STRAGGLER_SECONDS",        "MYPLUGIN_TRACE_BUFFER",
      "MYPLUGIN_TRACE_DIR",                  "MYPLUGIN_TRANSPORT",                "MYPLUGIN_NCCL_AGREEMENT",
      "MYPLUGIN_SPMD_REWRITE",
      "MYPLUGIN_SPMD_LOG",                   "TMPDIR",                            "NCCL_HOSTID",
      "XLA_PYTHON_CLIENT_ALLOCATOR",         "XLA_CLIENT_MEM_FRACTION",           "XLA_PYTHON_CLIENT_MEM_FRACTION",
      "XLA_PYTHON_CLIENT_PREALLOCATE",       "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB"};
  return *names;
}

const char* ProcessEnvironment(const char* name) { return std::getenv(name); }

}  // namespace myplugin
