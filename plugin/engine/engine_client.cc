#include "engine/engine_client.h"

#include <cstring>

namespace myplugin {
namespace {

PJRT_NamedValue Named(const char* name, PJRT_NamedValue_Type type) {
  PJRT_NamedValue v{};
  v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v.name = name;
  v.name_size = std::strlen(name);
  v.type = type;
  v.value_size = 1;
  return v;
}

PJRT_NamedValue Int64Option(const char* name, int64_t value) {
  PJRT_NamedValue v = Named(name, PJRT_NamedValue_kInt64);
  v.int64_value = value;
  return v;
}

// The engine's limit on one device's memory (what its allocator may hold), or
// 0 when it does not say.
int64_t DeviceBytesLimit(const EngineLibrary& engine, PJRT_Device* device) {
  MYPLUGIN_PJRT_ARGS(PJRT_Device_MemoryStats_Args, args);
  args.device = device;
  if (!engine.Consume(engine.api()->PJRT_Device_MemoryStats(&args)).ok()) return 0;
  return args.bytes_limit_is_set ? args.bytes_limit : 0;
}

}  // namespace

std::vector<PJRT_NamedValue> EngineCreateOptions(const EngineClientOptions& options) {
  std::vector<PJRT_NamedValue> create_options;
  if (options.cpu) {
    create_options.push_back(Int64Option("cpu_device_count", options.num_devices));
    return create_options;
  }
  if (!options.visible_devices.empty()) {
    PJRT_NamedValue v = Named("visible_devices", PJRT_NamedValue_kInt64List);
    v.int64_array_value = options.visible_devices.data();
    v.value_size = options.visible_devices.size();
    create_options.push_back(v);
  }
  const GpuMemorySettings& memory = options.gpu_memory;
  PJRT_NamedValue allocator = Named("allocator", PJRT_NamedValue_kString);
  allocator.string_value = memory.allocator.c_str();
  allocator.value_size = memory.allocator.size();
  create_options.push_back(allocator);
  if (memory.memory_fraction.has_value()) {
    PJRT_NamedValue v = Named("memory_fraction", PJRT_NamedValue_kFloat);
    v.float_value = static_cast<float>(*memory.memory_fraction);
    create_options.push_back(v);
  }
  if (memory.preallocate.has_value()) {
    PJRT_NamedValue v = Named("preallocate", PJRT_NamedValue_kBool);
    v.bool_value = *memory.preallocate;
    create_options.push_back(v);
  }
  if (memory.collective_memory_bytes.has_value()) {
    create_options.push_back(Int64Option("collective_memory_size", *memory.collective_memory_bytes));
  }
  return create_options;
}

StatusOr<std::unique_ptr<EngineClient>> EngineClient::Create(const EngineLibrary& engine,
                                                             const EngineClientOptions& options) {
  std::vector<PJRT_NamedValue> create_options = EngineCreateOptions(options);
  MYPLUGIN_PJRT_ARGS(PJRT_Client_Create_Args, args);
  args.create_options = create_options.data();
  args.num_options = create_options.size();
  Status st = engine.Consume(engine.api()->PJRT_Client_Create(&args));
  if (!st.ok()) {
    return Status(st.code(), "the XLA engine (" + engine.path() + ") failed to create a client: " + st.message());
  }
  std::unique_ptr<EngineClient> client(new EngineClient(engine, args.client));
  MYPLUGIN_RETURN_IF_ERROR(client->ReadTopology());
  if (static_cast<int>(client->devices_.size()) != options.num_devices && !(options.num_devices == 0 && !options.cpu)) {
    if (!options.cpu) {
      return InvalidArgument("the CUDA engine sees " + std::to_string(client->devices_.size()) +
                             " GPUs, but this process registered " + std::to_string(options.num_devices) +
                             " devices (set MYPLUGIN_NUM_DEVICES or local_device_ids to match)");
    }
    return Internal("asked the XLA engine for " + std::to_string(options.num_devices) +
                    " devices and got " + std::to_string(client->devices_.size()));
  }
  if (!options.cpu) {
    for (PJRT_Device* device : client->devices_) {
      MYPLUGIN_RETURN_IF_ERROR(CheckGpuMemoryShare(DeviceBytesLimit(engine, device), options.gpu_memory));
    }
  }
  return client;
}

EngineClient::~EngineClient() {
  MYPLUGIN_PJRT_ARGS(PJRT_Client_Destroy_Args, args);
  args.client = client_;
  engine_.Consume(api()->PJRT_Client_Destroy(&args));
}

Status EngineClient::ReadTopology() {
  MYPLUGIN_PJRT_ARGS(PJRT_Client_AddressableDevices_Args, devs);
  devs.client = client_;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api()->PJRT_Client_AddressableDevices(&devs)));
  devices_.assign(devs.addressable_devices, devs.addressable_devices + devs.num_addressable_devices);

  MYPLUGIN_PJRT_ARGS(PJRT_Client_PlatformName_Args, name);
  name.client = client_;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api()->PJRT_Client_PlatformName(&name)));
  platform_name_.assign(name.platform_name, name.platform_name_size);

  MYPLUGIN_PJRT_ARGS(PJRT_Client_PlatformVersion_Args, version);
  version.client = client_;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api()->PJRT_Client_PlatformVersion(&version)));
  platform_version_.assign(version.platform_version, version.platform_version_size);
  return OkStatus();
}

namespace {

StatusOr<PJRT_DeviceDescription*> Description(const EngineLibrary& engine, PJRT_Device* device) {
  MYPLUGIN_PJRT_ARGS(PJRT_Device_GetDescription_Args, args);
  args.device = device;
  MYPLUGIN_RETURN_IF_ERROR(engine.Consume(engine.api()->PJRT_Device_GetDescription(&args)));
  return args.device_description;
}

}  // namespace

StatusOr<int> EngineClient::DeviceId(PJRT_Device* device) const {
  StatusOr<PJRT_DeviceDescription*> desc = Description(engine_, device);
  if (!desc.ok()) return desc.status();
  MYPLUGIN_PJRT_ARGS(PJRT_DeviceDescription_Id_Args, args);
  args.device_description = desc.value();
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api()->PJRT_DeviceDescription_Id(&args)));
  return args.id;
}

StatusOr<std::string> EngineClient::DeviceKind(PJRT_Device* device) const {
  StatusOr<PJRT_DeviceDescription*> desc = Description(engine_, device);
  if (!desc.ok()) return desc.status();
  MYPLUGIN_PJRT_ARGS(PJRT_DeviceDescription_Kind_Args, args);
  args.device_description = desc.value();
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api()->PJRT_DeviceDescription_Kind(&args)));
  return std::string(args.device_kind, args.device_kind_size);
}

StatusOr<int> EngineClient::LocalHardwareId(PJRT_Device* device) const {
  MYPLUGIN_PJRT_ARGS(PJRT_Device_LocalHardwareId_Args, args);
  args.device = device;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api()->PJRT_Device_LocalHardwareId(&args)));
  return args.local_hardware_id;
}

StatusOr<std::vector<PJRT_Memory*>> EngineClient::DeviceMemories(PJRT_Device* device) const {
  MYPLUGIN_PJRT_ARGS(PJRT_Device_AddressableMemories_Args, args);
  args.device = device;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api()->PJRT_Device_AddressableMemories(&args)));
  return std::vector<PJRT_Memory*>(args.memories, args.memories + args.num_memories);
}

StatusOr<PJRT_Memory*> EngineClient::DefaultMemory(PJRT_Device* device) const {
  MYPLUGIN_PJRT_ARGS(PJRT_Device_DefaultMemory_Args, args);
  args.device = device;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api()->PJRT_Device_DefaultMemory(&args)));
  return args.memory;
}

StatusOr<std::string> EngineClient::MemoryKind(PJRT_Memory* memory) const {
  MYPLUGIN_PJRT_ARGS(PJRT_Memory_Kind_Args, args);
  args.memory = memory;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api()->PJRT_Memory_Kind(&args)));
  return std::string(args.kind, args.kind_size);
}

StatusOr<int> EngineClient::MemoryKindId(PJRT_Memory* memory) const {
  MYPLUGIN_PJRT_ARGS(PJRT_Memory_Kind_Id_Args, args);
  args.memory = memory;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api()->PJRT_Memory_Kind_Id(&args)));
  return args.kind_id;
}

StatusOr<int> EngineClient::MemoryId(PJRT_Memory* memory) const {
  MYPLUGIN_PJRT_ARGS(PJRT_Memory_Id_Args, args);
  args.memory = memory;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api()->PJRT_Memory_Id(&args)));
  return args.id;
}

}  // namespace myplugin
