#include "pjrt/device.h"

#include <cstring>

#include "pjrt/engine_instance.h"
#include "pjrt/error.h"

namespace myplugin {
namespace {

PJRT_NamedValue StringAttribute(const char* name, const std::string& value) {
  PJRT_NamedValue v{};
  v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v.name = name;
  v.name_size = std::strlen(name);
  v.type = PJRT_NamedValue_kString;
  v.string_value = value.c_str();
  v.value_size = value.size();
  return v;
}

}  // namespace

DeviceDescription::DeviceDescription(int id, int process_index, std::string kind)
    : id_(id), process_index_(process_index), kind_(std::move(kind)) {
  to_string_ = "MypluginDevice(id=" + std::to_string(id_) + ", process_index=" + std::to_string(process_index_) +
               ", kind=" + kind_ + ")";
  debug_string_ = "myplugin:" + std::to_string(id_);
  // Points into kind_, which lives as long as this description.
  attributes_.push_back(StringAttribute("engine_device_kind", kind_));
}

void Device::AddMemory(Memory* memory, bool is_default) {
  c_memories_.push_back(ToC(memory));
  if (is_default) default_memory_ = memory;
}

Memory::Memory(int id, std::string kind, int kind_id, PJRT_Memory* engine_memory)
    : id_(id), kind_(std::move(kind)), kind_id_(kind_id), engine_(engine_memory) {
  to_string_ = "MypluginMemory(id=" + std::to_string(id_) + ", kind=" + kind_ + ")";
  debug_string_ = "myplugin:memory:" + std::to_string(id_) + ":" + kind_;
}

void Memory::AddDevice(Device* device) { c_devices_.push_back(ToC(device)); }

}  // namespace myplugin

// ---- C API adapters ----

namespace myplugin {

PJRT_Error* PjrtDeviceDescriptionId(PJRT_DeviceDescription_Id_Args* args) {
  args->id = FromC(args->device_description)->id();
  return nullptr;
}

PJRT_Error* PjrtDeviceDescriptionProcessIndex(PJRT_DeviceDescription_ProcessIndex_Args* args) {
  args->process_index = FromC(args->device_description)->process_index();
  return nullptr;
}

PJRT_Error* PjrtDeviceDescriptionAttributes(PJRT_DeviceDescription_Attributes_Args* args) {
  const auto& a = FromC(args->device_description)->attributes();
  args->attributes = a.data();
  args->num_attributes = a.size();
  return nullptr;
}

PJRT_Error* PjrtDeviceDescriptionKind(PJRT_DeviceDescription_Kind_Args* args) {
  const std::string& k = FromC(args->device_description)->kind();
  args->device_kind = k.data();
  args->device_kind_size = k.size();
  return nullptr;
}

PJRT_Error* PjrtDeviceDescriptionDebugString(PJRT_DeviceDescription_DebugString_Args* args) {
  const std::string& s = FromC(args->device_description)->debug_string();
  args->debug_string = s.data();
  args->debug_string_size = s.size();
  return nullptr;
}

PJRT_Error* PjrtDeviceDescriptionToString(PJRT_DeviceDescription_ToString_Args* args) {
  const std::string& s = FromC(args->device_description)->to_string();
  args->to_string = s.data();
  args->to_string_size = s.size();
  return nullptr;
}

PJRT_Error* PjrtDeviceGetDescription(PJRT_Device_GetDescription_Args* args) {
  args->device_description = ToC(&FromC(args->device)->description());
  return nullptr;
}

PJRT_Error* PjrtDeviceIsAddressable(PJRT_Device_IsAddressable_Args* args) {
  args->is_addressable = FromC(args->device)->addressable();
  return nullptr;
}

PJRT_Error* PjrtDeviceLocalHardwareId(PJRT_Device_LocalHardwareId_Args* args) {
  args->local_hardware_id = FromC(args->device)->local_hardware_id();
  return nullptr;
}

PJRT_Error* PjrtDeviceAddressableMemories(PJRT_Device_AddressableMemories_Args* args) {
  const auto& m = FromC(args->device)->c_memories();
  args->memories = m.data();
  args->num_memories = m.size();
  return nullptr;
}

PJRT_Error* PjrtDeviceDefaultMemory(PJRT_Device_DefaultMemory_Args* args) {
  Memory* m = FromC(args->device)->default_memory();
  if (m == nullptr) return ToPjrtError(NotFound("this myplugin device has no default memory"));
  args->memory = ToC(m);
  return nullptr;
}

PJRT_Error* PjrtDeviceMemoryStats(PJRT_Device_MemoryStats_Args* args) {
  Device* device = FromC(args->device);
  if (!device->addressable()) {
    return ToPjrtError(InvalidArgument("memory stats of a device of another process are not available here"));
  }
  args->device = device->engine();
  PJRT_Error* error = ToPjrtError(Engine().Consume(Engine().api()->PJRT_Device_MemoryStats(args)));
  args->device = ToC(device);
  return error;
}

PJRT_Error* PjrtMemoryId(PJRT_Memory_Id_Args* args) {
  args->id = FromC(args->memory)->id();
  return nullptr;
}

PJRT_Error* PjrtMemoryKind(PJRT_Memory_Kind_Args* args) {
  const std::string& k = FromC(args->memory)->kind();
  args->kind = k.data();
  args->kind_size = k.size();
  return nullptr;
}

PJRT_Error* PjrtMemoryKindId(PJRT_Memory_Kind_Id_Args* args) {
  args->kind_id = FromC(args->memory)->kind_id();
  return nullptr;
}

PJRT_Error* PjrtMemoryDebugString(PJRT_Memory_DebugString_Args* args) {
  const std::string& s = FromC(args->memory)->debug_string();
  args->debug_string = s.data();
  args->debug_string_size = s.size();
  return nullptr;
}

PJRT_Error* PjrtMemoryToString(PJRT_Memory_ToString_Args* args) {
  const std::string& s = FromC(args->memory)->to_string();
  args->to_string = s.data();
  args->to_string_size = s.size();
  return nullptr;
}

PJRT_Error* PjrtMemoryAddressableByDevices(PJRT_Memory_AddressableByDevices_Args* args) {
  const auto& d = FromC(args->memory)->c_devices();
  args->devices = d.data();
  args->num_devices = d.size();
  return nullptr;
}

}  // namespace myplugin
