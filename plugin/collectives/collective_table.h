// The collectives' custom-call targets, defined once: each target's name,
// operands, results, attributes (backend_config keys, with their types) and
// the engines that have a handler for it. The FFI handlers of both engines
// are bound and registered from it (ffi_binding.h), and the rewrite reads it
// through jax_plugin/spmd/collective_table.py, a module written from
// _myplugin.collective_table() (ci/gen_collective_table.py; a test keeps it
// current). A renamed key, target or type is one edit here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace myplugin::collectives {

// An attribute's type: how a handler decodes it and how the rewrite writes it
// (a string, `N : i64`, `dense<[...]> : tensor<Nxi64>`).
enum class AttrType : uint8_t { kString, kI64, kI64Array };
const char* Name(AttrType type);  // "str", "i64", "i64[]"

struct AttributeSpec {
  const char* id;   // its constant in the Python module: stays when the key is renamed
  const char* key;  // the backend_config key
  AttrType type;
};

inline constexpr AttributeSpec kReduction{"REDUCTION", "reduction", AttrType::kString};  // a Name(Reduction)
// Global device ids, group after group, each of group_size; a device runs
// the collective with the group it is in.
inline constexpr AttributeSpec kReplicaGroups{"REPLICA_GROUPS", "replica_groups", AttrType::kI64Array};
inline constexpr AttributeSpec kGroupSize{"GROUP_SIZE", "group_size", AttrType::kI64};
// The jitted function (the module) a call belongs to, for the flight
// recorder: an attribute because it travels inside the program, through
// serialization and the compilation cache, to the engine threads that run
// the handlers after Execute has returned.
inline constexpr AttributeSpec kFunction{"FUNCTION", "function", AttrType::kString};
inline constexpr AttributeSpec kDeviceGroup{"DEVICE_GROUP", "device_group", AttrType::kI64Array};  // global ids
// (source, target) ranks in the device group, flattened.
inline constexpr AttributeSpec kPairs{"PAIRS", "pairs", AttrType::kI64Array};
inline constexpr AttributeSpec kIds{"IDS", "ids", AttrType::kI64Array};  // the id of each global device

// The operands a target takes. Every form with data also takes operands
// after it that it does not read: the rewrite passes the previous
// collective's result there, which orders the calls.
enum class Operands : uint8_t {
  kAnyNumber,  // one or more data operands: the rewrite combines a bucket into one call (combined_operands.h)
  kOne,        // one data operand
  kNone,
  // A ragged all-to-all's six: the output it updates, the data, the input
  // offsets, the send sizes, the senders' (output offset, size) pairs of
  // every slice this device receives (an all-to-all of the senders' arrays
  // before the call), the recv sizes (ragged_plan.h).
  kRagged,
};
const char* Name(Operands operands);  // "any_number", "one", "none", "ragged"

enum class Results : uint8_t {
  kOnePerOperand,  // one per data operand, of its element type (a tuple when several)
  kOne,            // one array
  kAliased,        // the first operand, in place
};
const char* Name(Results results);  // "one_per_operand", "one", "aliased"

// The engines with a handler for a target, a bit each.
enum Engine : uint8_t { kHostEngine = 1, kCudaEngine = 2 };
const char* Name(Engine engine);  // "cpu", "cuda"

inline constexpr size_t kMaxAttributes = 4;

struct CollectiveTarget {
  const char* id;        // its constant in the Python module
  const char* name;      // the custom_call_target
  const char* replaces;  // the HLO instruction the rewrite turns into it; "" for none
  Operands operands;
  Results results;
  // In the order the handlers take them; nullptr after the last.
  std::array<const AttributeSpec*, kMaxAttributes> attributes;
  uint8_t engines;       // Engine bits

  constexpr size_t attribute_count() const {
    size_t n = 0;
    while (n < kMaxAttributes && attributes[n] != nullptr) ++n;
    return n;
  }
};

inline constexpr CollectiveTarget kAllReduce{
    "ALL_REDUCE", "myplugin_all_reduce", "all-reduce", Operands::kAnyNumber, Results::kOnePerOperand,
    {&kReduction, &kReplicaGroups, &kGroupSize, &kFunction}, kHostEngine | kCudaEngine};
inline constexpr CollectiveTarget kReduceScatter{
    "REDUCE_SCATTER", "myplugin_reduce_scatter", "reduce-scatter", Operands::kAnyNumber, Results::kOnePerOperand,
    {&kReduction, &kReplicaGroups, &kGroupSize, &kFunction}, kHostEngine | kCudaEngine};
inline constexpr CollectiveTarget kAllGather{
    "ALL_GATHER", "myplugin_all_gather", "all-gather", Operands::kAnyNumber, Results::kOnePerOperand,
    {&kReplicaGroups, &kGroupSize, &kFunction}, kHostEngine | kCudaEngine};
inline constexpr CollectiveTarget kAllToAll{
    "ALL_TO_ALL", "myplugin_all_to_all", "all-to-all", Operands::kOne, Results::kOne,
    {&kReplicaGroups, &kGroupSize, &kFunction}, kHostEngine | kCudaEngine};
inline constexpr CollectiveTarget kCollectivePermute{
    "COLLECTIVE_PERMUTE", "myplugin_collective_permute", "collective-permute", Operands::kOne, Results::kOne,
    {&kDeviceGroup, &kPairs, &kFunction}, kHostEngine | kCudaEngine};
// jax's lax.ragged_all_to_all (MoE token exchanges). On GPUs only: XLA's
// CPU engine has no ragged all-to-all, and jax's CPU backend refuses it too.
inline constexpr CollectiveTarget kRaggedAllToAll{
    "RAGGED_ALL_TO_ALL", "myplugin_ragged_all_to_all", "ragged-all-to-all", Operands::kRagged, Results::kAliased,
    {&kReplicaGroups, &kGroupSize, &kFunction}, kCudaEngine};
// partition-id and replica-id find the device's global id at run time, so
// the module stays the same on every process (a compilation cache entry;
// on GPUs also the same schedule, so the same order of collectives).
inline constexpr CollectiveTarget kPartitionId{
    "PARTITION_ID", "myplugin_partition_id", "partition-id", Operands::kNone, Results::kOne, {&kIds},
    kHostEngine | kCudaEngine};
inline constexpr CollectiveTarget kReplicaId{
    "REPLICA_ID", "myplugin_replica_id", "replica-id", Operands::kNone, Results::kOne, {&kIds},
    kHostEngine | kCudaEngine};
// Returns its first operand once the others are ready: the rewrite orders
// loops and branches after collectives with it on the CPU engine, which
// runs independent work concurrently (a CUDA stream runs in order).
inline constexpr CollectiveTarget kOrderFence{
    "ORDER_FENCE", "myplugin_order_fence", "", Operands::kOne, Results::kAliased, {}, kHostEngine};

inline constexpr std::array<const CollectiveTarget*, 9> kCollectiveTargets = {
    &kAllReduce, &kReduceScatter, &kAllGather, &kAllToAll, &kCollectivePermute, &kRaggedAllToAll, &kPartitionId,
    &kReplicaId, &kOrderFence};

}  // namespace myplugin::collectives
