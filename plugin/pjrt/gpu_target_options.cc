#include "pjrt/gpu_target_options.h"

namespace myplugin {

StatusOr<GpuTargetOptions> ParseGpuTargetOptions(const std::string& topology_name, const PJRT_NamedValue* values,
                                                 size_t count, int cuda_major) {
  static const char kAccepted[] =
      "myplugin's GPU topologies take topology='<slices>x<hosts>x<GPUs per host>' and gpu='<name>' or "
      "target_config='<GpuTargetConfigProto text>'";
  std::string topology = topology_name, gpu, config;
  bool have_topology = !topology_name.empty();
  for (size_t i = 0; i < count; ++i) {
    const PJRT_NamedValue& v = values[i];
    const std::string name(v.name, v.name_size);
    if (name != "topology" && name != "gpu" && name != "target_config") {
      return InvalidArgument("unknown option '" + name + "': " + kAccepted);
    }
    if (v.type != PJRT_NamedValue_kString) return InvalidArgument("option '" + name + "' must be a string");
    const std::string text(v.string_value, v.value_size);
    if (name == "topology") {
      topology = text;
      have_topology = true;
    } else if (name == "gpu") {
      gpu = text;
    } else {
      config = text;
    }
  }
  if (!have_topology) return InvalidArgument(std::string("no topology given: ") + kAccepted);
  if (gpu.empty() == config.empty()) {
    return InvalidArgument(std::string(gpu.empty() ? "no GPU given: " : "both gpu and target_config given: ") +
                           kAccepted);
  }
  GpuTargetOptions out;
  StatusOr<GpuTopologyShape> shape = ParseGpuTopology(topology);
  if (!shape.ok()) return shape.status();
  out.shape = shape.value();
  if (!gpu.empty()) {
    StatusOr<GpuSpec> spec = FindGpu(gpu);
    if (!spec.ok()) return spec.status();
    out.target_config = TargetConfigText(spec.value(), cuda_major);
    out.id = GpuTargetId{spec.value().device_kind, spec.value().cc_major, spec.value().cc_minor};
    return out;
  }
  StatusOr<GpuTargetId> id = TargetIdOfConfig(config);
  if (!id.ok()) return id.status();
  out.id = id.value();
  out.target_config = config;
  return out;
}

}  // namespace myplugin
