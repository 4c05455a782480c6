#include "spmd/multiprocess_compiler.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "common/log.h"
#include "common/profile_spans.h"
#include "spmd/jaxlib_partitioned_targets.h"

namespace myplugin::spmd {
namespace {

// A private directory under `base` for the shadow compile's dump.
StatusOr<std::string> MakeTempDir(const std::string& base) {
  std::string pattern = base + "/myplugin-spmd-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    return Internal("cannot create a directory for the partitioned program under " + pattern + ": " +
                    std::strerror(errno));
  }
  return std::string(buf.data());
}

class RemoveOnExit {
 public:
  explicit RemoveOnExit(std::string path) : path_(std::move(path)) {}
  ~RemoveOnExit() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;

 private:
  std::string path_;
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

Status NoWholeExecutable() {
  return FailedPrecondition(
      "this program calls custom partitioning rules (jax.experimental.custom_partitioning or "
      "jax.debug.inspect_array_sharding) that only jaxlib's own XLA knows, so jaxlib partitioned it; myplugin "
      "cannot build its whole executable on the engine, which a program on none of this process's devices, or "
      "its serialization, needs");
}

StatusOr<EngineClient*> MultiProcessCompiler::Shadow() {
  if (!shadow_) {
    StatusOr<const EngineLibrary*> library = shadow_engine_();
    if (!library.ok()) return library.status();
    engine_ = library.value();
    EngineClientOptions options;
    options.num_devices = num_devices_;
    StatusOr<std::unique_ptr<EngineClient>> client = EngineClient::Create(*engine_, options);
    if (!client.ok()) {
      return Status(client.status().code(), "cannot create the shadow engine client that partitions multi-process "
                                            "programs: " + client.status().message());
    }
    shadow_ = client.take();
  }
  return shadow_.get();
}

StatusOr<std::shared_ptr<const PartitionedProgram>> MultiProcessCompiler::Partition(
    const PJRT_Program& program, const std::string& options, const std::string& cache_key,
    const std::vector<std::vector<int64_t>>& assignment) {
  std::string key(program.format, program.format_size);
  key.push_back('\0');
  key.append(cache_key);
  key.push_back('\0');
  key.append(program.code, program.code_size);
  std::lock_guard<std::mutex> lock(mu_);
  auto hit = cache_.find(key);
  if (hit != cache_.end()) {
    profile::Span span("partition (cached)");
    if (log_) LogLine("myplugin: multi-process compile: partitioned program found in the cache");
    return hit->second;
  }
  // A program with a device here is answered for by its local executable,
  // so its shadow may stop before machine code; one without needs the
  // shadow's executable.
  bool has_local_device = false;
  for (const auto& replica : assignment) {
    for (int64_t id : replica) has_local_device = has_local_device || local_engine_ids_.count(id) > 0;
  }
  StatusOr<std::shared_ptr<const PartitionedProgram>> partitioned =
      PartitionUncached(program, options, assignment, has_local_device);
  if (partitioned.ok()) cache_.emplace(std::move(key), partitioned.value());
  return partitioned;
}

StatusOr<std::unique_ptr<EngineExecutable>> MultiProcessCompiler::LoadShadow(const std::string& bytes,
                                                                               const std::string& options) {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<EngineClient*> shadow = Shadow();
  if (!shadow.ok()) return shadow.status();
  return EngineExecutable::Deserialize(*engine_, shadow.value()->get(), bytes, options);
}

StatusOr<MultiProcessCompiler::ShadowCompile> MultiProcessCompiler::CompileShadow(const std::string& code,
                                                                                 const std::string& format,
                                                                                 const std::string& options,
                                                                                 const std::string& dump_dir,
                                                                                 bool stop_early) {
  ProgramHooks hooks = GetProgramHooks();
  StatusOr<ShadowProgram> prepared = hooks.shadow_program(code, format, options, dump_dir, stop_early);
  if (!prepared.ok()) return prepared.status();
  ShadowCompile out;
  out.stopped_early = prepared.value().stops_early;
  if (prepared.value().partitioned) {
    // jaxlib's XLA partitioned it (its custom partitioning rules live there)
    // and wrote the dump: no shadow executable, whether or not it stopped.
    if (log_) LogLine("myplugin: multi-process compile: partitioned by jaxlib's XLA (custom partitioning rules)");
    if (out.stopped_early) out.status = Status(Code::kCancelled, "partitioned by jaxlib's XLA, which stopped after the dump");
    return out;
  }
  StatusOr<EngineClient*> shadow = Shadow();
  if (!shadow.ok()) return shadow.status();
  PJRT_Program shadow_program;
  shadow_program.struct_size = PJRT_Program_STRUCT_SIZE;
  shadow_program.extension_start = nullptr;
  shadow_program.code = prepared.value().code.data();
  shadow_program.code_size = prepared.value().code.size();
  shadow_program.format = format.data();
  shadow_program.format_size = format.size();
  MYPLUGIN_PJRT_ARGS(PJRT_Client_Compile_Args, compile);
  compile.client = shadow.value()->get();
  compile.program = &shadow_program;
  compile.compile_options = prepared.value().compile_options.data();
  compile.compile_options_size = prepared.value().compile_options.size();
  out.status = engine_->Consume(engine_->api()->PJRT_Client_Compile(&compile));
  if (out.status.ok()) out.executable = std::make_unique<EngineExecutable>(*engine_, compile.executable);
  return out;
}

LocalProgramRequest MultiProcessCompiler::Request(const std::string& dump_dir, const std::string& options,
                                                 const std::vector<std::vector<int64_t>>& assignment,
                                                 const std::map<int64_t, int64_t>& local_ids,
                                                 const std::string& engine_kind) const {
  LocalProgramRequest request;
  request.dump_dir = dump_dir;
  request.compile_options = options;
  request.assignment = assignment;
  request.num_devices = num_devices_;
  request.local_engine_ids = local_ids;
  request.engine_kind = engine_kind;
  return request;
}

StatusOr<MultiProcessCompiler::ShadowCompile> MultiProcessCompiler::PartitionOnShadow(
    const std::string& code, const std::string& format, const std::string& options, const std::string& dump_dir,
    bool stop_early) {
  StatusOr<ShadowCompile> compiled = CompileShadow(code, format, options, dump_dir, stop_early);
  if (!compiled.ok()) return compiled.status();
  const Status& st = compiled.value().status;
  // A stopped shadow ends in its back end, which cannot emit the mark (an
  // error naming the mark's target) or, first, another call it has no
  // handler for (a GPU program's Triton kernel on the CPU shadow: NOT_FOUND,
  // or UNIMPLEMENTED), once partitioning is done; or jaxlib partitioned it
  // (CANCELLED, ours). Any other failure is the program's own (a
  // partitioner's RET_CHECK is INTERNAL), whose dump, if any, is of a module
  // the partitioner never finished.
  bool ended_at_mark = st.code() == Code::kCancelled || st.code() == Code::kNotFound ||
                       st.code() == Code::kUnimplemented ||
                       st.message().find(kShadowStopTarget) != std::string::npos;
  if (!st.ok() && (!compiled.value().stopped_early || !ended_at_mark)) {
    return Status(st.code(), "partitioning the program for " + std::to_string(num_devices_) +
                                 " devices failed: " + st.message());
  }
  return compiled;
}

StatusOr<std::unique_ptr<EngineExecutable>> MultiProcessCompiler::CompileWholeProgram(
    const PartitionedProgram& program) {
  if (CallsJaxlibPartitionedTarget(program.code)) return NoWholeExecutable();
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<std::string> dir = MakeTempDir(temp_dir_);
  if (!dir.ok()) return dir.status();
  RemoveOnExit remove_dir(dir.value());
  StatusOr<ShadowCompile> compiled = CompileShadow(program.code, program.format, program.options, dir.value(), false);
  if (!compiled.ok()) return compiled.status();
  if (!compiled.value().status.ok()) {
    return Status(compiled.value().status.code(), "compiling the whole program on the shadow engine failed: " +
                                                      compiled.value().status.message());
  }
  if (!compiled.value().executable) return NoWholeExecutable();
  return std::move(compiled.value().executable);
}

StatusOr<std::vector<LocalProgram>> MultiProcessCompiler::PartitionForProcesses(
    const PJRT_Program& program, const std::string& options, const std::vector<std::vector<int64_t>>& assignment,
    const std::vector<std::map<int64_t, int64_t>>& processes, const std::string& engine_kind) {
  ProgramHooks hooks = GetProgramHooks();
  if (!hooks.shadow_program || !hooks.local_program) {
    return FailedPrecondition("this program spans processes, and compiling it needs the jax_plugin Python package "
                              "(its multi-process compile hooks are not installed)");
  }
  const std::string code(program.code, program.code_size), format(program.format, program.format_size);
  std::lock_guard<std::mutex> lock(mu_);
  // As in PartitionUncached: first the shortened partition, then, if the
  // stop mark itself was the trouble, the full one.
  for (bool stop_early : {true, false}) {
    StatusOr<std::string> dir = MakeTempDir(temp_dir_);
    if (!dir.ok()) return dir.status();
    RemoveOnExit remove_dir(dir.value());
    StatusOr<ShadowCompile> compiled = PartitionOnShadow(code, format, options, dir.value(), stop_early);
    if (!compiled.ok()) return compiled.status();
    const bool stopped = !compiled.value().status.ok();
    std::vector<LocalProgram> out;
    Status failed;
    for (const auto& local_ids : processes) {
      StatusOr<LocalProgram> local =
          hooks.local_program(Request(dir.value(), options, assignment, local_ids, engine_kind));
      if (!local.ok()) {
        failed = local.status();
        break;
      }
      out.push_back(local.take());
    }
    if (failed.ok()) return out;
    if (!stopped || failed.code() == Code::kUnimplemented) return failed;
  }
  return Internal("unreachable: the full partition neither succeeded nor failed");
}

StatusOr<std::shared_ptr<const PartitionedProgram>> MultiProcessCompiler::PartitionUncached(
    const PJRT_Program& program, const std::string& options, const std::vector<std::vector<int64_t>>& assignment,
    bool stop_early) {
  ProgramHooks hooks = GetProgramHooks();
  if (!hooks.shadow_program || !hooks.local_program) {
    return FailedPrecondition("this program spans processes, and compiling it needs the jax_plugin Python package "
                              "(its multi-process compile hooks are not installed)");
  }
  auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> dir = MakeTempDir(temp_dir_);
  if (!dir.ok()) return dir.status();
  RemoveOnExit remove_dir(dir.value());
  auto result = std::make_shared<PartitionedProgram>();
  result->assignment = assignment;
  result->code.assign(program.code, program.code_size);
  result->format.assign(program.format, program.format_size);
  result->options = options;

  std::optional<profile::Span> partition_span(std::in_place, "partition");
  StatusOr<ShadowCompile> compiled =
      PartitionOnShadow(result->code, result->format, options, dir.value(), stop_early);
  partition_span.reset();
  if (!compiled.ok()) return compiled.status();
  const bool stopped = !compiled.value().status.ok();
  result->shadow = std::move(compiled.value().executable);
  double shadow_seconds = Seconds(start);

  std::optional<profile::Span> rewrite_span(std::in_place, "rewrite collectives");
  StatusOr<LocalProgram> local = hooks.local_program(Request(dir.value(), options, assignment, local_engine_ids_, ""));
  rewrite_span.reset();
  if (!local.ok() && stopped && local.status().code() != Code::kUnimplemented) {
    // The compile ended before the dump was written: the mark that stops it
    // may itself be what this program cannot take. Partition it whole.
    // (UNIMPLEMENTED is the rewrite's verdict on the program, not this.)
    if (log_) {
      LogLine("myplugin: multi-process compile: the shortened partition failed (" +
              compiled.value().status.message() + "; " + local.status().message() + "); partitioning again in full");
    }
    return PartitionUncached(program, options, assignment, false);
  }
  if (!local.ok()) return local.status();
  result->local = local.take();
  if (log_) {
    LogLine("myplugin: multi-process compile: partitioned for " + std::to_string(num_devices_) + " devices in " +
            std::to_string(shadow_seconds) + " s" + (stopped ? " (stopped after the HLO passes)" : "") +
            ", rewritten in " + std::to_string(Seconds(start) - shadow_seconds) + " s");
  }
  return std::shared_ptr<const PartitionedProgram>(std::move(result));
}

}  // namespace myplugin::spmd
