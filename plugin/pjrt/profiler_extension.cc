#include "pjrt/profiler_extension.h"

#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/flight_recorder.h"
#include "collectives/process_runtime.h"
#include "common/log.h"
#include "common/profile_spans.h"
#include "coordination/runtime.h"
#include "pjrt/engine_instance.h"
#include "pjrt/xspace.h"

namespace myplugin {

// Our error object (PLUGIN_Profiler_Error is opaque to jaxlib).
struct PLUGIN_Profiler_Error {
  int code;  // absl::StatusCode's numbering, as PJRT's
  std::string message;
};

namespace {

constexpr int kFailedPrecondition = 9;
constexpr int64_t kPlaneIdBase = 1000;

PLUGIN_Profiler_Error* MakeError(int code, std::string message) {
  return new PLUGIN_Profiler_Error{code, std::move(message)};
}

// The engine's profiler API, where the loaded engine's chain offers one of
// the size we know.
const ProfilerApi* EngineProfiler() {
  if (!EnsureEngineLoaded().ok()) return nullptr;
  const auto* ext = reinterpret_cast<const ProfilerExtension*>(Engine().FindExtension(PJRT_Extension_Type_Profiler));
  if (ext == nullptr || ext->base.struct_size < offsetof(ProfilerExtension, profiler_api) + sizeof(void*)) {
    return nullptr;
  }
  const ProfilerApi* api = ext->profiler_api;
  return api != nullptr && api->struct_size >= sizeof(ProfilerApi) ? api : nullptr;
}

// An engine profiler's error as text; the error is freed.
std::string EngineMessage(const ProfilerApi* api, PLUGIN_Profiler_Error* error) {
  ProfilerErrorMessageArgs m{};
  m.struct_size = sizeof(m);
  m.error = error;
  api->error_message(&m);
  std::string text(m.message ? m.message : "", m.message ? m.message_size : 0);
  ProfilerErrorDestroyArgs d{};
  d.struct_size = sizeof(d);
  d.error = error;
  api->error_destroy(&d);
  return text;
}

}  // namespace

// One profiling session: ours, and the engine's beside it.
struct PLUGIN_Profiler {
  const ProfilerApi* engine_api = nullptr;
  PLUGIN_Profiler* engine = nullptr;
  std::vector<std::string> warnings;  // go into the XSpace
  bool started = false;
  bool stopped = false;
  int64_t started_ns = 0;
  profile::Collected collected;
  bool built = false;
  std::string bytes;  // the XSpace, once built; what collect_data hands out

  // Calls the engine's `fn`; a failure becomes a warning in the trace and
  // ends the engine's part of the session (`ending`: the call that ends it).
  template <typename Args>
  void CallEngine(PLUGIN_Profiler_Error* (*ProfilerApi::*fn)(Args*), Args* args, const char* what,
                  bool ending = false) {
    if (engine == nullptr) return;
    if (PLUGIN_Profiler_Error* e = (engine_api->*fn)(args)) {
      const std::string why = std::string("the engine's profiler failed to ") + what + ": " + EngineMessage(engine_api, e);
      LogLine("myplugin: " + why);
      warnings.push_back(why);
      ProfilerArgs d{sizeof(ProfilerArgs), engine};
      if (!ending) {
        if (PLUGIN_Profiler_Error* de = engine_api->destroy(&d)) EngineMessage(engine_api, de);
      }
      engine = nullptr;
    }
  }

  std::string EngineData() {
    if (engine == nullptr) return "";
    ProfilerCollectDataArgs args{};
    args.struct_size = sizeof(args);
    args.profiler = engine;
    CallEngine(&ProfilerApi::collect_data, &args, "collect its data");
    if (engine == nullptr || args.buffer_size_in_bytes == 0) return "";
    if (args.buffer != nullptr) {
      // The engine lent its own buffer (what jaxlib's caller expects).
      return std::string(reinterpret_cast<const char*>(args.buffer), args.buffer_size_in_bytes);
    }
    // The older contract: a second call fills the caller's buffer.
    std::string data(args.buffer_size_in_bytes, '\0');
    args.buffer = reinterpret_cast<uint8_t*>(data.data());
    CallEngine(&ProfilerApi::collect_data, &args, "collect its data");
    return engine == nullptr ? "" : data;
  }

  void Build() {
    if (built) return;
    built = true;
    coordination::DistributedRuntime& job = collectives::ProcessRuntime::Get().distributed();
    const int index = job.initialized() ? job.process_id() : 0;
    const int count = job.initialized() ? job.num_processes() : 1;
    PlaneDescription plane;
    // The process in the name: a job's profiles opened side by side say whose is whose.
    plane.name = "/device:CUSTOM:myplugin process " + std::to_string(index);
    // jax's trace conversion shows each custom plane as the process
    // (pid) its id makes; other sources' custom planes (the engine's) count
    // from 0.
    plane.id = kPlaneIdBase + index;
    plane.stats.push_back(profile::Stat::Int("process_index", index));
    plane.stats.push_back(profile::Stat::Int("num_processes", count));
    plane.stats.push_back(profile::Stat::Int("pid", getpid()));
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) plane.stats.push_back(profile::Stat::Text("host", host));
    if (collected.dropped > 0) {
      warnings.push_back("myplugin kept the first " + std::to_string(profile::kMaxSpans) + " spans of this profile; " +
                         std::to_string(collected.dropped) + " more were dropped");
    }
    bytes = EngineData() +
            EncodeXSpace(plane, collected, collectives::WallMinusMonotonicNanos(), warnings);
  }
};

namespace {

void ErrorDestroy(ProfilerErrorDestroyArgs* args) { delete args->error; }

void ErrorMessage(ProfilerErrorMessageArgs* args) {
  args->message = args->error->message.data();
  args->message_size = args->error->message.size();
}

PLUGIN_Profiler_Error* ErrorGetCode(ProfilerErrorGetCodeArgs* args) {
  args->code = args->error->code;
  return nullptr;
}

// jaxlib leaves struct_size unset in the arguments it passes (see the
// header): every field of the ABI is read.
PLUGIN_Profiler_Error* Create(ProfilerCreateArgs* args) {
  auto session = std::make_unique<PLUGIN_Profiler>();
  if (const ProfilerApi* api = EngineProfiler()) {
    ProfilerCreateArgs c{};
    c.struct_size = sizeof(c);
    c.options = args->options;
    c.options_size = args->options_size;
    if (PLUGIN_Profiler_Error* e = api->create(&c)) {
      const std::string why = "the engine's profiler could not start a session: " + EngineMessage(api, e);
      LogLine("myplugin: " + why);
      session->warnings.push_back(why);
    } else {
      session->engine_api = api;
      session->engine = c.profiler;
    }
  }
  args->profiler = session.release();
  return nullptr;
}

PLUGIN_Profiler_Error* Destroy(ProfilerArgs* args) {
  std::unique_ptr<PLUGIN_Profiler> session(args->profiler);
  if (session == nullptr) return nullptr;
  if (session->started && !session->stopped) profile::StopSession(session->started_ns);
  ProfilerArgs d{sizeof(ProfilerArgs), session->engine};
  session->CallEngine(&ProfilerApi::destroy, &d, "end its session", true);
  return nullptr;
}

PLUGIN_Profiler_Error* Start(ProfilerArgs* args) {
  PLUGIN_Profiler* session = args->profiler;
  if (session->started) return MakeError(kFailedPrecondition, "this myplugin profiling session was already started");
  session->started = true;
  session->started_ns = profile::StartSession();
  ProfilerArgs s{sizeof(ProfilerArgs), session->engine};
  session->CallEngine(&ProfilerApi::start, &s, "start");
  return nullptr;
}

PLUGIN_Profiler_Error* Stop(ProfilerArgs* args) {
  PLUGIN_Profiler* session = args->profiler;
  if (!session->started || session->stopped) {
    return MakeError(kFailedPrecondition, "this myplugin profiling session is not running");
  }
  ProfilerArgs s{sizeof(ProfilerArgs), session->engine};
  session->CallEngine(&ProfilerApi::stop, &s, "stop");
  session->stopped = true;
  session->collected = profile::StopSession(session->started_ns);
  return nullptr;
}

PLUGIN_Profiler_Error* CollectData(ProfilerCollectDataArgs* args) {
  PLUGIN_Profiler* session = args->profiler;
  if (!session->stopped) return MakeError(kFailedPrecondition, "stop the myplugin profiling session before collecting it");
  session->Build();
  if (args->buffer == nullptr) {
    // The session keeps the bytes until it is destroyed.
    args->buffer = reinterpret_cast<uint8_t*>(session->bytes.data());
  } else {
    std::memcpy(args->buffer, session->bytes.data(), session->bytes.size());
  }
  args->buffer_size_in_bytes = session->bytes.size();
  return nullptr;
}

}  // namespace

PJRT_Extension_Base* OurProfilerExtension(PJRT_Extension_Base* next) {
  static ProfilerApi api = [] {
    ProfilerApi a{};
    a.struct_size = sizeof(ProfilerApi);
    a.error_destroy = ErrorDestroy;
    a.error_message = ErrorMessage;
    a.error_get_code = ErrorGetCode;
    a.create = Create;
    a.destroy = Destroy;
    a.start = Start;
    a.stop = Stop;
    a.collect_data = CollectData;
    return a;
  }();
  static ProfilerExtension extension = [] {
    ProfilerExtension e{};
    e.base.struct_size = sizeof(ProfilerExtension);
    e.base.type = PJRT_Extension_Type_Profiler;
    e.profiler_api = &api;
    return e;
  }();
  extension.base.next = next;
  return &extension.base;
}

}  // namespace myplugin
