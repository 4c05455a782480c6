// A stand-in for XLA's CUDA engine, loaded by the unit tests as a real
// engine library is (dlopen, GetPjrtApi, PJRT_Plugin_Initialize): it
// records the create options its client is given and answers the few calls
// EngineClient::Create makes, with one "GPU" of 80 GiB whose allocator limit
// follows memory_fraction (0.75 when not given, the CUDA engine's default).
// Its extension chain has the types of jax-cuda13-pjrt's, in its order
// (20, 24, 19, 12, 7, 6, 5, 4, 0, 3, 2, 1), and one type no XLA has (99);
// the entries that myplugin forwards record their calls, and fail for a
// name or module that starts with "fail".
#include <cstdint>
#include <cstring>
#include <string>

#include "pjrt/engine_extensions.h"
#include "pjrt_c_api.h"

struct PJRT_Error {
  std::string message;
};
struct PJRT_Device {};
struct PJRT_Client {
  PJRT_Device device;
  PJRT_Device* devices[1] = {&device};
  double memory_fraction = 0.75;
};

namespace {

constexpr int64_t kGpuBytes = int64_t{80} << 30;
std::string recorded;

// The client whose device MemoryStats describes: one at a time in these tests.
PJRT_Client* last_client = nullptr;

PJRT_Error* Ok() { return nullptr; }

PJRT_Error* PluginInitialize(PJRT_Plugin_Initialize_Args*) { return Ok(); }
void ErrorDestroy(PJRT_Error_Destroy_Args* args) { delete args->error; }
void ErrorMessage(PJRT_Error_Message_Args* args) {
  args->message = args->error->message.c_str();
  args->message_size = args->error->message.size();
}
PJRT_Error* ErrorGetCode(PJRT_Error_GetCode_Args* args) {
  args->code = PJRT_Error_Code_INTERNAL;
  return Ok();
}

std::string Show(const PJRT_NamedValue& v) {
  std::string name(v.name, v.name_size);
  switch (v.type) {
    case PJRT_NamedValue_kString:
      return name + "=" + std::string(v.string_value, v.value_size);
    case PJRT_NamedValue_kInt64:
      return name + "=" + std::to_string(v.int64_value);
    case PJRT_NamedValue_kFloat:
      return name + "=f" + std::to_string(v.float_value);
    case PJRT_NamedValue_kBool:
      return name + "=" + (v.bool_value ? "true" : "false");
    case PJRT_NamedValue_kInt64List: {
      std::string s = name + "=[";
      for (size_t i = 0; i < v.value_size; ++i) s += (i ? "," : "") + std::to_string(v.int64_array_value[i]);
      return s + "]";
    }
  }
  return name + "=?";
}

PJRT_Error* ClientCreate(PJRT_Client_Create_Args* args) {
  recorded.clear();
  auto* client = new PJRT_Client;
  for (size_t i = 0; i < args->num_options; ++i) {
    const PJRT_NamedValue& v = args->create_options[i];
    recorded += (i ? ";" : "") + Show(v);
    if (std::string(v.name, v.name_size) == "memory_fraction" && v.type == PJRT_NamedValue_kFloat) {
      client->memory_fraction = v.float_value;
    }
  }
  args->client = client;
  last_client = client;
  return Ok();
}
PJRT_Error* ClientDestroy(PJRT_Client_Destroy_Args* args) {
  if (last_client == args->client) last_client = nullptr;
  delete args->client;
  return Ok();
}
PJRT_Error* AddressableDevices(PJRT_Client_AddressableDevices_Args* args) {
  args->addressable_devices = args->client->devices;
  args->num_addressable_devices = 1;
  return Ok();
}
PJRT_Error* PlatformName(PJRT_Client_PlatformName_Args* args) {
  args->platform_name = "cuda";
  args->platform_name_size = 4;
  return Ok();
}
PJRT_Error* PlatformVersion(PJRT_Client_PlatformVersion_Args* args) {
  args->platform_version = "fake";
  args->platform_version_size = 4;
  return Ok();
}
PJRT_Error* MemoryStats(PJRT_Device_MemoryStats_Args* args) {
  args->bytes_limit = last_client == nullptr ? 0 : static_cast<int64_t>(kGpuBytes * last_client->memory_fraction);
  args->bytes_limit_is_set = true;
  return Ok();
}

// ---- Extensions: the ABI of XLA's extension headers, declared once, in
// myplugin's pjrt/engine_extensions.h (UBSan's function check then sees the
// same types on both sides of a forwarded call) ----

using CustomCallArgs = myplugin::GpuRegisterCustomCallArgs;
using GpuCustomCall = myplugin::GpuCustomCallExtension;
using PartitionerArgs = myplugin::RegisterCustomPartitionerArgs;
using BatchArgs = myplugin::RegisterBatchPartitionableArgs;
using CustomPartitioner = myplugin::CustomPartitionerExtension;
using GetStreamArgs = myplugin::GetStreamArgs;
using WaitStreamArgs = myplugin::WaitStreamArgs;
using Stream = myplugin::StreamExtension;
using TritonArgs = myplugin::TritonCompileArgs;
using Triton = myplugin::TritonExtension;

std::string calls;  // "what(name);..." of the extension entries called

void Record(const std::string& what) { calls += what + ";"; }
bool Fails(const char* name, size_t size) { return size >= 4 && std::string(name, 4) == "fail"; }
PJRT_Error* Failure(const std::string& what) { return new PJRT_Error{"the fake engine refuses " + what}; }

PJRT_Error* CustomCall(CustomCallArgs* args) {
  std::string name(args->function_name, args->function_name_size);
  if (Fails(args->function_name, args->function_name_size)) return Failure(name);
  Record("custom_call(" + name + ")");
  return Ok();
}

PJRT_Error* RegisterPartitioner(PartitionerArgs* args) {
  Record("partitioner(" + std::string(args->name, args->name_size) + ")");
  return Ok();
}
PJRT_Error* RegisterBatch(BatchArgs* args) {
  Record("batch(" + std::string(args->name, args->name_size) + ")");
  return Ok();
}

PJRT_Error* GetStream(GetStreamArgs* args) {
  args->stream = 1234;
  Record("get_stream");
  return Ok();
}
PJRT_Error* WaitStream(WaitStreamArgs* args) {
  Record("wait_stream(" + std::to_string(args->stream) + ")");
  return Ok();
}

PJRT_Error* TritonCompile(TritonArgs* args) {
  if (Fails(args->module, args->module_size)) return Failure("the module");
  Record("triton(" + std::string(args->arch_name, args->arch_name_size) + ")");
  args->out_smem_bytes = 4096;
  return Ok();
}

// Extensions whose entries no test may reach: a call through one would be
// a type passed through that should not be.
PJRT_Error* Forbidden(void*) {
  Record("FORBIDDEN");
  return Ok();
}
struct Opaque {
  PJRT_Extension_Base base;
  PJRT_Error* (*entries[4])(void*);
};

PJRT_Extension_Type Type(int t) { return static_cast<PJRT_Extension_Type>(t); }

Opaque profiler{{sizeof(Opaque), Type(1), nullptr}, {Forbidden, Forbidden, Forbidden, Forbidden}};
CustomPartitioner partitioner{{sizeof(CustomPartitioner), Type(2), &profiler.base}, RegisterPartitioner, RegisterBatch};
Stream stream{{sizeof(Stream), Type(3), &partitioner.base}, GetStream, WaitStream};
GpuCustomCall custom_call{{sizeof(GpuCustomCall), Type(0), &stream.base}, CustomCall, true};
Opaque layouts{{sizeof(Opaque), Type(4), &custom_call.base}, {Forbidden, Forbidden, Forbidden, Forbidden}};
Opaque ffi{{sizeof(Opaque), Type(5), &layouts.base}, {Forbidden, Forbidden, Forbidden, Forbidden}};
Opaque memory_descriptions{{sizeof(Opaque), Type(6), &ffi.base}, {Forbidden, Forbidden, Forbidden, Forbidden}};
Triton triton{{sizeof(Triton), Type(7), &memory_descriptions.base}, TritonCompile};
Opaque cross_host{{sizeof(Opaque), Type(12), &triton.base}, {Forbidden, Forbidden, Forbidden, Forbidden}};
Opaque unknown{{sizeof(Opaque), Type(99), &cross_host.base}, {Forbidden, Forbidden, Forbidden, Forbidden}};
Opaque shardings{{sizeof(Opaque), Type(19), &unknown.base}, {Forbidden, Forbidden, Forbidden, Forbidden}};
Opaque transforms{{sizeof(Opaque), Type(24), &shardings.base}, {Forbidden, Forbidden, Forbidden, Forbidden}};
Opaque abi_version{{sizeof(Opaque), Type(20), &transforms.base}, {Forbidden, Forbidden, Forbidden, Forbidden}};

PJRT_Api MakeApi() {
  PJRT_Api api{};
  api.struct_size = PJRT_Api_STRUCT_SIZE;
  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
  api.pjrt_api_version.major_version = PJRT_API_MAJOR;
  api.pjrt_api_version.minor_version = PJRT_API_MINOR;
  api.extension_start = &abi_version.base;
  api.PJRT_Plugin_Initialize = PluginInitialize;
  api.PJRT_Error_Destroy = ErrorDestroy;
  api.PJRT_Error_Message = ErrorMessage;
  api.PJRT_Error_GetCode = ErrorGetCode;
  api.PJRT_Client_Create = ClientCreate;
  api.PJRT_Client_Destroy = ClientDestroy;
  api.PJRT_Client_AddressableDevices = AddressableDevices;
  api.PJRT_Client_PlatformName = PlatformName;
  api.PJRT_Client_PlatformVersion = PlatformVersion;
  api.PJRT_Device_MemoryStats = MemoryStats;
  return api;
}

const PJRT_Api kApi = MakeApi();

}  // namespace

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() { return &kApi; }

// What the last client was created with: "name=value;..." in the order given.
extern "C" __attribute__((visibility("default"))) const char* FakeEngineRecordedOptions() { return recorded.c_str(); }

// The extension entries called so far ("custom_call(name);..."), then cleared.
extern "C" __attribute__((visibility("default"))) const char* FakeEngineExtensionCalls() {
  static std::string taken;
  taken = calls;
  calls.clear();
  return taken.c_str();
}
