#include "pjrt/client_options.h"

#include <string>

#include "common/parse_int.h"

namespace myplugin {
namespace {

const char kAccepted[] =
    "num_devices, node_id, num_nodes, partition_index, visible_devices, allocator, memory_fraction, preallocate, "
    "collective_memory_size";

StatusOr<int64_t> IntValue(const PJRT_NamedValue& v, const std::string& name) {
  if (v.type == PJRT_NamedValue_kInt64) return v.int64_value;
  if (v.type == PJRT_NamedValue_kString) {
    // jax_pjrt_client_create_options="key:value" delivers strings.
    std::string text(v.string_value, v.value_size);
    int64_t parsed;
    if (ParseInt64(text, &parsed)) return parsed;
    return InvalidArgument("myplugin client option '" + name + "' must be an integer, got '" + text + "'");
  }
  return InvalidArgument("myplugin client option '" + name + "' must be an integer");
}

Status CheckDeviceCount(int64_t n, const std::string& source) {
  if (n < 1 || n > kMaxLocalDevices) {
    return InvalidArgument(source + " must be a whole number of devices from 1 to " +
                           std::to_string(kMaxLocalDevices) + ", got " + std::to_string(n));
  }
  return OkStatus();
}

bool IsGpuMemoryOption(const std::string& name) {
  return name == "allocator" || name == "memory_fraction" || name == "preallocate" || name == "collective_memory_size";
}

std::string TextOf(const PJRT_NamedValue& v) { return std::string(v.string_value, v.value_size); }

// jax's CUDA backend's create options, with the names and types jax gives
// them; jax_pjrt_client_create_options="memory_fraction:0.5" delivers text.
// They win over jax's variables, as they do in jax (its options dict is
// updated with them).
Status ApplyGpuMemoryOption(const PJRT_NamedValue& v, const std::string& name, GpuMemorySettings* s) {
  const std::string source = "myplugin client option '" + name + "'";
  if (name == "allocator") {
    if (v.type != PJRT_NamedValue_kString) return InvalidArgument(source + " must be a string");
    return SetGpuAllocator(TextOf(v), source, s);
  }
  if (name == "memory_fraction") {
    if (v.type == PJRT_NamedValue_kFloat) return SetGpuMemoryFractionValue(v.float_value, source, s);
    if (v.type == PJRT_NamedValue_kString) return SetGpuMemoryFraction(TextOf(v), source, s);
    return InvalidArgument(source + " must be a number");
  }
  if (name == "preallocate") {
    if (v.type == PJRT_NamedValue_kBool) {
      s->preallocate = v.bool_value;
    } else if (v.type == PJRT_NamedValue_kString) {
      SetGpuPreallocate(TextOf(v), s);
    } else if (v.type == PJRT_NamedValue_kInt64) {
      s->preallocate = v.int64_value != 0;
    } else {
      return InvalidArgument(source + " must be true or false");
    }
    return OkStatus();
  }
  // collective_memory_size, in bytes as jax passes it.
  StatusOr<int64_t> bytes = IntValue(v, name);
  if (!bytes.ok()) return bytes.status();
  return SetGpuCollectiveMemoryBytes(bytes.value(), source, s);
}

}  // namespace

StatusOr<ClientOptions> ParseClientOptions(const PJRT_NamedValue* values, size_t count,
                                           const EnvLookup& getenv) {
  ClientOptions options;
  bool num_devices_given = false;
  // The settings first: the client's own options override jax's variables.
  StatusOr<Settings> settings = ParseSettings(getenv);
  if (!settings.ok()) return settings.status();
  options.settings = settings.take();
  for (size_t i = 0; i < count; ++i) {
    const PJRT_NamedValue& v = values[i];
    std::string name(v.name, v.name_size);
    if (name == "num_devices") {
      StatusOr<int64_t> n = IntValue(v, name);
      if (!n.ok()) return n.status();
      MYPLUGIN_RETURN_IF_ERROR(CheckDeviceCount(n.value(), "myplugin client option 'num_devices'"));
      options.num_devices = static_cast<int>(n.value());
      options.num_devices_given = num_devices_given = true;
    } else if (name == "node_id" || name == "num_nodes") {
      StatusOr<int64_t> n = IntValue(v, name);
      if (!n.ok()) return n.status();
      (name == "node_id" ? options.node_id : options.num_nodes) = static_cast<int>(n.value());
    } else if (name == "visible_devices") {
      if (v.type != PJRT_NamedValue_kInt64List) {
        return InvalidArgument("myplugin client option 'visible_devices' must be a list of integers");
      }
      options.visible_devices.assign(v.int64_array_value, v.int64_array_value + v.value_size);
      for (int64_t id : options.visible_devices) {
        if (id < 0) {
          return InvalidArgument("myplugin client option 'visible_devices' holds a negative device id: " +
                                 std::to_string(id));
        }
      }
    } else if (IsGpuMemoryOption(name)) {
      MYPLUGIN_RETURN_IF_ERROR(ApplyGpuMemoryOption(v, name, &options.settings.gpu_memory));
    } else if (name == "partition_index") {
      // Accepted for jax.distributed's sake; one partition per process is all we run.
    } else {
      return InvalidArgument("unknown myplugin client option '" + name + "' (accepted: " + kAccepted + ")");
    }
  }
  if (!num_devices_given) {
    const char* env = getenv("MYPLUGIN_NUM_DEVICES");
    if (env != nullptr && *env != '\0') {
      int64_t n;
      if (!ParseInt64(env, &n)) {
        return InvalidArgument(std::string("MYPLUGIN_NUM_DEVICES must be a whole number of devices from 1 to ") +
                               std::to_string(kMaxLocalDevices) + ", got '" + env + "'");
      }
      MYPLUGIN_RETURN_IF_ERROR(CheckDeviceCount(n, "MYPLUGIN_NUM_DEVICES"));
      options.num_devices = static_cast<int>(n);
      options.num_devices_given = true;
    }
  }
  return options;
}

}  // namespace myplugin
