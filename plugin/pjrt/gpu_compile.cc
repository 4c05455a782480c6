#include "pjrt/gpu_compile.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <unordered_set>

#include "collectives/process_runtime.h"
#include "common/settings.h"
#include "pjrt/build_id.h"
#include "pjrt/client.h"
#include "pjrt/device_assignment.h"
#include "pjrt/engine_instance.h"
#include "pjrt/serialized_executable.h"

namespace myplugin {
namespace {

// Every live TargetExecutable: jax hands them back to entry points that
// otherwise receive the engine's own executables.
struct LiveTargets {
  std::mutex mu;
  std::unordered_set<const void*> of;
};

LiveTargets& Live() {
  static LiveTargets& live = collectives::ProcessRuntime::Get().Attached<LiveTargets>();  // the owner never replaces it
  return live;
}

// How many are alive: none outside compile-only GPU topologies, so every
// executable entry point's look is one load there.
std::atomic<int> live_count{0};

StatusOr<PJRT_TopologyDescription*> EngineTopology(const EngineLibrary& engine, const std::string& shape,
                                                   const std::string& target_config) {
  // The CUDA engine reads the shape from its `topology` option (the
  // positional name is ignored) and needs the target as text, else it
  // looks for a GPU.
  PJRT_NamedValue options[2]{};
  const std::string names[2] = {"topology", "target_config"};
  const std::string* values[2] = {&shape, &target_config};
  for (int i = 0; i < 2; ++i) {
    options[i].struct_size = PJRT_NamedValue_STRUCT_SIZE;
    options[i].name = names[i].data();
    options[i].name_size = names[i].size();
    options[i].type = PJRT_NamedValue_kString;
    options[i].string_value = values[i]->data();
    options[i].value_size = values[i]->size();
  }
  MYPLUGIN_PJRT_ARGS(PJRT_TopologyDescription_Create_Args, args);
  args.topology_name = shape.data();
  args.topology_name_size = shape.size();
  args.create_options = options;
  args.num_options = 2;
  Status st = engine.Consume(engine.api()->PJRT_TopologyDescription_Create(&args));
  if (!st.ok()) return Status(st.code(), "XLA's CUDA engine refused the GPU target: " + st.message());
  return args.topology;
}

void DestroyEngineTopology(const EngineLibrary& engine, PJRT_TopologyDescription* topology) {
  if (topology == nullptr) return;
  MYPLUGIN_PJRT_ARGS(PJRT_TopologyDescription_Destroy_Args, args);
  args.topology = topology;
  engine.Consume(engine.api()->PJRT_TopologyDescription_Destroy(&args));
}

// (id, process index) of each device of the engine's topology.
StatusOr<std::vector<std::pair<int, int>>> EngineDevices(const EngineLibrary& engine,
                                                         PJRT_TopologyDescription* topology) {
  MYPLUGIN_PJRT_ARGS(PJRT_TopologyDescription_GetDeviceDescriptions_Args, list);
  list.topology = topology;
  MYPLUGIN_RETURN_IF_ERROR(engine.Consume(engine.api()->PJRT_TopologyDescription_GetDeviceDescriptions(&list)));
  std::vector<std::pair<int, int>> out;
  for (size_t i = 0; i < list.num_descriptions; ++i) {
    MYPLUGIN_PJRT_ARGS(PJRT_DeviceDescription_Id_Args, id);
    id.device_description = list.descriptions[i];
    MYPLUGIN_RETURN_IF_ERROR(engine.Consume(engine.api()->PJRT_DeviceDescription_Id(&id)));
    MYPLUGIN_PJRT_ARGS(PJRT_DeviceDescription_ProcessIndex_Args, process);
    process.device_description = list.descriptions[i];
    MYPLUGIN_RETURN_IF_ERROR(engine.Consume(engine.api()->PJRT_DeviceDescription_ProcessIndex(&process)));
    out.emplace_back(id.id, process.process_index);
  }
  return out;
}

}  // namespace

std::string TargetWriter(const EngineLibrary& cuda_engine) {
  return std::string(kPlatformName) + " " + kPluginVersion + " (build " + BuildId() +
         ") for XLA's CUDA engine (PJRT C API " + cuda_engine.ApiVersionString() + ")";
}

// ---- UnloadedExecutable ----

UnloadedExecutable::~UnloadedExecutable() {
  if (executable_ == nullptr) return;
  MYPLUGIN_PJRT_ARGS(PJRT_Executable_Destroy_Args, args);
  args.executable = executable_;
  engine_.Consume(engine_.api()->PJRT_Executable_Destroy(&args));
}

StatusOr<std::string> UnloadedExecutable::Serialize() const {
  MYPLUGIN_PJRT_ARGS(PJRT_Executable_Serialize_Args, ser);
  ser.executable = executable_;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(engine_.api()->PJRT_Executable_Serialize(&ser)));
  std::string bytes(ser.serialized_bytes, ser.serialized_bytes_size);
  if (ser.serialized_executable_deleter) ser.serialized_executable_deleter(ser.serialized_executable);
  return bytes;
}

// ---- TargetExecutable ----

TargetExecutable::TargetExecutable(const EngineLibrary& engine, GpuTargetOptions target, std::string writer)
    : engine_(engine), target_(std::move(target)), writer_(std::move(writer)) {
  LiveTargets& live = Live();
  std::lock_guard<std::mutex> lock(live.mu);
  live.of.insert(this);
  live_count.fetch_add(1, std::memory_order_release);
}

TargetExecutable::~TargetExecutable() {
  LiveTargets& live = Live();
  std::lock_guard<std::mutex> lock(live.mu);
  live.of.erase(this);
  live_count.fetch_sub(1, std::memory_order_release);
}

TargetExecutable* TargetExecutableOf(const PJRT_Executable* executable) {
  // A handle jax holds was made before it is passed back: with none alive,
  // it is not one of them.
  if (live_count.load(std::memory_order_acquire) == 0) return nullptr;
  LiveTargets& live = Live();
  std::lock_guard<std::mutex> lock(live.mu);
  auto it = live.of.find(executable);
  return it == live.of.end() ? nullptr : static_cast<TargetExecutable*>(const_cast<void*>(*it));
}

PJRT_Executable* TargetExecutable::primary() const {
  if (single_) return single_->get();
  for (const ProcessPart& p : parts_) {
    if (p.executable) return p.executable->get();
  }
  return nullptr;
}

void TargetExecutable::SetSingle(std::unique_ptr<UnloadedExecutable> executable) {
  multiprocess_ = false;
  single_ = std::move(executable);
}

void TargetExecutable::SetMultiProcess(std::vector<ProcessPart> parts, std::vector<std::vector<int64_t>> assignment,
                                       std::string partitioned_module) {
  multiprocess_ = true;
  parts_ = std::move(parts);
  assignment_ = std::move(assignment);
  partitioned_module_ = std::move(partitioned_module);
}

StatusOr<std::string> TargetExecutable::OptimizedProgram(std::string* format) const {
  StatusOr<std::string> local = EngineExecutable::OptimizedProgram(engine_, primary(), format);
  if (!local.ok() || !multiprocess_) return local;
  if (*format != "hlo_with_config" || partitioned_module_.empty()) {
    return Unimplemented("the whole program of this multi-process GPU compile is not available (the partition did "
                         "not stop after its HLO passes)");
  }
  return LocalProgramAsWhole(local.value(), partitioned_module_, assignment_.size(),
                             assignment_.empty() ? 0 : assignment_[0].size());
}

StatusOr<std::string> TargetExecutable::Serialize() const {
  SerializedExecutable out;
  out.platform_version = writer_;
  out.for_target = true;
  out.target_device_kind = target_.id.device_kind;
  out.target_cc_major = target_.id.cc_major;
  out.target_cc_minor = target_.id.cc_minor;
  out.target_topology = target_.shape.ToString();
  if (!multiprocess_) {
    StatusOr<std::string> bytes = single_->Serialize();
    if (!bytes.ok()) return bytes.status();
    out.engine_executable = bytes.take();
    return EncodeSerializedExecutable(out);
  }
  out.multiprocess = true;
  out.process_independent = false;  // CUDA local programs hold their devices' ids as constants
  out.assignment = assignment_;
  for (const ProcessPart& p : parts_) {
    std::string bytes;
    if (p.executable) {
      StatusOr<std::string> b = p.executable->Serialize();
      if (!b.ok()) return b.status();
      bytes = b.take();
    }
    out.process_executables.push_back(std::move(bytes));
    out.process_device_orders.push_back(p.device_order);
    out.process_engine_ids.push_back(p.engine_ids);
    out.process_compile_options.push_back(p.compile_options);
  }
  return EncodeSerializedExecutable(out);
}

// ---- GpuCompileTarget ----

StatusOr<std::unique_ptr<Topology>> GpuCompileTarget::CreateTopology(const std::string& topology_name,
                                                                     const PJRT_NamedValue* options,
                                                                     size_t num_options) {
  StatusOr<GpuTargetOptions> target = ParseGpuTargetOptions(topology_name, options, num_options,
                                                            CompileEngineCudaMajor());
  if (!target.ok()) return target.status();
  // A compile-only topology is a start of its own: no client reads the settings for it.
  StatusOr<Settings> settings = ParseSettings(ProcessEnvironment);
  if (!settings.ok()) return settings.status();
  StatusOr<const EngineLibrary*> engine = CompileEngine();
  if (!engine.ok()) return engine.status();
  std::shared_ptr<GpuCompileTarget> t(new GpuCompileTarget(*engine.value(), target.take()));
  const GpuTopologyShape& shape = t->target_.shape;
  StatusOr<PJRT_TopologyDescription*> whole = EngineTopology(t->engine_, shape.ToString(), t->target_.target_config);
  if (!whole.ok()) return whole.status();
  t->whole_ = whole.value();
  StatusOr<PJRT_TopologyDescription*> one =
      EngineTopology(t->engine_, "1x1x" + std::to_string(shape.gpus_per_host), t->target_.target_config);
  if (!one.ok()) return one.status();
  t->one_host_ = one.value();
  StatusOr<std::vector<std::pair<int, int>>> devices = EngineDevices(t->engine_, t->whole_);
  if (!devices.ok()) return devices.status();
  if (static_cast<int>(devices.value().size()) != shape.devices()) {
    return Internal("XLA's CUDA engine made " + std::to_string(devices.value().size()) + " devices for topology " +
                    shape.ToString() + ", expected " + std::to_string(shape.devices()));
  }
  std::vector<PJRT_DeviceDescription*> descriptions;
  for (const auto& [id, process] : devices.value()) {
    t->devices_.push_back(std::make_unique<DeviceDescription>(id, process, t->target_.id.device_kind));
    descriptions.push_back(ToC(t->devices_.back().get()));
  }
  // The partitioner of programs over several processes, with every device
  // of the topology (created on first need).
  t->partitioner_ = std::make_unique<spmd::MultiProcessCompiler>(&ShadowEngine, shape.devices(),
                                                                 std::map<int64_t, int64_t>{}, settings.value());
  // Another version than any client's: jax then compiles through this
  // topology, not through a client of the same platform.
  t->version_ = TargetWriter(t->engine_) + ", compile-only: " + shape.ToString() + " " + t->target_.id.ToString();
  auto topology = std::make_unique<Topology>(kPlatformName, t->version_, std::move(descriptions));
  topology->set_compile_target(std::move(t));
  return topology;
}

GpuCompileTarget::~GpuCompileTarget() {
  DestroyEngineTopology(engine_, whole_);
  DestroyEngineTopology(engine_, one_host_);
}

StatusOr<std::unique_ptr<UnloadedExecutable>> GpuCompileTarget::CompileOnEngine(
    const PJRT_Program& program, const std::string& options, PJRT_TopologyDescription* topology) const {
  MYPLUGIN_PJRT_ARGS(PJRT_Compile_Args, args);
  args.topology = topology;
  args.program = &program;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  args.client = nullptr;  // never a client: there may be no GPU
  Status st = engine_.Consume(engine_.api()->PJRT_Compile(&args));
  if (!st.ok()) {
    return Status(st.code(), "compiling for " + target_.id.ToString() + " failed: " + st.message());
  }
  return std::make_unique<UnloadedExecutable>(engine_, args.executable);
}

StatusOr<std::unique_ptr<TargetExecutable>> GpuCompileTarget::Compile(const PJRT_Program& program,
                                                                       const std::string& options) const {
  StatusOr<std::vector<std::vector<int64_t>>> assignment = ReadCompileOptionDevices(options);
  if (!assignment.ok()) return assignment.status();
  std::set<int> processes;
  for (const auto& replica : assignment.value()) {
    for (int64_t id : replica) {
      if (id < 0 || id >= static_cast<int64_t>(devices_.size())) {
        return InvalidArgument("the program names device " + std::to_string(id) + "; topology " +
                               target_.shape.ToString() + " has " + std::to_string(devices_.size()));
      }
      processes.insert(devices_[id]->process_index());
    }
  }
  if (processes.size() > 1) return CompileAcrossProcesses(program, options, assignment.value());
  // One process's GPUs (ours and the engine's ids are the same): the engine's
  // own collectives serve it, as they do at run time.
  StatusOr<std::unique_ptr<UnloadedExecutable>> compiled = CompileOnEngine(program, options, whole_);
  if (!compiled.ok()) return compiled.status();
  auto out = std::make_unique<TargetExecutable>(engine_, target_, TargetWriter(engine_));
  out->SetSingle(compiled.take());
  return out;
}

StatusOr<std::unique_ptr<TargetExecutable>> GpuCompileTarget::CompileAcrossProcesses(
    const PJRT_Program& program, const std::string& options,
    const std::vector<std::vector<int64_t>>& assignment) const {
  if (NcclHandlersForCompile().empty()) {
    return FailedPrecondition("this program spans processes, whose collectives are myplugin's NCCL handlers, but "
                              "this myplugin was built without NCCL's headers (see docs/gpus.md, \"NCCL\")");
  }
  const int processes = target_.shape.processes();
  // Each process's devices, and their ids on one host's engine topology.
  std::vector<std::vector<int64_t>> of_process(processes);
  for (const auto& d : devices_) of_process[d->process_index()].push_back(d->id());
  std::vector<std::map<int64_t, int64_t>> local_ids(processes);
  for (int p = 0; p < processes; ++p) {
    std::sort(of_process[p].begin(), of_process[p].end());
    for (size_t i = 0; i < of_process[p].size(); ++i) local_ids[p][of_process[p][i]] = static_cast<int64_t>(i);
  }
  StatusOr<std::vector<spmd::LocalProgram>> locals =
      partitioner_->PartitionForProcesses(program, options, assignment, local_ids, "cuda");
  if (!locals.ok()) return locals.status();
  std::vector<TargetExecutable::ProcessPart> parts(processes);
  std::string partitioned;
  static constexpr char kHlo[] = "hlo";
  for (int p = 0; p < processes; ++p) {
    spmd::LocalProgram& local = locals.value()[p];
    if (local.device_order.empty()) continue;  // no device of this process in the program
    PJRT_Program hlo{};
    hlo.struct_size = PJRT_Program_STRUCT_SIZE;
    hlo.code = local.hlo_module_proto.data();
    hlo.code_size = local.hlo_module_proto.size();
    hlo.format = kHlo;
    hlo.format_size = sizeof(kHlo) - 1;
    StatusOr<std::unique_ptr<UnloadedExecutable>> compiled = CompileOnEngine(hlo, local.compile_options, one_host_);
    if (!compiled.ok()) {
      return Status(compiled.status().code(),
                    "process " + std::to_string(p) + "'s part: " + compiled.status().message());
    }
    parts[p].executable = compiled.take();
    parts[p].device_order = local.device_order;
    for (int64_t id : local.device_order) parts[p].engine_ids.push_back(local_ids[p].at(id));
    parts[p].compile_options = local.compile_options;
    if (partitioned.empty()) partitioned = local.partitioned_module_proto;
  }
  auto out = std::make_unique<TargetExecutable>(engine_, target_, TargetWriter(engine_));
  out->SetMultiProcess(std::move(parts), assignment, std::move(partitioned));
  return out;
}

}  // namespace myplugin
