#include "pjrt/engine_extensions.h"

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "pjrt/device.h"
#include "pjrt/entry_point.h"
#include "pjrt/error.h"
#include "pjrt/forwarding.h"
#include "spmd/jaxlib_partitioned_targets.h"

namespace myplugin {
namespace {

// Every type XLA's CUDA and CPU engines offer (read from their chains:
// jax-cuda13-pjrt offers 20, 24, 19, 12, 7, 6, 5, 4, 0, 3, 2, 1; the CPU
// engine 24, 19, 9, 5, 6, 4), and the decision for it.
constexpr ExtensionDecision kDecisions[] = {
    {0, "GPU custom calls", ExtensionPlan::kForwarded,
     "registers a custom-call target (name and handler functions, no PJRT objects) in the engine's registry, as "
     "jax's CUDA plugin extension does with a GPU plugin"},
    {1, "profiler", ExtensionPlan::kAnswered, "myplugin profiles (its own trace beside the engine's)"},
    {2, "custom partitioner", ExtensionPlan::kAnswered,
     "jax registers custom_partitioning's rules right after plugin discovery, before an engine is loaded: myplugin "
     "keeps each registration and hands it to every engine with the extension, the CUDA engine that compiles for "
     "GPU targets included when it loads"},
    {3, "streams", ExtensionPlan::kForwarded,
     "DLPack with a consumer stream: our device swapped for the engine's; buffers are the engine's"},
    {4, "layouts", ExtensionPlan::kForwarded,
     "on-device layouts (pjrt/layouts_extension.cc): our clients, topologies and compile-only executables swapped "
     "for the engine's"},
    {5, "FFI", ExtensionPlan::kAnswered,
     "handlers for platform myplugin go to the engine's platform (Host or CUDA) after an FFI version check "
     "(pjrt/ffi_extension.cc)"},
    {6, "memory descriptions", ExtensionPlan::kNotNeeded,
     "its entries take device descriptions, which are myplugin's own objects (a compile-only topology's have no "
     "engine description behind them); jaxlib lists no memory descriptions then, as with every plugin without it"},
    {7, "Triton", ExtensionPlan::kForwarded,
     "compiles a Triton kernel to PTX for an architecture (no PJRT objects), for jaxlib's Triton compilation "
     "handler"},
    {8, "raw buffers", ExtensionPlan::kNotNeeded, "experimental; neither engine offers it"},
    {9, "phase compile", ExtensionPlan::kNotNeeded,
     "compiles in separate phases for tools; jax does not call it, and myplugin's compile must see the program"},
    {12, "cross-host transfers", ExtensionPlan::kAnswered,
     "jax.device_put across processes goes over myplugin's collectives (pjrt/cross_host_transfers.cc)"},
    {19, "shardings", ExtensionPlan::kNotNeeded,
     "an executable's parameter and output shardings: the engine's executable of a multi-process program is the "
     "local part only; jaxlib reads the whole program's shardings from the optimized HLO without it"},
    {20, "ABI version", ExtensionPlan::kNotNeeded,
     "describes the engine's own ABI; myplugin's table is built against its own header and says so itself"},
    {24, "XLA transforms", ExtensionPlan::kNotNeeded,
     "registers HLO passes in the engine's pipeline; jax does not call it"},
};

// The engine whose forwarded extensions are chained (ForwardEngineExtensions).
const EngineLibrary* forwarded_engine = nullptr;

template <typename Extension>
const Extension* EngineExtension(int type) {
  if (forwarded_engine == nullptr) return nullptr;
  return reinterpret_cast<const Extension*>(
      FindExtensionIn(forwarded_engine->api()->extension_start, static_cast<PJRT_Extension_Type>(type)));
}

// The gate of pjrt/entry_point.h: the struct present and as large as the
// ABI's before a field is read.
template <typename Args>
PJRT_Error* CheckSize(Args* args, const char* name) {
  return CheckArgsSize(name, args, args ? args->struct_size : 0, sizeof(Args));
}

// Calls the engine's entry; its error made ours.
template <typename Args>
PJRT_Error* CallForwarded(PJRT_Error* (*fn)(Args*), Args* args, const char* name) {
  if (fn == nullptr) return ToPjrtError(Unimplemented(std::string("the XLA engine does not implement ") + name));
  return ToPjrtError(forwarded_engine->Consume(fn(args)));
}

// ---- 0: GPU custom calls ----

// Traits arrived in version 3: an older caller's struct ends before them.
constexpr size_t kCustomCallArgsBeforeTraits = offsetof(GpuRegisterCustomCallArgs, traits);

PJRT_Error* RegisterCustomCall(GpuRegisterCustomCallArgs* args) {
  constexpr const char* kName = "PJRT_Gpu_Register_Custom_Call";
  if (PJRT_Error* e = CheckArgsSize(kName, args, args ? args->struct_size : 0, kCustomCallArgsBeforeTraits)) {
    return e;
  }
  return CallForwarded(EngineExtension<GpuCustomCallExtension>(0)->custom_call, args, kName);
}

// ---- 3: streams ----

PJRT_Error* GetStream(GetStreamArgs* args) {
  constexpr const char* kName = "PJRT_Get_Stream_For_External_Ready_Events";
  if (PJRT_Error* e = CheckSize(args, kName)) return e;
  if (args->device == nullptr || FromC(args->device)->engine() == nullptr) {
    return ToPjrtError(InvalidArgument(std::string(kName) + ": not a device of this process"));
  }
  ScopedSwap<PJRT_Device*> swap(args->device, FromC(args->device)->engine());
  return CallForwarded(EngineExtension<StreamExtension>(3)->get_stream, args, kName);
}

PJRT_Error* WaitStream(WaitStreamArgs* args) {
  constexpr const char* kName = "PJRT_Wait_Until_Buffer_Ready_On_Stream";
  if (PJRT_Error* e = CheckSize(args, kName)) return e;
  return CallForwarded(EngineExtension<StreamExtension>(3)->wait_stream, args, kName);
}

// ---- 7: Triton ----

PJRT_Error* TritonCompile(TritonCompileArgs* args) {
  constexpr const char* kName = "PJRT_Triton_Compile";
  if (PJRT_Error* e = CheckSize(args, kName)) return e;
  return CallForwarded(EngineExtension<TritonExtension>(7)->compile, args, kName);
}

// Our forwarder of `engine_ext` (of type `type`), or null for a type that is
// not forwarded here (layouts are chained by pjrt/layouts_extension.cc).
PJRT_Extension_Base* Forwarder(int type, const PJRT_Extension_Base* engine_ext) {
  switch (type) {
    case 0: {
      static GpuCustomCallExtension e{};
      e.base.struct_size = sizeof(e);
      e.base.type = static_cast<PJRT_Extension_Type>(0);
      e.custom_call = &RegisterCustomCall;
      // We pass traits on only where the engine's extension reads them.
      const auto* engine = reinterpret_cast<const GpuCustomCallExtension*>(engine_ext);
      e.custom_call_handles_traits = engine->base.struct_size >= sizeof(GpuCustomCallExtension) &&
                                     engine->custom_call_handles_traits;
      return &e.base;
    }
    case 3: {
      static StreamExtension e{};
      e.base.struct_size = sizeof(e);
      e.base.type = static_cast<PJRT_Extension_Type>(3);
      e.get_stream = &GetStream;
      e.wait_stream = &WaitStream;
      return &e.base;
    }
    case 7: {
      static TritonExtension e{};
      e.base.struct_size = sizeof(e);
      e.base.type = static_cast<PJRT_Extension_Type>(7);
      e.compile = &TritonCompile;
      return &e.base;
    }
    default:
      return nullptr;
  }
}

// ---- 2: the custom partitioner ----

struct PartitionerRegistration {
  std::string name;
  JaxCustomCallPartitionerCallbacks* callbacks;  // null: a batch-partitionable name
};

struct PartitioningState {
  std::mutex mu;
  std::vector<PartitionerRegistration> registrations;
  std::vector<const EngineLibrary*> engines;  // those with the extension
};

PartitioningState& Partitioning() {
  static PartitioningState* state = new PartitioningState;  // used until exit
  return *state;
}

Status HandTo(const EngineLibrary& engine, const PartitionerRegistration& r) {
  const auto* ext = reinterpret_cast<const CustomPartitionerExtension*>(
      FindExtensionIn(engine.api()->extension_start, static_cast<PJRT_Extension_Type>(2)));
  if (r.callbacks != nullptr) {
    RegisterCustomPartitionerArgs args{sizeof(args), r.name.data(), r.name.size(), r.callbacks};
    if (ext->register_custom_partitioner == nullptr) return Unimplemented("the engine registers no custom partitioner");
    return engine.Consume(ext->register_custom_partitioner(&args));
  }
  // register_batch_partitionable ends the struct: absent from an older engine's.
  const size_t end = offsetof(CustomPartitionerExtension, register_batch_partitionable) + sizeof(void*);
  if (ext->base.struct_size < end || ext->register_batch_partitionable == nullptr) {
    return Unimplemented("the engine (" + engine.path() + ") has no batch-partitionable registration");
  }
  RegisterBatchPartitionableArgs args{sizeof(args), r.name.data(), r.name.size()};
  return engine.Consume(ext->register_batch_partitionable(&args));
}

// Kept, then handed to every engine that has the extension. The callbacks
// object is jaxlib's, owned by the engine it is registered with: with
// today's engine selection that is at most one (the CUDA engine, which is
// also the compiler for GPU targets when myplugin runs on it).
Status Register(PartitionerRegistration r) {
  PartitioningState& s = Partitioning();
  std::lock_guard<std::mutex> lock(s.mu);
  s.registrations.push_back(r);
  for (const EngineLibrary* engine : s.engines) MYPLUGIN_RETURN_IF_ERROR(HandTo(*engine, r));
  return OkStatus();
}

PJRT_Error* RegisterCustomPartitioner(RegisterCustomPartitionerArgs* args) {
  constexpr const char* kName = "PJRT_Register_Custom_Partitioner";
  if (PJRT_Error* e = CheckSize(args, kName)) return e;
  if (args->callbacks == nullptr || args->name == nullptr) {
    return ToPjrtError(InvalidArgument(std::string(kName) + ": no name or no callbacks"));
  }
  return ToPjrtError(Register({std::string(args->name, args->name_size), args->callbacks}));
}

PJRT_Error* RegisterBatchPartitionable(RegisterBatchPartitionableArgs* args) {
  constexpr const char* kName = "PJRT_Register_Batch_Partitionable";
  if (PJRT_Error* e = CheckSize(args, kName)) return e;
  if (args->name == nullptr) return ToPjrtError(InvalidArgument(std::string(kName) + ": no name"));
  const std::string name(args->name, args->name_size);
  // The shadow that partitions (the CPU engine) has no such registration:
  // jaxlib's XLA partitions a program that calls it (spmd/jaxlib_partitioned_targets.h).
  spmd::AddBatchPartitionableTarget(name);
  return ToPjrtError(Register({name, nullptr}));
}

}  // namespace

const ExtensionDecision* DecideExtension(int type) {
  for (const ExtensionDecision& d : kDecisions) {
    if (d.type == type) return &d;
  }
  return nullptr;
}

PJRT_Extension_Base* ForwardEngineExtensions(const EngineLibrary& engine, PJRT_Extension_Base* next) {
  forwarded_engine = &engine;
  // Chained in the engine's order, each before what came after it.
  std::vector<const PJRT_Extension_Base*> offered;
  for (const PJRT_Extension_Base* ext = engine.api()->extension_start; ext != nullptr; ext = ext->next) {
    offered.push_back(ext);
  }
  for (auto it = offered.rbegin(); it != offered.rend(); ++it) {
    int type;
    std::memcpy(&type, &(*it)->type, sizeof(type));  // a newer engine's types are past our enum
    const ExtensionDecision* decision = DecideExtension(type);
    if (decision == nullptr || decision->plan != ExtensionPlan::kForwarded) continue;
    if (PJRT_Extension_Base* ours = Forwarder(type, *it)) {
      ours->next = next;
      next = ours;
    }
  }
  return next;
}

PJRT_Extension_Base* OurCustomPartitionerExtension(PJRT_Extension_Base* next) {
  static CustomPartitionerExtension extension = [] {
    CustomPartitionerExtension e{};
    e.base.struct_size = sizeof(e);
    e.base.type = PJRT_Extension_Type_Custom_Partitioner;
    e.register_custom_partitioner = &RegisterCustomPartitioner;
    e.register_batch_partitionable = &RegisterBatchPartitionable;
    return e;
  }();
  extension.base.next = next;
  return &extension.base;
}

Status AddPartitioningEngine(const EngineLibrary& engine) {
  if (FindExtensionIn(engine.api()->extension_start, PJRT_Extension_Type_Custom_Partitioner) == nullptr) {
    return OkStatus();
  }
  PartitioningState& s = Partitioning();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const EngineLibrary* known : s.engines) {
    if (known->api() == engine.api()) return OkStatus();  // one library loaded twice: one registry
  }
  s.engines.push_back(&engine);
  for (const PartitionerRegistration& r : s.registrations) MYPLUGIN_RETURN_IF_ERROR(HandTo(engine, r));
  return OkStatus();
}

}  // namespace myplugin
