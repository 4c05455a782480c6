#include "engine/ffi_api_version.h"

#include <mutex>
#include <type_traits>

#include "xla/ffi/api/c_api.h"

namespace myplugin {
namespace {

// XLA accepts every handler from FFI API 0.1 up to its own version
// (xla/ffi/ffi_registry.cc, IsSupportedApiVersion): a handler reads only
// what its own, older or equal, headers declare, and every such field is
// in the engine's structs, since the API only grows at the ends of structs
// behind struct_size.
constexpr char kOlderOrEqual[] =
    "the engine accepts every handler built against FFI API 0.1 up to its own (XLA's ffi_registry.cc)";

// jaxlib 0.12 (FFI 0.5) over the 0.11.2 CPU engine (FFI 0.4). Checked on
// the two releases' xla/ffi/api headers: 0.5 appends one field to
// XLA_FFI_Api (XLA_FFI_CustomOptions_Get, with its args struct) and adds the
// CustomOptions context decoding in api.h/ffi.h, which reads that field only
// after checking api->struct_size reaches it (else the handler fails with
// "Custom options are not supported by this FFI API"). Call frames,
// buffers, attributes, errors and the metadata protocol are byte-for-byte
// the same. So no 0.5 handler reads past the engine's 0.4 XLA_FFI_Api.
constexpr char kCustomOptionsOnly[] =
    "0.5 only appends XLA_FFI_CustomOptions_Get to XLA_FFI_Api, read behind a struct_size check; "
    "every other struct is unchanged from 0.4";

using MetadataExtension = XLA_FFI_Metadata_Extension;
using ExtensionBase = std::remove_pointer_t<decltype(XLA_FFI_CallFrame{}.extension_start)>;

std::mutex probe_mu;
ProbedEngineFfi probed;   // what the probe saw last
ProbedEngineFfi running;  // the engine that runs programs

bool IsMetadataCall(const XLA_FFI_CallFrame* frame) {
  return frame->extension_start != nullptr && frame->extension_start->type == XLA_FFI_Extension_Metadata;
}

XLA_FFI_Metadata* MetadataOf(XLA_FFI_CallFrame* frame) {
  return reinterpret_cast<MetadataExtension*>(frame->extension_start)->metadata;
}

XLA_FFI_Error* ProbeError(const XLA_FFI_Api* api) {
  XLA_FFI_Error_Create_Args args{};
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.message = "myplugin_ffi_api_probe reads the engine's FFI version at registration; it does not run";
  args.errc = XLA_FFI_Error_Code_UNIMPLEMENTED;
  return api->XLA_FFI_Error_Create(&args);
}

XLA_FFI_Error* Probe(XLA_FFI_CallFrame* frame) {
  if (!IsMetadataCall(frame)) return frame->api == nullptr ? nullptr : ProbeError(frame->api);
  XLA_FFI_Metadata* metadata = MetadataOf(frame);
  if (frame->api == nullptr) {
    // Unknown; report our own version, which the engine then judges.
    metadata->api_version.major_version = XLA_FFI_API_MAJOR;
    metadata->api_version.minor_version = XLA_FFI_API_MINOR;
    return nullptr;
  }
  FfiApiVersion engine{frame->api->api_version.major_version, frame->api->api_version.minor_version};
  {
    std::lock_guard<std::mutex> lock(probe_mu);
    probed = ProbedEngineFfi{true, engine, frame->api};
  }
  metadata->api_version.major_version = engine.major;
  metadata->api_version.minor_version = engine.minor;
  metadata->traits = 0;
  return nullptr;
}

std::string TakeHandlerError(const XLA_FFI_Api* api, XLA_FFI_Error* error) {
  if (api == nullptr) return "(no engine API to read the error with)";
#if XLA_FFI_API_MINOR >= 4
  XLA_FFI_Error_GetDetails_Args get{};
  get.struct_size = XLA_FFI_Error_GetDetails_Args_STRUCT_SIZE;
  get.error = error;
  api->XLA_FFI_Error_GetDetails(&get);
#else
  XLA_FFI_Error_GetMessage_Args get{};
  get.struct_size = XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE;
  get.error = error;
  api->XLA_FFI_Error_GetMessage(&get);
#endif
  std::string message = get.message == nullptr ? "" : get.message;
  XLA_FFI_Error_Destroy_Args destroy{};
  destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api->XLA_FFI_Error_Destroy(&destroy);
  return message;
}

}  // namespace

const std::vector<FfiCompatiblePair>& FfiCompatiblePairs() {
  // Handler versions: jaxlib 0.10.2 is 0.3, 0.11.2 is 0.4, 0.12.0.1 is 0.5.
  // Engine versions: the CPU engine (lammps-jax-pjrt-cpu 0.11.2) is 0.4;
  // jax-cuda1x-pjrt speaks its jaxlib's (0.3, 0.4, 0.5).
  static const std::vector<FfiCompatiblePair> pairs = {
      {{0, 3}, {0, 3}, false, kOlderOrEqual}, {{0, 3}, {0, 4}, false, kOlderOrEqual},
      {{0, 4}, {0, 4}, false, kOlderOrEqual}, {{0, 3}, {0, 5}, false, kOlderOrEqual},
      {{0, 4}, {0, 5}, false, kOlderOrEqual}, {{0, 5}, {0, 5}, false, kOlderOrEqual},
      {{0, 5}, {0, 4}, true, kCustomOptionsOnly},
  };
  return pairs;
}

const FfiCompatiblePair* FindFfiCompatiblePair(FfiApiVersion handler, FfiApiVersion engine) {
  for (const FfiCompatiblePair& pair : FfiCompatiblePairs()) {
    if (pair.handler == handler && pair.engine == engine) return &pair;
  }
  return nullptr;
}

StatusOr<FfiRegistrationPlan> PlanFfiRegistration(const std::string& target, FfiApiVersion handler,
                                                  FfiApiVersion engine) {
  const FfiCompatiblePair* pair = FindFfiCompatiblePair(handler, engine);
  if (pair == nullptr) {
    std::string known;
    for (const FfiCompatiblePair& p : FfiCompatiblePairs()) {
      known += (known.empty() ? "" : ", ") + p.handler.ToString() + " on " + p.engine.ToString();
    }
    return FailedPrecondition("FFI target '" + target + "' was built against XLA FFI API " + handler.ToString() +
                              " and the engine speaks " + engine.ToString() +
                              ": myplugin knows no reason this pair is safe, so it is not registered (the engine "
                              "would drop it and the target would be missing when a program runs). Known pairs "
                              "(handler on engine): " + known);
  }
  return FfiRegistrationPlan{pair->adapted, engine};
}

FfiApiVersion BuiltFfiApiVersion() { return {XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR}; }

StatusOr<FfiApiVersion> HandlerFfiApiVersion(void* handler, const void* engine_api) {
  if (handler == nullptr) return InvalidArgument("the FFI handler is null");
  // The frame XLA's registration builds (xla/ffi/invoke.cc, GetMetadata): a
  // metadata extension and nothing to decode, so the handler answers from
  // its headers without touching arguments.
  XLA_FFI_Metadata metadata{};
  metadata.struct_size = XLA_FFI_Metadata_STRUCT_SIZE;
  metadata.api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
  MetadataExtension extension{};
  extension.extension_base.struct_size = XLA_FFI_Metadata_Extension_STRUCT_SIZE;
  extension.extension_base.type = XLA_FFI_Extension_Metadata;
  extension.metadata = &metadata;
  XLA_FFI_CallFrame frame{};
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.extension_start = reinterpret_cast<ExtensionBase*>(&extension.extension_base);
  frame.api = static_cast<const XLA_FFI_Api*>(engine_api);
  frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame.args.struct_size = XLA_FFI_Args_STRUCT_SIZE;
  frame.rets.struct_size = XLA_FFI_Rets_STRUCT_SIZE;
  frame.attrs.struct_size = XLA_FFI_Attrs_STRUCT_SIZE;
  if (XLA_FFI_Error* error = reinterpret_cast<XLA_FFI_Handler*>(handler)(&frame)) {
    return InvalidArgument("the handler failed the metadata call that reports its FFI API version: " +
                           TakeHandlerError(frame.api, error));
  }
  return FfiApiVersion{metadata.api_version.major_version, metadata.api_version.minor_version};
}

void* FfiProbeHandler() { return reinterpret_cast<void*>(&Probe); }

ProbedEngineFfi TakeProbedEngine() {
  std::lock_guard<std::mutex> lock(probe_mu);
  ProbedEngineFfi seen = probed;
  probed = ProbedEngineFfi{};
  return seen;
}

void RecordRunningEngineFfi(ProbedEngineFfi engine) {
  std::lock_guard<std::mutex> lock(probe_mu);
  running = engine;
}

ProbedEngineFfi RunningEngineFfi() {
  std::lock_guard<std::mutex> lock(probe_mu);
  return running;
}

}  // namespace myplugin
