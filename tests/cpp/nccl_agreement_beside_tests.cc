// The agreement beside the launch (collectives/agreement_gate.h) on the
// handlers' call path (RunNccl) across four real processes of one job, as
// `myplugin-run -n 4 --share-gpu` starts them: one device each, a fake NCCL
// and CUDA driver that print what they are asked (the stream's wait on the
// gate word, the aborts), fate-sharing on as in a user's job.
//   hold:     process 3 reaches the second all-reduce only after process 0
//             has returned from it, so process 0 must have enqueued it
//             before the processes agreed (agreeing first, process 0 would
//             wait for process 3, which waits for process 0); then every
//             gate opens.
//   mismatch: process 2 issues the second all-reduce with 9 elements
//             where the others have 8: no gate ever opens past it, every
//             process aborts its communicator and ends with the error
//             naming the collective, and a later call is refused before
//             anything is enqueued.
//   dies:     process 3 exits (as a SIGKILL leaves: no goodbye) before
//             the second all-reduce, which the others have enqueued:
//             their gates stay shut and they end naming process 3.
//   stalls:   process 3 sleeps through the second all-reduce (as a
//             stopped process does, its heartbeats going on): the others'
//             agreement gives up at the collective timeout (3 s here)
//             naming it, and they end.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "child_processes.h"
#include "suites.h"

#ifdef MYPLUGIN_HAVE_NCCL
#include "collectives/device_ids.h"
#include "collectives/nccl_ffi_handlers.h"
#include "collectives/process_runtime.h"
#include "coordination/service.h"

namespace coll = myplugin::collectives;

namespace {

constexpr int kProcesses = 4;
constexpr double kTimeoutS = 20;
// Within the 120 s that tests/test_cpp_units.py gives the whole binary.
constexpr double kDeadlineS = 60;
// The collective timeout of the stalled scenario, well inside its sleep.
constexpr double kStallTimeoutS = 3;

// Printed at once: a process that fate-sharing ends has no later chance.
void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

ncclResult_t GetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 7, NCCL_UNIQUE_ID_BYTES);
  return ncclSuccess;
}
ncclResult_t InitRank(ncclComm_t* comm, int, ncclUniqueId, int rank) {
  *comm = reinterpret_cast<ncclComm_t>(static_cast<intptr_t>(0x100 + rank));
  return ncclSuccess;
}
ncclResult_t Destroy(ncclComm_t) { return ncclSuccess; }
ncclResult_t Abort(ncclComm_t) {
  Say("CommAbort");
  return ncclSuccess;
}
ncclResult_t AsyncError(ncclComm_t, ncclResult_t* error) {
  *error = ncclSuccess;
  return ncclSuccess;
}
const char* ErrorString(ncclResult_t) { return "fake NCCL error"; }
ncclResult_t AllReduce(const void*, void*, size_t count, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  Say("AllReduce count=" + std::to_string(count));
  return ncclSuccess;
}
ncclResult_t GroupStart() { return ncclSuccess; }
ncclResult_t GroupEnd() { return ncclSuccess; }
uint32_t gate_word_storage = 0;
CUresult HostAlloc(void** p, size_t, unsigned int) {
  *p = &gate_word_storage;
  return CUDA_SUCCESS;
}
CUresult DevicePointer(CUdeviceptr* d, void* p, unsigned int) {
  *d = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}
CUresult WaitValue(CUstream, CUdeviceptr, cuuint32_t value, unsigned int flags) {
  Say("Wait " + std::to_string(value) + (flags == CU_STREAM_WAIT_VALUE_GEQ ? " GEQ" : " ?"));
  return CUDA_SUCCESS;
}

coll::NcclApi Api() {
  coll::NcclApi api;
  api.GetUniqueId = GetUniqueId;
  api.CommInitRank = InitRank;
  api.CommDestroy = Destroy;
  api.CommAbort = Abort;
  api.CommGetAsyncError = AsyncError;
  api.GetErrorString = ErrorString;
  api.AllReduce = AllReduce;
  api.GroupStart = GroupStart;
  api.GroupEnd = GroupEnd;
  api.MemHostAlloc = HostAlloc;
  api.MemHostGetDevicePointer = DevicePointer;
  api.StreamWaitValue32 = WaitValue;
  return api;
}

// Whether `done` holds within `timeout_s` (polled).
template <typename F>
bool WaitFor(F done, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace

int RunNcclBesideChild(int process, int port, const std::string& scenario) {
  using coll::ProcessRuntime;
  ProcessRuntime& runtime = ProcessRuntime::Get();
  myplugin::Settings settings = *runtime.settings();
  settings.collective_timeout_s = scenario == "stalls" ? kStallTimeoutS : kTimeoutS;
  settings.nccl_agreement = "beside";
  runtime.UseSettings(settings);
  myplugin::coordination::RuntimeOptions options;
  options.coordinator_addresses = {"127.0.0.1:" + std::to_string(port)};
  options.num_processes = kProcesses;
  options.process_id = process;
  options.token = "agreement-beside";
  options.initialization_timeout_s = kTimeoutS;
  options.fate_sharing = true;  // the gate's condition: a failed agreement ends the process
  options.advertise_address = "127.0.0.1";
  options.local.hostname = "one-host";
  options.local.num_devices = 1;
  options.local.device_kind = "fake GPU";
  options.local.pid = static_cast<int>(::getpid());
  myplugin::Status joined = runtime.distributed().Initialize(options);
  if (!joined.ok()) {
    Say("failed: " + joined.message());
    return 1;
  }
  coll::SetLocalDeviceIds({{0, process}});
  std::unique_ptr<coll::NcclDeviceGroups> device_groups = coll::DeviceGroupsForJob(Api());
  if (!device_groups->agree_beside()) {
    Say("failed: not agreeing beside the launch");
    return 1;
  }
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x77);
  void* const send = reinterpret_cast<void*>(0x10000);
  void* const recv = reinterpret_cast<void*>(0x20000);
  auto all_reduce = [&](size_t count) {
    coll::NcclCallSite site{0, {0, 1, 2, 3}, coll::CollectiveOp::kAllReduce, coll::Reduction::kSum,
                            coll::DataType::kF32, count, 0, stream};
    return coll::RunNccl(site, [&](coll::NcclCommunicator& c) {
      return c.AllReduce(send, recv, count, coll::DataType::kF32, coll::Reduction::kSum, stream);
    }, device_groups.get());
  };
  auto client = runtime.distributed().client();
  // The first call makes the communicator: agreed before it is enqueued.
  if (myplugin::Status st = all_reduce(8); !st.ok()) {
    Say("failed: first call: " + st.message());
    return 1;
  }
  coll::AgreementGate* gate = device_groups->Gate(0).value();
  const std::string enqueued_key = "beside-test/process-0-returned";
  if (scenario == "hold") {
    if (process == 3) {
      myplugin::StatusOr<std::string> v = client->KeyValueGet(enqueued_key, kTimeoutS);
      if (!v.ok()) {
        Say("failed: process 0 did not return from its second call first: " + v.status().message());
        return 1;
      }
    }
    if (myplugin::Status st = all_reduce(8); !st.ok()) {
      Say("failed: second call: " + st.message());
      return 1;
    }
    if (process == 0) {
      (void)client->KeyValueSet(enqueued_key, "1");
      Say("returned before process 3 called");
    }
    if (!WaitFor([&] { return gate->opened() == 1; }, kTimeoutS)) {
      Say("failed: the gate did not open");
      return 1;
    }
    Say("gate opened " + std::to_string(gate->opened()));
  } else if (scenario == "dies" || scenario == "stalls") {
    if (process == 3) {
      if (scenario == "dies") ::_exit(3);
      std::this_thread::sleep_for(std::chrono::duration<double>(kTimeoutS));
      Say("failed: process 3 outlived its sleep");
      return 1;
    }
    if (myplugin::Status st = all_reduce(8); !st.ok()) {
      Say("failed: second call: " + st.message());
      return 1;
    }
    Say("enqueued");
    if (!WaitFor([&] { return !gate->failure().ok(); }, kTimeoutS)) {
      Say("failed: no failure");
      return 1;
    }
    Say("gate opened " + std::to_string(gate->opened()));
    std::this_thread::sleep_for(std::chrono::duration<double>(kTimeoutS));
    Say("failed: still running");
    return 1;
  } else {
    if (myplugin::Status st = all_reduce(process == 2 ? 9 : 8); !st.ok()) {
      Say("failed: second call: " + st.message());
      return 1;
    }
    if (!WaitFor([&] { return !gate->failure().ok(); }, kTimeoutS)) {
      Say("failed: no failure");
      return 1;
    }
    myplugin::Status refused = all_reduce(8);
    Say("third call refused: " + std::string(refused.ok() ? "no" : "yes"));
    Say("gate opened " + std::to_string(gate->opened()));
    // Fate-sharing ends the process (kFateSharingExitCode) within its grace.
    std::this_thread::sleep_for(std::chrono::duration<double>(kTimeoutS));
    Say("failed: still running");
    return 1;
  }
  myplugin::Status left = runtime.ShutdownJob(kTimeoutS);
  if (!left.ok()) Say("failed: shutdown: " + left.message());
  (void)device_groups.release();  // the failure callback holds them: they stay until exit
  return 0;
}

namespace {

std::vector<unit::ChildResult> RunScenario(const std::string& scenario) {
  myplugin::coordination::ServiceOptions options;
  options.num_processes = kProcesses;
  options.token = "agreement-beside";
  options.heartbeat_timeout_s = 60;
  options.initialization_timeout_s = kTimeoutS;
  auto service = myplugin::coordination::CoordinationService::Start("127.0.0.1", 0, options);
  CHECK(service.ok());
  if (!service.ok()) return {};
  std::vector<std::vector<std::string>> args;
  for (int p = 0; p < kProcesses; ++p) {
    args.push_back({"--nccl-beside-child", std::to_string(p), std::to_string(service.value()->port()), scenario});
  }
  std::vector<unit::ChildResult> children = unit::RunChildren(args, kDeadlineS, /*with_stderr=*/true);
  service.value()->Stop();
  return children;
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
// A line of the child's own "failed: ..." (the runtime's lines say "failed" too).
bool ChildFailed(const std::string& text) {
  for (const std::string& line : unit::Lines(text)) {
    if (line.rfind("failed:", 0) == 0) return true;
  }
  return false;
}

void TestEnqueuedBeforeASlowPeer() {
  std::vector<unit::ChildResult> children = RunScenario("hold");
  for (int p = 0; p < static_cast<int>(children.size()); ++p) {
    const unit::ChildResult& c = children[p];
    std::vector<std::string> want = {"AllReduce count=8", "AllReduce count=8", "Wait 1 GEQ"};
    if (p == 0) want.push_back("returned before process 3 called");
    want.push_back("gate opened 1");
    std::vector<std::string> got;
    for (const std::string& line : unit::Lines(c.output)) {
      if (line.rfind("myplugin:", 0) != 0) got.push_back(line);  // the runtime's own lines aside
    }
    const bool right = !c.killed && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0 && got == want;
    CHECK(right);
    if (!right) std::fprintf(stderr, "process %d (hold) printed:\n%s", p, c.output.c_str());
  }
}

void TestMismatchEndsEveryProcess() {
  std::vector<unit::ChildResult> children = RunScenario("mismatch");
  for (int p = 0; p < static_cast<int>(children.size()); ++p) {
    const unit::ChildResult& c = children[p];
    const std::string& out = c.output;
    const bool right =
        !c.killed && WIFEXITED(c.status) && WEXITSTATUS(c.status) == myplugin::coordination::kFateSharingExitCode &&
        Has(out, p == 2 ? "AllReduce count=9" : "AllReduce count=8\nAllReduce count=8") && Has(out, "Wait 1 GEQ") &&
        Has(out, "CommAbort") && Has(out, "third call refused: yes") && Has(out, "gate opened 0") &&
        !Has(out, "AllReduce count=8\nAllReduce count=8\nAllReduce count=8") && !ChildFailed(out) &&
        Has(out, "all-reduce sum f32[") && Has(out, "process 2");
    CHECK(right);
    if (!right) std::fprintf(stderr, "process %d (mismatch) printed:\n%s", p, out.c_str());
  }
}

// A peer that died or stalls after the others enqueued: each of them ends
// (fate-sharing), its gate shut, naming process 3.
void TestLostPeerEndsTheOthers(const std::string& scenario, const std::string& named) {
  std::vector<unit::ChildResult> children = RunScenario(scenario);
  for (int p = 0; p < static_cast<int>(children.size()); ++p) {
    const unit::ChildResult& c = children[p];
    const std::string& out = c.output;
    const bool right =
        p == 3 ? !c.killed && (scenario == "dies" ? WIFEXITED(c.status) && WEXITSTATUS(c.status) == 3 : true)
               : !c.killed && WIFEXITED(c.status) &&
                     WEXITSTATUS(c.status) == myplugin::coordination::kFateSharingExitCode &&
                     Has(out, "AllReduce count=8\nAllReduce count=8\nWait 1 GEQ\nenqueued") &&
                     Has(out, "gate opened 0") && Has(out, named) && !ChildFailed(out);
    CHECK(right);
    if (!right) std::fprintf(stderr, "process %d (%s) printed:\n%s", p, scenario.c_str(), out.c_str());
  }
}

}  // namespace

void RunNcclAgreementBesideTests() {
  TestEnqueuedBeforeASlowPeer();
  TestMismatchEndsEveryProcess();
  TestLostPeerEndsTheOthers("dies", "process 3");
  TestLostPeerEndsTheOthers("stalls", "waiting for processes [3]");
}

#else

int RunNcclBesideChild(int, int, const std::string&) { return 1; }
void RunNcclAgreementBesideTests() {}

#endif
