#include "pjrt/cost_analysis.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/process_runtime.h"
#include "engine/engine_executable.h"
#include "pjrt/executable.h"
#include "pjrt/forwarding.h"
#include "pjrt/gpu_compile.h"
#include "spmd/cost_analysis_hook.h"

namespace myplugin {
namespace {

struct Properties {
  std::vector<std::string> names;
  std::vector<PJRT_NamedValue> values;
};

// Keyed by the engine's PJRT_Executable, which jax destroys through us.
struct PropertiesTable {
  std::mutex mu;
  std::unordered_map<PJRT_Executable*, std::unique_ptr<Properties>> of;
};

PropertiesTable& Table() {
  static PropertiesTable& table = collectives::ProcessRuntime::Get().Attached<PropertiesTable>();  // once: the owner never replaces what it holds
  return table;
}

bool ReadVarint(const std::string& s, size_t& pos, uint64_t& out) {
  out = 0;
  for (int shift = 0; shift < 64 && pos < s.size(); shift += 7) {
    uint8_t byte = static_cast<uint8_t>(s[pos++]);
    out |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// HloModuleProtoWithConfig { HloModuleProto hlo_module = 1; HloModuleConfigProto config = 2; }
// (xla/service/hlo.proto): the module is field 1, length-delimited.
StatusOr<std::string> ModuleOfProtoWithConfig(const std::string& bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint64_t key = 0;
    if (!ReadVarint(bytes, pos, key)) break;
    const uint64_t field = key >> 3;
    const int wire = static_cast<int>(key & 7);
    uint64_t n = 0;
    switch (wire) {
      case 0:
        if (!ReadVarint(bytes, pos, n)) return DataLoss("the engine's optimized program is not a valid protobuf");
        continue;
      case 1:
        pos += 8;
        continue;
      case 5:
        pos += 4;
        continue;
      case 2:
        if (!ReadVarint(bytes, pos, n) || n > bytes.size() - pos) {
          return DataLoss("the engine's optimized program is not a valid protobuf");
        }
        if (field == 1) return bytes.substr(pos, n);
        pos += n;
        continue;
      default:
        return DataLoss("the engine's optimized program is not a valid protobuf");
    }
  }
  return DataLoss("the engine's optimized program holds no HLO module");
}

// `engine` made `executable`: ours, or a compile-only GPU target's CUDA engine.
StatusOr<std::unique_ptr<Properties>> Analyze(const EngineLibrary& engine, PJRT_Executable* executable) {
  spmd::CostAnalysisHook hook = spmd::GetCostAnalysisHook();
  if (!hook) {
    return Unimplemented("cost analysis of myplugin executables needs the jax_plugin package loaded");
  }
  std::string format;
  StatusOr<std::string> program = Internal("no program");
  const LoadedExecutable* origin = OriginOf(executable);
  if (origin != nullptr && origin->stood_in_for() != nullptr) {
    // A multi-process program's analysis is its whole program's per device,
    // as on jax's CPU backend; the local executable (our collectives in
    // place of XLA's) would count other bytes.
    // (Under the CUDA engine the whole program is the CPU shadow's, which
    // cannot speak for the GPU: the local part answers there.)
    StatusOr<const EngineExecutable*> whole = origin->WholeProgramExecutable();
    if (!whole.ok()) return whole.status();
    program = &whole.value()->engine() == &Engine()
                  ? whole.value()->OptimizedProgram(&format)
                  : EngineExecutable::OptimizedProgram(Engine(), executable, &format);
  } else {
    program = EngineExecutable::OptimizedProgram(engine, executable, &format);
  }
  if (!program.ok()) return program.status();
  std::string module;
  if (format == "hlo_with_config") {
    StatusOr<std::string> m = ModuleOfProtoWithConfig(program.value());
    if (!m.ok()) return m.status();
    module = m.take();
  } else if (format == "hlo") {
    module = program.take();
  } else {
    return Unimplemented("the XLA engine returned its optimized program as '" + format +
                         "'; cost analysis reads HLO only");
  }
  StatusOr<spmd::CostProperties> props = hook(module);
  if (!props.ok()) return props.status();
  auto out = std::make_unique<Properties>();
  out->names.reserve(props.value().size());
  for (const auto& [name, value] : props.value()) out->names.push_back(name);
  for (size_t i = 0; i < props.value().size(); ++i) {
    PJRT_NamedValue v{};
    v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    v.name = out->names[i].data();
    v.name_size = out->names[i].size();
    v.type = PJRT_NamedValue_kFloat;  // what XLA's HloCostAnalysis properties are
    v.float_value = static_cast<float>(props.value()[i].second);
    v.value_size = 1;
    out->values.push_back(v);
  }
  return out;
}

}  // namespace

PJRT_Error* ExecutableGetCostAnalysis(PJRT_Executable_GetCostAnalysis_Args* args) {
  {
    PropertiesTable& table = Table();
    std::lock_guard<std::mutex> lock(table.mu);
    auto it = table.of.find(args->executable);
    if (it != table.of.end()) {
      args->num_properties = it->second->values.size();
      args->properties = it->second->values.data();
      return nullptr;
    }
  }
  // A compile-only GPU program (pjrt/gpu_compile.h) is its CUDA engine's
  // (the first process's local program, for one over several processes).
  TargetExecutable* target = TargetExecutableOf(args->executable);
  const EngineLibrary& engine = target ? target->engine() : Engine();
  PJRT_Executable* engine_executable = target ? target->primary() : args->executable;
  if (auto* engine_fn = engine.api()->PJRT_Executable_GetCostAnalysis) {
    ScopedSwap<PJRT_Executable*> swap(args->executable, engine_executable);
    Status answer = engine.Consume(engine_fn(args));
    if (answer.ok() && target == nullptr) return nullptr;  // an engine that answers itself is believed
    if (answer.ok()) {
      // Its properties live as long as its executable, which is ours to keep.
      auto out = std::make_unique<Properties>();
      for (size_t i = 0; i < args->num_properties; ++i) {
        out->names.emplace_back(args->properties[i].name, args->properties[i].name_size);
      }
      for (size_t i = 0; i < args->num_properties; ++i) {
        PJRT_NamedValue v = args->properties[i];
        v.name = out->names[i].data();
        out->values.push_back(v);
      }
      PropertiesTable& table = Table();
      std::lock_guard<std::mutex> lock(table.mu);
      auto& slot = table.of[args->executable];
      if (!slot) slot = std::move(out);
      args->num_properties = slot->values.size();
      args->properties = slot->values.data();
      return nullptr;
    }
    if (answer.code() != Code::kUnimplemented) return ToPjrtError(answer);
  }
  // Outside the lock: the analysis takes the GIL, and another thread holding
  // it may be waiting for this lock.
  StatusOr<std::unique_ptr<Properties>> props = Analyze(engine, engine_executable);
  if (!props.ok()) return ToPjrtError(props.status());
  PropertiesTable& table = Table();
  std::lock_guard<std::mutex> lock(table.mu);
  auto& slot = table.of[args->executable];
  if (!slot) slot = props.take();
  args->num_properties = slot->values.size();
  args->properties = slot->values.data();
  return nullptr;
}

void ForgetCostAnalysis(PJRT_Executable* engine_executable) {
  PropertiesTable& table = Table();
  std::lock_guard<std::mutex> lock(table.mu);
  table.of.erase(engine_executable);
}

}  // namespace myplugin
