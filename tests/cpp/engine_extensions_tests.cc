// Which of the engine's extensions myplugin's PJRT_Api offers
// (pjrt/engine_extensions.h), read from the chain built over a stand-in
// CUDA engine whose chain has jax-cuda13-pjrt's types and one unknown type
// (tests/cpp/fake_cuda_engine.cc), loaded as a real engine is.
#include <dlfcn.h>

#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "engine/engine_library.h"
#include "pjrt/engine_extensions.h"
#include "pjrt/error.h"

using myplugin::EngineLibrary;
using myplugin::ExtensionPlan;

namespace {

std::string Calls(const EngineLibrary& engine) {
  void* handle = dlopen(engine.path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  auto fn = reinterpret_cast<const char* (*)()>(handle ? dlsym(handle, "FakeEngineExtensionCalls") : nullptr);
  return fn ? fn() : "<no record>";
}

int TypeOf(const PJRT_Extension_Base* ext) {
  int type;
  std::memcpy(&type, &ext->type, sizeof(type));
  return type;
}

std::vector<int> Types(const PJRT_Extension_Base* first, const PJRT_Extension_Base* end) {
  std::vector<int> types;
  for (const PJRT_Extension_Base* e = first; e != nullptr && e != end; e = e->next) types.push_back(TypeOf(e));
  return types;
}

const PJRT_Extension_Base* Find(const PJRT_Extension_Base* first, int type) {
  for (const PJRT_Extension_Base* e = first; e != nullptr; e = e->next) {
    if (TypeOf(e) == type) return e;
  }
  return nullptr;
}

std::string MessageOf(PJRT_Error* error) {
  std::string m = error == nullptr ? "" : error->status.message();
  delete error;
  return m;
}

// Every type either engine offers has a decision with a reason; types no
// engine offers (and any number XLA has not given out) have none.
void TestEveryOfferedTypeIsDecided() {
  for (int type : {20, 24, 19, 12, 7, 6, 5, 4, 0, 3, 2, 1, 9}) {
    const myplugin::ExtensionDecision* d = myplugin::DecideExtension(type);
    CHECK(d != nullptr && d->why != nullptr && std::strlen(d->why) > 20);
  }
  CHECK(myplugin::DecideExtension(99) == nullptr);
  CHECK(myplugin::DecideExtension(-1) == nullptr);
  CHECK(myplugin::DecideExtension(2)->plan == ExtensionPlan::kAnswered);
  CHECK(myplugin::DecideExtension(5)->plan == ExtensionPlan::kAnswered);
  CHECK(myplugin::DecideExtension(0)->plan == ExtensionPlan::kForwarded);
}

// The forwarded types (0, 3, 7; layouts are chained by their own file) come
// before what we had, in the engine's order; the unknown type, the types
// answered by myplugin and those not needed are left out.
void TestOnlyForwardedTypesAreChained(const EngineLibrary& engine) {
  PJRT_Extension_Base ours{};
  ours.type = PJRT_Extension_Type_FFI;
  const PJRT_Extension_Base* chain = myplugin::ForwardEngineExtensions(engine, &ours);
  CHECK((Types(chain, &ours) == std::vector<int>{7, 0, 3}));
  CHECK(Find(chain, 99) == nullptr);
  CHECK(Find(chain, 6) == nullptr && Find(chain, 19) == nullptr && Find(chain, 24) == nullptr);
  // Our entries, not the engine's structs passed on.
  for (const PJRT_Extension_Base* e = chain; e != &ours; e = e->next) {
    CHECK(e != engine.FindExtension(static_cast<PJRT_Extension_Type>(TypeOf(e))));
  }

  auto* custom_call = reinterpret_cast<const myplugin::GpuCustomCallExtension*>(Find(chain, 0));
  CHECK(custom_call->custom_call_handles_traits);  // the fake's extension reads them
  myplugin::GpuRegisterCustomCallArgs call{};
  call.struct_size = sizeof(call);
  call.function_name = "cu_threefry2x32_ffi";
  call.function_name_size = std::strlen(call.function_name);
  call.api_version = 1;
  CHECK(custom_call->custom_call(&call) == nullptr);
  // The engine's error reaches jax as ours (its PJRT_Error_Message reads it).
  call.function_name = "fail_target";
  call.function_name_size = std::strlen(call.function_name);
  CHECK(MessageOf(custom_call->custom_call(&call)).find("the fake engine refuses fail_target") != std::string::npos);
  call.struct_size = 8;
  CHECK(MessageOf(custom_call->custom_call(&call)).find("PJRT_Gpu_Register_Custom_Call") != std::string::npos);

  auto* triton = reinterpret_cast<const myplugin::TritonExtension*>(Find(chain, 7));
  myplugin::TritonCompileArgs compile{};
  compile.struct_size = sizeof(compile);
  compile.module = "ttir";
  compile.module_size = 4;
  compile.arch_name = "9.0";
  compile.arch_name_size = 3;
  CHECK(triton->compile(&compile) == nullptr);
  CHECK(compile.out_smem_bytes == 4096);

  auto* stream = reinterpret_cast<const myplugin::StreamExtension*>(Find(chain, 3));
  myplugin::WaitStreamArgs wait{};
  wait.struct_size = sizeof(wait);
  wait.stream = 77;
  CHECK(stream->wait_stream(&wait) == nullptr);
  myplugin::GetStreamArgs get{};
  get.struct_size = sizeof(get);
  CHECK(MessageOf(stream->get_stream(&get)).find("not a device of this process") != std::string::npos);

  CHECK(Calls(engine) == "custom_call(cu_threefry2x32_ffi);triton(9.0);wait_stream(77);");
}

// Registrations made before the engine loads reach it when it does, later
// ones at once, each once per library.
void TestPartitionersReachEveryEngineThatLoads(const EngineLibrary& engine) {
  auto* ext = reinterpret_cast<const myplugin::CustomPartitionerExtension*>(
      myplugin::OurCustomPartitionerExtension(nullptr));
  CHECK(TypeOf(&ext->base) == 2);
  int callbacks = 0;  // jaxlib's object: never read by myplugin
  auto* fake_callbacks = reinterpret_cast<myplugin::JaxCustomCallPartitionerCallbacks*>(&callbacks);
  myplugin::RegisterCustomPartitionerArgs early{sizeof(early), "CustomSPMDPartitioning", 22, fake_callbacks};
  CHECK(ext->register_custom_partitioner(&early) == nullptr);
  myplugin::RegisterBatchPartitionableArgs batch{sizeof(batch), "my_batched_op", 13};
  CHECK(ext->register_batch_partitionable(&batch) == nullptr);
  CHECK(Calls(engine).empty());  // no engine yet

  CHECK(myplugin::AddPartitioningEngine(engine).ok());
  CHECK(Calls(engine) == "partitioner(CustomSPMDPartitioning);batch(my_batched_op);");
  CHECK(myplugin::AddPartitioningEngine(engine).ok());
  CHECK(Calls(engine).empty());

  myplugin::RegisterCustomPartitionerArgs late{sizeof(late), "InspectSharding", 15, fake_callbacks};
  CHECK(ext->register_custom_partitioner(&late) == nullptr);
  CHECK(Calls(engine) == "partitioner(InspectSharding);");
  myplugin::RegisterCustomPartitionerArgs none{sizeof(none), "x", 1, nullptr};
  CHECK(MessageOf(ext->register_custom_partitioner(&none)).find("no name or no callbacks") != std::string::npos);
  CHECK(Calls(engine).find("FORBIDDEN") == std::string::npos);
}

}  // namespace

void RunEngineExtensionsTests() {
  TestEveryOfferedTypeIsDecided();
  auto engine = EngineLibrary::Load(MYPLUGIN_FAKE_CUDA_ENGINE);
  CHECK(engine.ok());
  if (!engine.ok()) return;
  Calls(*engine.value());  // whatever earlier suites left
  TestOnlyForwardedTypesAreChained(*engine.value());
  TestPartitionersReachEveryEngineThatLoads(*engine.value());
}
