// A stand-in for XLA's CUDA engine, loaded by the unit tests as a real
// engine library is (dlopen, GetPjrtApi, PJRT_Plugin_Initialize): it
// records the create options its client is given and answers the few calls
// EngineClient::Create makes, with one "GPU" of 80 GiB whose allocator limit
// follows memory_fraction (0.75 when not given, the CUDA engine's default).
#include <cstdint>
#include <cstring>
#include <string>

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

PJRT_Api MakeApi() {
  PJRT_Api api{};
  api.struct_size = PJRT_Api_STRUCT_SIZE;
  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
  api.pjrt_api_version.major_version = PJRT_API_MAJOR;
  api.pjrt_api_version.minor_version = PJRT_API_MINOR;
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
