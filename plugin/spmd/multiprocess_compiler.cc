#include "spmd/multiprocess_compiler.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/log.h"

namespace myplugin::spmd {
namespace {

// A private directory for the shadow compile's dump.
StatusOr<std::string> MakeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/myplugin-spmd-XXXXXX";
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

bool LogCompiles() {
  const char* v = std::getenv("MYPLUGIN_SPMD_LOG");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
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
    if (LogCompiles()) LogLine("myplugin: multi-process compile: partitioned program found in the cache");
    return hit->second;
  }
  StatusOr<std::shared_ptr<const PartitionedProgram>> partitioned = PartitionUncached(program, options, assignment);
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

StatusOr<std::shared_ptr<const PartitionedProgram>> MultiProcessCompiler::PartitionUncached(
    const PJRT_Program& program, const std::string& options, const std::vector<std::vector<int64_t>>& assignment) {
  ProgramHooks hooks = GetProgramHooks();
  if (!hooks.shadow_options || !hooks.local_program) {
    return FailedPrecondition("this program spans processes, and compiling it needs the jax_plugin Python package "
                              "(its multi-process compile hooks are not installed)");
  }
  auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> dir = MakeTempDir();
  if (!dir.ok()) return dir.status();
  RemoveOnExit remove_dir(dir.value());
  StatusOr<std::string> shadow_options = hooks.shadow_options(options, dir.value());
  if (!shadow_options.ok()) return shadow_options.status();

  StatusOr<EngineClient*> shadow = Shadow();
  if (!shadow.ok()) return shadow.status();
  PJRT_Program shadow_program = program;
  MYPLUGIN_PJRT_ARGS(PJRT_Client_Compile_Args, compile);
  compile.client = shadow.value()->get();
  compile.program = &shadow_program;
  compile.compile_options = shadow_options.value().data();
  compile.compile_options_size = shadow_options.value().size();
  Status st = engine_->Consume(engine_->api()->PJRT_Client_Compile(&compile));
  if (!st.ok()) return Status(st.code(), "partitioning the program for " + std::to_string(num_devices_) +
                                             " devices failed: " + st.message());
  auto result = std::make_shared<PartitionedProgram>();
  result->assignment = assignment;
  result->shadow = std::make_unique<EngineExecutable>(*engine_, compile.executable);
  double shadow_seconds = Seconds(start);

  LocalProgramRequest request;
  request.dump_dir = dir.value();
  request.compile_options = options;
  request.assignment = assignment;
  request.num_devices = num_devices_;
  request.local_engine_ids = local_engine_ids_;
  StatusOr<LocalProgram> local = hooks.local_program(request);
  if (!local.ok()) return local.status();
  result->local = local.take();
  if (LogCompiles()) {
    LogLine("myplugin: multi-process compile: partitioned for " + std::to_string(num_devices_) + " devices in " +
            std::to_string(shadow_seconds) + " s, rewritten in " + std::to_string(Seconds(start) - shadow_seconds) +
            " s");
  }
  return std::shared_ptr<const PartitionedProgram>(std::move(result));
}

}  // namespace myplugin::spmd
