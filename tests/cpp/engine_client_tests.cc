// What the engine's client is created with (engine/engine_client.h): the
// CPU engine's device count, the CUDA engine's visible devices and jax's GPU
// memory settings, read back from a stand-in CUDA engine loaded as a real
// one is (tests/cpp/fake_cuda_engine.cc); and the memory share check.
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "check.h"
#include "engine/engine_client.h"

using myplugin::Code;
using myplugin::EngineClient;
using myplugin::EngineClientOptions;
using myplugin::EngineLibrary;

namespace {

std::string Recorded(const EngineLibrary& engine) {
  void* handle = dlopen(engine.path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  auto fn = reinterpret_cast<const char* (*)()>(handle ? dlsym(handle, "FakeEngineRecordedOptions") : nullptr);
  return fn ? fn() : "<no record>";
}

void TestCpuEngineGetsItsDeviceCountOnly() {
  EngineClientOptions o;
  o.cpu = true;
  o.num_devices = 8;
  o.gpu_memory.memory_fraction = 0.5;  // jax's GPU settings mean nothing to the CPU engine
  std::vector<PJRT_NamedValue> v = myplugin::EngineCreateOptions(o);
  CHECK(v.size() == 1);
  CHECK(std::string(v[0].name, v[0].name_size) == "cpu_device_count");
  CHECK(v[0].int64_value == 8);
}

void TestCudaEngineIsGivenJaxsMemorySettings(const EngineLibrary& engine) {
  EngineClientOptions o;
  o.cpu = false;
  o.num_devices = 1;
  o.visible_devices = {3};
  o.gpu_memory.allocator = "bfc";
  o.gpu_memory.memory_fraction = 0.25;
  o.gpu_memory.preallocate = false;
  o.gpu_memory.collective_memory_bytes = int64_t{64} << 20;
  auto client = EngineClient::Create(engine, o);
  CHECK(client.ok());
  CHECK(Recorded(engine) ==
        "visible_devices=[3];allocator=bfc;memory_fraction=f0.250000;preallocate=false;collective_memory_size=67108864");

  // Unset settings are not passed: the engine keeps its defaults, as under jax.
  EngineClientOptions plain;
  plain.cpu = false;
  plain.num_devices = 0;
  auto defaults = EngineClient::Create(engine, plain);
  CHECK(defaults.ok());
  CHECK(Recorded(engine) == "allocator=default");
}

void TestAShareTooSmallIsRefusedAtStart(const EngineLibrary& engine) {
  EngineClientOptions o;
  o.cpu = false;
  o.num_devices = 1;
  o.gpu_memory.memory_fraction = 0.002;  // 164 MiB of the stand-in's 80 GiB
  auto client = EngineClient::Create(engine, o);
  CHECK(!client.ok());
  CHECK(client.status().code() == Code::kFailedPrecondition);
  CHECK(client.status().message().find("XLA_CLIENT_MEM_FRACTION=0.002") != std::string::npos);
  CHECK(client.status().message().find("163 MiB") != std::string::npos);
  o.gpu_memory.memory_fraction = 0.004;  // 327 MiB: enough
  CHECK(EngineClient::Create(engine, o).ok());
}

void TestShareCheck() {
  myplugin::GpuMemorySettings s;
  CHECK(myplugin::CheckGpuMemoryShare(0, s).ok());  // the engine did not say
  CHECK(myplugin::CheckGpuMemoryShare(myplugin::kMinGpuMemoryShareBytes, s).ok());
  CHECK(myplugin::CheckGpuMemoryShare(myplugin::kMinGpuMemoryShareBytes - 1, s).code() == Code::kFailedPrecondition);
}

}  // namespace

void RunEngineClientTests() {
  TestCpuEngineGetsItsDeviceCountOnly();
  TestShareCheck();
  auto engine = EngineLibrary::Load(MYPLUGIN_FAKE_CUDA_ENGINE);
  CHECK(engine.ok());
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().message().c_str());
    return;
  }
  TestCudaEngineIsGivenJaxsMemorySettings(*engine.value());
  TestAShareTooSmallIsRefusedAtStart(*engine.value());
}
