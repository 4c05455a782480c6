// The XLA FFI API versions on both sides of a handler registration: the one
// a handler was built against (it reports it when called with a metadata
// frame) and the one the engine speaks, and the pairs of the two that
// myplugin registers, each with the reason it is safe.
//
// Why this exists: an engine refuses a handler built against a newer FFI
// API than its own, and the PJRT FFI extension's register_handler drops
// that refusal, so the target is only found missing (NOT_FOUND) when a
// program runs. myplugin decides each registration itself, from versions
// read from the handler and the engine, and refuses an unknown pair at
// registration with both versions named. See docs/compatibility.md, "XLA FFI versions".
//
// Lives in libmyplugin_runtime: the PJRT library registers handlers and
// the Python module reports versions, and both see one probed engine.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace myplugin {

struct FfiApiVersion {
  int major = 0;
  int minor = 0;
  std::string ToString() const { return std::to_string(major) + "." + std::to_string(minor); }
  bool operator==(const FfiApiVersion& o) const { return major == o.major && minor == o.minor; }
  bool operator<=(const FfiApiVersion& o) const {
    return major < o.major || (major == o.major && minor <= o.minor);
  }
};

// One (handler, engine) pair that myplugin registers.
struct FfiCompatiblePair {
  FfiApiVersion handler;
  FfiApiVersion engine;
  // True when the handler is newer than the engine: the engine would refuse
  // it, so it is registered through an adapter that reports the engine's
  // version (ffi_handler_adapter.h). The reason says why no handler can
  // read past what the engine provides.
  bool adapted;
  const char* reason;
};

// Every known pair, the one place they are written.
const std::vector<FfiCompatiblePair>& FfiCompatiblePairs();

// The pair's entry, or nullptr for a pair nobody has shown to work.
const FfiCompatiblePair* FindFfiCompatiblePair(FfiApiVersion handler, FfiApiVersion engine);

// How a handler of version `handler` is registered with an engine of
// version `engine`: as it is, through an adapter reporting the engine's
// version, or not at all (an error naming the target, both versions and the
// known pairs).
struct FfiRegistrationPlan {
  bool adapt = false;
  FfiApiVersion report;  // what the adapter reports: the engine's version
};
StatusOr<FfiRegistrationPlan> PlanFfiRegistration(const std::string& target, FfiApiVersion handler,
                                                  FfiApiVersion engine);

// The FFI API version this build's own handlers (the collectives, the host
// callbacks) were compiled against: the build's jaxlib headers.
FfiApiVersion BuiltFfiApiVersion();

// The version `handler` (an XLA_FFI_Handler*) reports in a metadata call.
// `engine_api` (the engine's XLA_FFI_Api*) lets a handler that fails the
// call report why; it may be null.
StatusOr<FfiApiVersion> HandlerFfiApiVersion(void* handler, const void* engine_api);

// The engine's version is read by registering this handler with it (under
// kFfiProbeTarget): the engine's registration calls it with a metadata
// frame that carries the engine's own XLA_FFI_Api, whose version it keeps.
// It reports that same version, so the engine accepts it; run as a custom
// call it fails.
inline constexpr char kFfiProbeTarget[] = "myplugin_ffi_api_probe";
void* FfiProbeHandler();

struct ProbedEngineFfi {
  bool known = false;
  FfiApiVersion version;
  const void* api = nullptr;  // the engine's XLA_FFI_Api*
};
// What the probe saw since the last call, which forgets it: each engine's
// registration of the probe is followed by one take. Unknown when the
// engine did not hand it its API (older XLA made metadata calls without).
ProbedEngineFfi TakeProbedEngine();

// The engine that runs programs, as its probe showed it (reported to
// Python; the compile-only CUDA engine is probed apart and not recorded).
void RecordRunningEngineFfi(ProbedEngineFfi engine);
ProbedEngineFfi RunningEngineFfi();

}  // namespace myplugin
