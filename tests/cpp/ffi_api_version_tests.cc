// The FFI version decision and the adapter (engine/ffi_api_version.h,
// engine/ffi_handler_adapter.h), with handlers that report a chosen version
// the way XLA's api.h does in a metadata call.
#include <string>

#include "check.h"
#include "engine/ffi_api_version.h"
#include "engine/ffi_handler_adapter.h"
#include "xla/ffi/api/c_api.h"

namespace {

using myplugin::FfiApiVersion;

int executions = 0;

template <int Minor>
XLA_FFI_Error* Reporting(XLA_FFI_CallFrame* frame) {
  if (frame->extension_start != nullptr && frame->extension_start->type == XLA_FFI_Extension_Metadata) {
    XLA_FFI_Metadata* metadata = reinterpret_cast<XLA_FFI_Metadata_Extension*>(frame->extension_start)->metadata;
    metadata->api_version.major_version = 0;
    metadata->api_version.minor_version = Minor;
    return nullptr;
  }
  ++executions;
  return nullptr;
}

void* AsVoid(XLA_FFI_Handler* h) { return reinterpret_cast<void*>(h); }

FfiApiVersion VersionOf(void* handler) {
  auto v = myplugin::HandlerFfiApiVersion(handler, nullptr);
  CHECK(v.ok());
  return v.ok() ? v.value() : FfiApiVersion{-1, -1};
}

void TestHandlerVersionIsRead() {
  CHECK((VersionOf(AsVoid(&Reporting<5>)) == FfiApiVersion{0, 5}));
  CHECK((VersionOf(AsVoid(&Reporting<3>)) == FfiApiVersion{0, 3}));
  CHECK(!myplugin::HandlerFfiApiVersion(nullptr, nullptr).ok());
  CHECK((myplugin::BuiltFfiApiVersion() == FfiApiVersion{XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR}));
}

void TestPlans() {
  auto same = myplugin::PlanFfiRegistration("t", {0, 4}, {0, 4});
  CHECK(same.ok() && !same.value().adapt);
  auto older = myplugin::PlanFfiRegistration("t", {0, 3}, {0, 5});
  CHECK(older.ok() && !older.value().adapt);
  auto newer = myplugin::PlanFfiRegistration("t", {0, 5}, {0, 4});
  CHECK(newer.ok() && newer.value().adapt && (newer.value().report == FfiApiVersion{0, 4}));
  // Unknown pairs: a newer handler no one has checked, an older engine than
  // any known, another major version. Each names the target and both.
  for (auto [handler, engine] : {std::pair<FfiApiVersion, FfiApiVersion>{{0, 6}, {0, 4}},
                                 {{0, 4}, {0, 3}}, {{1, 0}, {0, 5}}, {{0, 5}, {0, 6}}}) {
    auto plan = myplugin::PlanFfiRegistration("lapack_sgetrf_ffi", handler, engine);
    CHECK(!plan.ok());
    const std::string& m = plan.status().message();
    CHECK(m.find("'lapack_sgetrf_ffi'") != std::string::npos);
    CHECK(m.find("API " + handler.ToString()) != std::string::npos);
    CHECK(m.find("speaks " + engine.ToString()) != std::string::npos);
  }
  // Every pair has its reason, and only newer handlers are adapted.
  for (const auto& pair : myplugin::FfiCompatiblePairs()) {
    CHECK(pair.reason != nullptr && std::string(pair.reason).size() > 20);
    CHECK(pair.adapted == !(pair.handler <= pair.engine));
  }
}

void TestAdapterReportsTheEngineVersionAndForwards() {
  auto adapter = myplugin::AdaptFfiHandler(AsVoid(&Reporting<5>), {0, 4});
  CHECK(adapter.ok());
  if (!adapter.ok()) return;
  CHECK(adapter.value() != AsVoid(&Reporting<5>));
  CHECK((VersionOf(adapter.value()) == FfiApiVersion{0, 4}));
  // An execution goes to the handler, once.
  XLA_FFI_CallFrame frame{};
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  int before = executions;
  CHECK(reinterpret_cast<XLA_FFI_Handler*>(adapter.value())(&frame) == nullptr);
  CHECK(executions == before + 1);
  // The same handler, the same adapter; another version for it is refused.
  auto again = myplugin::AdaptFfiHandler(AsVoid(&Reporting<5>), {0, 4});
  CHECK(again.ok() && again.value() == adapter.value());
  CHECK(!myplugin::AdaptFfiHandler(AsVoid(&Reporting<5>), {0, 3}).ok());
  auto other = myplugin::AdaptFfiHandler(AsVoid(&Reporting<3>), {0, 2});
  CHECK(other.ok() && other.value() != adapter.value());
  CHECK(myplugin::FfiAdaptersInUse() == 2);
}

void TestProbeReadsTheEngineVersion() {
  (void)myplugin::TakeProbedEngine();
  CHECK(!myplugin::TakeProbedEngine().known);
  XLA_FFI_Api api{};
  api.struct_size = sizeof(api);
  api.api_version.major_version = 0;
  api.api_version.minor_version = 4;
  // What an engine's registration does: a metadata call carrying its API.
  XLA_FFI_Metadata metadata{};
  metadata.struct_size = XLA_FFI_Metadata_STRUCT_SIZE;
  XLA_FFI_Metadata_Extension extension{};
  extension.extension_base.struct_size = XLA_FFI_Metadata_Extension_STRUCT_SIZE;
  extension.extension_base.type = XLA_FFI_Extension_Metadata;
  extension.metadata = &metadata;
  XLA_FFI_CallFrame frame{};
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.extension_start = &extension.extension_base;
  frame.api = &api;
  CHECK(reinterpret_cast<XLA_FFI_Handler*>(myplugin::FfiProbeHandler())(&frame) == nullptr);
  myplugin::ProbedEngineFfi probed = myplugin::TakeProbedEngine();
  CHECK(probed.known && (probed.version == FfiApiVersion{0, 4}) && probed.api == &api);
  // Taken once: the next engine's probe starts from nothing.
  CHECK(!myplugin::TakeProbedEngine().known);
  // It reports the engine's own version, so the engine accepts it.
  CHECK(metadata.api_version.minor_version == 4);
}

}  // namespace

void RunFfiApiVersionTests() {
  TestHandlerVersionIsRead();
  TestPlans();
  TestAdapterReportsTheEngineVersionAndForwards();
  TestProbeReadsTheEngineVersion();
}
