// Our loaded executables: the engine's compiled program, plus the list of
// addressable devices in our objects. A program that spans processes runs
// its rewritten local part (see spmd/multiprocess_compiler.h), and answers
// questions about the whole program from the shadow compile.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "pjrt_c_api.h"
#include "spmd/multiprocess_compiler.h"

namespace myplugin {

class Client;

class LoadedExecutable {
 public:
  // Takes ownership of `engine_executable`, also on failure.
  // `partitioned`: set for the local part of a multi-process program.
  // `engine_executable` is null for a multi-process program with no device
  // on this process: it has no addressable device and runs nothing here.
  static StatusOr<std::unique_ptr<LoadedExecutable>> Wrap(
      Client* client, PJRT_LoadedExecutable* engine_executable,
      std::shared_ptr<const spmd::PartitionedProgram> partitioned = nullptr);
  ~LoadedExecutable();
  LoadedExecutable(const LoadedExecutable&) = delete;
  LoadedExecutable& operator=(const LoadedExecutable&) = delete;

  // Our serialized form (serialized_executable.h); an error for a program
  // that cannot outlive this process.
  StatusOr<std::string> Serialize() const;
  // Why this program cannot be serialized; empty when it can.
  void set_unserializable(std::string reason) { unserializable_ = std::move(reason); }

  PJRT_LoadedExecutable* engine() const { return engine_.get(); }
  // False for a program whose devices all belong to other processes.
  bool has_local_part() const { return engine_.get() != nullptr; }
  // Delete/IsDeleted of a program with no local part (the engine has none to ask).
  void MarkDeleted() { deleted_ = true; }
  bool deleted() const { return deleted_; }
  Client* client() const { return client_; }
  // The program's name as the engine reports it (jit_f), for profiles.
  const std::string& name() const { return name_; }
  const std::vector<PJRT_Device*>& c_addressable_devices() const { return c_addressable_devices_; }
  // The local part of a program over several processes' devices.
  bool multi_process() const { return partitioned_ != nullptr; }
  // The whole program as compiled on the shadow engine, or null.
  const EngineExecutable* global_program() const { return partitioned_ ? partitioned_->shadow.get() : nullptr; }
  // A multi-process program whose shadow stopped early: its local
  // executable stands in for the whole program, and these answer what only
  // the whole program knows. Null otherwise.
  const spmd::PartitionedProgram* stood_in_for() const {
    return partitioned_ && !partitioned_->shadow ? partitioned_.get() : nullptr;
  }
  // The engine's optimized program of the local part with the whole
  // program's partitioned module in it (made on first call).
  StatusOr<std::string> WholeOptimizedProgram() const;
  // The whole program's executable on the shadow engine: the partition's,
  // or (where it stopped early) compiled on first call: a cost analysis or
  // a compilation-cache entry needs it.
  StatusOr<const EngineExecutable*> WholeProgramExecutable() const;

 private:
  LoadedExecutable(Client* client, PJRT_LoadedExecutable* engine);

  Client* client_;
  EngineExecutable engine_;
  std::vector<PJRT_Device*> c_addressable_devices_;
  std::shared_ptr<const spmd::PartitionedProgram> partitioned_;
  std::atomic<bool> deleted_{false};
  std::string unserializable_;
  std::string name_;
  mutable std::mutex whole_mu_;
  mutable std::string whole_optimized_;  // WholeOptimizedProgram's, once made
  mutable std::unique_ptr<EngineExecutable> whole_executable_;  // WholeProgramExecutable's, once compiled
};

inline PJRT_LoadedExecutable* ToC(LoadedExecutable* e) { return reinterpret_cast<PJRT_LoadedExecutable*>(e); }
inline LoadedExecutable* FromC(PJRT_LoadedExecutable* e) { return reinterpret_cast<LoadedExecutable*>(e); }

// Wraps the engine's executable in `slot` (which may be null: see Wrap) as
// ours, in place; on failure `slot` is null.
PJRT_Error* WrapInto(Client* client, PJRT_LoadedExecutable*& slot,
                     std::shared_ptr<const spmd::PartitionedProgram> partitioned = nullptr);
// A program with no device here is described by its shadow compile, which
// only our own engine can stand in for.
Status CanDescribeWithoutLocalPart(const EngineExecutable& shadow);

// C API adapters: PjrtClientCompile in compile.cc, PjrtExecutableDeserializeAndLoad in deserialize.cc.
PJRT_Error* PjrtClientCompile(PJRT_Client_Compile_Args* args);
PJRT_Error* PjrtExecutableDeserializeAndLoad(PJRT_Executable_DeserializeAndLoad_Args* args);
PJRT_Error* PjrtExecutableSerialize(PJRT_Executable_Serialize_Args* args);
PJRT_Error* PjrtExecutableNumReplicas(PJRT_Executable_NumReplicas_Args* args);
PJRT_Error* PjrtExecutableNumPartitions(PJRT_Executable_NumPartitions_Args* args);
PJRT_Error* PjrtExecutableOptimizedProgram(PJRT_Executable_OptimizedProgram_Args* args);
// The loaded executable that handed out `executable` (still loaded), or null.
const LoadedExecutable* OriginOf(const PJRT_Executable* executable);
// PJRT_Executable_Destroy calls it: `executable` no longer names one of ours.
void ForgetExecutableOrigin(const PJRT_Executable* executable);
PJRT_Error* PjrtLoadedExecutableDestroy(PJRT_LoadedExecutable_Destroy_Args* args);
PJRT_Error* PjrtLoadedExecutableGetExecutable(PJRT_LoadedExecutable_GetExecutable_Args* args);
PJRT_Error* PjrtLoadedExecutableAddressableDevices(PJRT_LoadedExecutable_AddressableDevices_Args* args);
PJRT_Error* PjrtLoadedExecutableDelete(PJRT_LoadedExecutable_Delete_Args* args);
PJRT_Error* PjrtLoadedExecutableIsDeleted(PJRT_LoadedExecutable_IsDeleted_Args* args);
PJRT_Error* PjrtLoadedExecutableExecute(PJRT_LoadedExecutable_Execute_Args* args);
PJRT_Error* PjrtLoadedExecutableFingerprint(PJRT_LoadedExecutable_Fingerprint_Args* args);
PJRT_Error* PjrtLoadedExecutableGetDeviceAssignment(PJRT_LoadedExecutable_GetDeviceAssignment_Args* args);

}  // namespace myplugin
