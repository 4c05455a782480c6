// The NCCL backend's logic against a fake NCCL: bootstrap through the key-
// value store, type and reduction mapping, the calls each collective makes,
// abort, error reporting (an NCCL error named by its cause, or with the time
// it took), the version check, and four processes whose one device each is
// the same GPU (ordinal 0). No GPU, no libnccl.
#include "check.h"
#include "child_processes.h"
#include "local_clients.h"

#ifndef MYPLUGIN_HAVE_NCCL
bool RunNcclTests() { return false; }
int RunNcclShareChild(int, int) { return 1; }
#else

#include <algorithm>
#include <atomic>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>

#include "collectives/device_ids.h"
#include "collectives/flight_recorder.h"
#include "collectives/in_process_key_values.h"
#include "collectives/nccl_communicator.h"
#include "collectives/nccl_ffi_handlers.h"
#include "collectives/nccl_watchdog.h"
#include "collectives/process_runtime.h"
#include "common/fault_delays.h"
#include "coordination/service.h"

namespace coll = myplugin::collectives;

namespace {

// What the fake NCCL saw.
struct FakeLog {
  std::vector<std::string> calls;
  int init_nranks = -1, init_rank = -1;
  ncclUniqueId init_id{};
  size_t count = 0;
  ncclDataType_t type = ncclInt8;
  ncclRedOp_t op = ncclSum;
  cudaStream_t stream = nullptr;
  ncclResult_t fail_all_reduce = ncclSuccess;
};
FakeLog fake;

ncclComm_t FakeComm() { return reinterpret_cast<ncclComm_t>(0x1234); }

ncclResult_t FakeGetUniqueId(ncclUniqueId* id) {
  fake.calls.push_back("GetUniqueId");
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) id->internal[i] = static_cast<char>(i * 7);
  return ncclSuccess;
}
ncclResult_t FakeCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  fake.calls.push_back("CommInitRank");
  fake.init_nranks = nranks;
  fake.init_rank = rank;
  fake.init_id = id;
  *comm = FakeComm();
  return ncclSuccess;
}
ncclResult_t FakeCommDestroy(ncclComm_t) { fake.calls.push_back("CommDestroy"); return ncclSuccess; }
ncclResult_t FakeCommAbort(ncclComm_t) { fake.calls.push_back("CommAbort"); return ncclSuccess; }
ncclResult_t FakeAsyncError(ncclComm_t, ncclResult_t* e) { *e = ncclSuccess; return ncclSuccess; }
const char* FakeErrorString(ncclResult_t r) { return r == ncclSystemError ? "unhandled system error" : "other"; }
ncclResult_t FakeAllReduce(const void*, void*, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t,
                           cudaStream_t s) {
  fake.calls.push_back("AllReduce");
  fake.count = count;
  fake.type = t;
  fake.op = op;
  fake.stream = s;
  return fake.fail_all_reduce;
}
ncclResult_t FakeAllGather(const void*, void*, size_t count, ncclDataType_t t, ncclComm_t, cudaStream_t) {
  fake.calls.push_back("AllGather");
  fake.count = count;
  fake.type = t;
  return ncclSuccess;
}
ncclResult_t FakeReduceScatter(const void*, void*, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t,
                               cudaStream_t) {
  fake.calls.push_back("ReduceScatter");
  fake.count = count;
  fake.type = t;
  fake.op = op;
  return ncclSuccess;
}
ncclResult_t FakeSend(const void*, size_t, ncclDataType_t, int peer, ncclComm_t, cudaStream_t) {
  fake.calls.push_back("Send" + std::to_string(peer));
  return ncclSuccess;
}
ncclResult_t FakeRecv(void*, size_t, ncclDataType_t, int peer, ncclComm_t, cudaStream_t) {
  fake.calls.push_back("Recv" + std::to_string(peer));
  return ncclSuccess;
}
CUresult FakeMemset(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream stream) {
  fake.calls.push_back("Memset" + std::to_string(bytes));
  fake.stream = stream;
  if (value != 0) return CUDA_ERROR_INVALID_VALUE;
  (void)dst;  // device memory the fake never touches
  return CUDA_SUCCESS;
}
ncclResult_t FakeGroupStart() { fake.calls.push_back("GroupStart"); return ncclSuccess; }
ncclResult_t FakeGroupEnd() { fake.calls.push_back("GroupEnd"); return ncclSuccess; }
int fake_version = 0;
ncclResult_t FakeGetVersion(int* v) {
  if (fake_version < 0) return ncclSystemError;
  *v = fake_version;
  return ncclSuccess;
}

coll::NcclApi FakeApi() {
  coll::NcclApi api;
  api.GetVersion = FakeGetVersion;
  api.GetUniqueId = FakeGetUniqueId;
  api.CommInitRank = FakeCommInitRank;
  api.CommDestroy = FakeCommDestroy;
  api.CommAbort = FakeCommAbort;
  api.CommGetAsyncError = FakeAsyncError;
  api.GetErrorString = FakeErrorString;
  api.AllReduce = FakeAllReduce;
  api.AllGather = FakeAllGather;
  api.ReduceScatter = FakeReduceScatter;
  api.Send = FakeSend;
  api.Recv = FakeRecv;
  api.GroupStart = FakeGroupStart;
  api.GroupEnd = FakeGroupEnd;
  api.MemsetD8Async = FakeMemset;
  return api;
}

std::map<std::string, std::string> kv;
coll::BootstrapStore Store() {
  coll::BootstrapStore s;
  s.set = [](const std::string& k, const std::string& v) { kv[k] = v; return myplugin::OkStatus(); };
  s.get = [](const std::string& k, double) -> myplugin::StatusOr<std::string> {
    auto it = kv.find(k);
    if (it == kv.end()) return myplugin::Status(myplugin::Code::kDeadlineExceeded, "key '" + k + "' was not set");
    return it->second;
  };
  return s;
}

void TestBootstrap() {
  kv.clear();
  fake = FakeLog();
  auto api = FakeApi();
  // Rank 1 before rank 0 published: a clear timeout.
  auto early = coll::ExchangeUniqueId(api, Store(), "nccl/x", 1, 1.0);
  CHECK(!early.ok() && early.status().message().find("rank 0's NCCL unique id") != std::string::npos);
  auto r0 = coll::NcclCommunicator::Create(api, 0, 2, Store(), "nccl/x", 1.0);
  CHECK(r0.ok());
  CHECK(fake.calls.size() == 2 && fake.calls[0] == "GetUniqueId" && fake.calls[1] == "CommInitRank");
  ncclUniqueId published = fake.init_id;
  fake = FakeLog();
  auto r1 = coll::NcclCommunicator::Create(api, 1, 2, Store(), "nccl/x", 1.0);
  CHECK(r1.ok());
  CHECK(fake.calls.size() == 1 && fake.calls[0] == "CommInitRank");  // rank 1 makes no id of its own
  CHECK(fake.init_rank == 1 && fake.init_nranks == 2);
  CHECK(std::memcmp(fake.init_id.internal, published.internal, NCCL_UNIQUE_ID_BYTES) == 0);
  kv["nccl/bad"] = "short";
  auto bad = coll::ExchangeUniqueId(api, Store(), "nccl/bad", 1, 1.0);
  CHECK(!bad.ok() && bad.status().code() == myplugin::Code::kDataLoss);
}

void TestMapping() {
  using coll::DataType;
  using coll::Reduction;
  auto f = coll::ToNccl(DataType::kBF16, Reduction::kMax);
  CHECK(f.ok() && f.value().type == ncclBfloat16 && f.value().op == ncclMax);
  auto p_and = coll::ToNccl(DataType::kPred, Reduction::kAnd);
  CHECK(p_and.ok() && p_and.value().type == ncclUint8 && p_and.value().op == ncclMin);
  auto p_or = coll::ToNccl(DataType::kPred, Reduction::kOr);
  CHECK(p_or.ok() && p_or.value().op == ncclMax);
  auto c = coll::ToNccl(DataType::kC128, Reduction::kSum);
  CHECK(c.ok() && c.value().type == ncclFloat64 && c.value().count_multiplier == 2);
  CHECK(!coll::ToNccl(DataType::kC64, Reduction::kMax).ok());
  CHECK(!coll::ToNccl(DataType::kS16, Reduction::kSum).ok());  // NCCL has no 16-bit integers
  CHECK(!coll::ToNccl(DataType::kF32, Reduction::kAnd).ok());
}

void TestCalls() {
  kv.clear();
  fake = FakeLog();
  auto comm = coll::NcclCommunicator::Create(FakeApi(), 0, 3, Store(), "nccl/y", 1.0).take();
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x77);
  // Device buffers the fake never touches. Not null: the communicator offsets
  // them per peer, and an offset from a null pointer is undefined (UBSan).
  void* const send = reinterpret_cast<void*>(0x10000);
  void* const recv = reinterpret_cast<void*>(0x20000);
  fake = FakeLog();
  CHECK(comm->AllReduce(nullptr, nullptr, 10, coll::DataType::kC64, coll::Reduction::kSum, stream).ok());
  CHECK(fake.count == 20 && fake.type == ncclFloat32 && fake.op == ncclSum && fake.stream == stream);
  CHECK(comm->AllGather(nullptr, nullptr, 4, coll::DataType::kF64, stream).ok());
  CHECK(fake.count == 32 && fake.type == ncclUint8);
  fake = FakeLog();
  CHECK(comm->AllToAll(send, recv, 2, coll::DataType::kF32, stream).ok());
  std::vector<std::string> want = {"GroupStart", "Send0", "Recv0", "Send1", "Recv1", "Send2", "Recv2", "GroupEnd"};
  CHECK(fake.calls == want);
  fake = FakeLog();
  // No rank sends to this one: its target is zeroed on the call's stream,
  // as XLA's collective-permute gives; one with a source is not.
  CHECK(comm->CollectivePermute(send, recv, 2, coll::DataType::kF32, 1, -1, stream).ok());
  CHECK((fake.calls == std::vector<std::string>{"Memset8", "GroupStart", "Send1", "GroupEnd"}));
  CHECK(fake.stream == stream);
  fake = FakeLog();
  CHECK(comm->CollectivePermute(send, recv, 2, coll::DataType::kF32, -1, 2, stream).ok());
  CHECK((fake.calls == std::vector<std::string>{"GroupStart", "Recv2", "GroupEnd"}));

  // A combined collective: its operands' calls go out as one NCCL group,
  // each with its own count (a scatter's divided by the group size) and type.
  fake = FakeLog();
  std::vector<coll::CombinedOperand> two = {{coll::DataType::kF32, 4, send, recv}, {coll::DataType::kS32, 6, send, recv}};
  CHECK(coll::EnqueueCombined(*comm, coll::CollectiveOp::kAllReduce, two, coll::Reduction::kSum, 3, stream).ok());
  CHECK((fake.calls == std::vector<std::string>{"GroupStart", "AllReduce", "AllReduce", "GroupEnd"}));
  CHECK(fake.count == 6 && fake.type == ncclInt32);
  fake = FakeLog();
  CHECK(coll::EnqueueCombined(*comm, coll::CollectiveOp::kReduceScatter, two, coll::Reduction::kMax, 2, stream).ok());
  CHECK((fake.calls == std::vector<std::string>{"GroupStart", "ReduceScatter", "ReduceScatter", "GroupEnd"}));
  CHECK(fake.count == 3 && fake.op == ncclMax);
  fake = FakeLog();
  CHECK(coll::EnqueueCombined(*comm, coll::CollectiveOp::kAllGather, {two[1]}, coll::Reduction::kNone, 3, stream).ok());
  CHECK((fake.calls == std::vector<std::string>{"AllGather"}) && fake.count == 24);  // one operand: no group
  fake = FakeLog();  // a count that does not split over the group fails before NCCL hears of it
  CHECK(!coll::EnqueueCombined(*comm, coll::CollectiveOp::kReduceScatter, two, coll::Reduction::kSum, 4, stream).ok());
  CHECK(fake.calls.empty());
  fake = FakeLog();
  fake.fail_all_reduce = ncclSystemError;  // an error inside still ends the group
  CHECK(!comm->Group([&] {
    return comm->AllReduce(send, recv, 4, coll::DataType::kF32, coll::Reduction::kSum, stream);
  }).ok());
  CHECK(fake.calls.back() == "GroupEnd");

  fake.fail_all_reduce = ncclSystemError;
  auto err = comm->AllReduce(nullptr, nullptr, 1, coll::DataType::kF32, coll::Reduction::kSum, stream);
  CHECK(!err.ok() && err.message().find("ncclAllReduce failed: unhandled system error") != std::string::npos);

  fake = FakeLog();
  comm->Abort(myplugin::Status(myplugin::Code::kAborted, "process 2 failed: killed"));
  CHECK(fake.calls == std::vector<std::string>{"CommAbort"});
  auto after = comm->AllReduce(nullptr, nullptr, 1, coll::DataType::kF32, coll::Reduction::kSum, stream);
  CHECK(!after.ok() && after.message().find("process 2 failed: killed") != std::string::npos);
  fake = FakeLog();
  comm.reset();  // an aborted communicator is not destroyed again
  CHECK(fake.calls.empty());
}

bool Has(const myplugin::Status& st, const std::string& text) {
  return st.message().find(text) != std::string::npos;
}

void TestLoadErrors() {
  auto missing = coll::NcclApi::Load("/nonexistent/libnccl.so.2");
  CHECK(!missing.ok() && Has(missing.status(), "nvidia-nccl-cu12"));
  auto not_nccl = coll::NcclApi::Load("libm.so.6");
  CHECK(!not_nccl.ok() && Has(not_nccl.status(), "libm.so.6 has no ncclGetVersion"));
  // A whole library (tests/cpp/fake_libnccl.cc): too old is refused as it
  // loads, naming the file, its version and the minimum; new enough loads.
  auto old_nccl = coll::NcclApi::Load(MYPLUGIN_FAKE_NCCL_OLD);
  CHECK(!old_nccl.ok() && old_nccl.status().code() == myplugin::Code::kFailedPrecondition);
  CHECK(!old_nccl.ok() && Has(old_nccl.status(), std::string(MYPLUGIN_FAKE_NCCL_OLD) + " is NCCL 2.5.6; myplugin "
                                                 "needs NCCL 2.18.0 or newer"));
  // The stand-in is its own CUDA driver too (its cuMemsetD8Async); one that
  // cannot be found or lacks the call is named.
  auto no_driver = coll::NcclApi::Load(MYPLUGIN_FAKE_NCCL_NEW, "/nonexistent/libcuda.so.1");
  CHECK(!no_driver.ok() && Has(no_driver.status(), "cannot load the CUDA driver (/nonexistent/libcuda.so.1)"));
  auto not_driver = coll::NcclApi::Load(MYPLUGIN_FAKE_NCCL_NEW, "libm.so.6");
  CHECK(!not_driver.ok() &&
        Has(not_driver.status(), "libm.so.6 has no cuMemsetD8Async: not a CUDA driver"));
  auto new_nccl = coll::NcclApi::Load(MYPLUGIN_FAKE_NCCL_NEW, MYPLUGIN_FAKE_NCCL_NEW);
  CHECK(new_nccl.ok());
  // The copies by the names cuda.h gives them (cuMemcpyDtoHAsync_v2).
  CHECK(new_nccl.value().MemcpyDtoHAsync != nullptr && new_nccl.value().MemcpyDtoDAsync != nullptr &&
        new_nccl.value().StreamSynchronize != nullptr);
  int code = 0;
  CHECK(new_nccl.ok() && new_nccl.value().GetVersion(&code) == ncclSuccess && code == 21801);
}

// Version codes, against NCCL's own macro, and the check on a fake ncclGetVersion.
void TestVersionCheck() {
  for (auto [major, minor, patch] : {std::array<int, 3>{2, 5, 6}, {2, 8, 4}, {2, 9, 6}, {2, 18, 0}, {2, 28, 9},
                                     {2, 32, 3}, {3, 0, 1}}) {
    const int code = NCCL_VERSION(major, minor, patch);
    CHECK(coll::NcclVersionCode(major, minor, patch) == code);
    CHECK(coll::NcclVersionName(code) == std::to_string(major) + "." + std::to_string(minor) + "." +
                                             std::to_string(patch));
  }
  coll::NcclApi api = FakeApi();
  const std::string path = "/opt/nccl/libnccl.so.2";
  for (int code : {2506, 2804, 21701}) {  // 2.5.6 (before the 2.9 encoding), 2.8.4, 2.17.1
    fake_version = code;
    myplugin::Status st = api.CheckVersion(path);
    CHECK(st.code() == myplugin::Code::kFailedPrecondition);
    CHECK(Has(st, path + " is NCCL " + coll::NcclVersionName(code) + "; myplugin needs NCCL 2.18.0 or newer"));
  }
  for (int code : {21800, 21803, 22809, 30001}) {
    fake_version = code;
    CHECK(api.CheckVersion(path).ok());
  }
  fake_version = -1;  // ncclGetVersion itself fails
  myplugin::Status broken = api.CheckVersion(path);
  CHECK(!broken.ok() && Has(broken, "ncclGetVersion failed: unhandled system error"));
}

// Seconds that `text` states right after `word` ("after 0.52 s": 0.52), or -1.
double StatedSeconds(const std::string& text, const std::string& word) {
  const size_t at = text.find(word);
  if (at == std::string::npos) return -1;
  char* end = nullptr;
  const double s = std::strtod(text.c_str() + at + word.size(), &end);
  return end != text.c_str() + at + word.size() && std::strncmp(end, " s", 2) == 0 ? s : -1;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The stand-in libnccl (tests/cpp/fake_libnccl.cc) through NcclApi::Load, and
// its test-only knobs.
struct FakeLibnccl {
  coll::NcclApi api;
  void (*fail_after)(int polls, ncclResult_t error) = nullptr;
  int (*aborts)() = nullptr;
  void (*fail_in)(int ms, ncclResult_t error) = nullptr;
  void (*in_progress)(int on) = nullptr;
  int (*polls)(ncclComm_t comm) = nullptr;
  int (*used_after_end)() = nullptr;
  ncclComm_t (*last_comm)() = nullptr;
  int (*wait_kernel)(ncclComm_t comm, double timeout_s) = nullptr;
};
FakeLibnccl LoadFakeLibnccl() {
  FakeLibnccl fake_nccl;
  auto api = coll::NcclApi::Load(MYPLUGIN_FAKE_NCCL_NEW, MYPLUGIN_FAKE_NCCL_NEW);
  CHECK(api.ok());
  if (api.ok()) fake_nccl.api = api.take();
  void* lib = dlopen(MYPLUGIN_FAKE_NCCL_NEW, RTLD_NOW | RTLD_LOCAL);  // the library Load opened
  CHECK(lib != nullptr);
  if (lib == nullptr) return fake_nccl;
  fake_nccl.fail_after = reinterpret_cast<void (*)(int, ncclResult_t)>(dlsym(lib, "myplugin_fake_nccl_fail_after"));
  fake_nccl.aborts = reinterpret_cast<int (*)()>(dlsym(lib, "myplugin_fake_nccl_aborts"));
  auto find = [lib](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    CHECK(fn != nullptr);
  };
  find(fake_nccl.fail_in, "myplugin_fake_nccl_fail_in");
  find(fake_nccl.in_progress, "myplugin_fake_nccl_in_progress");
  find(fake_nccl.polls, "myplugin_fake_nccl_polls");
  find(fake_nccl.used_after_end, "myplugin_fake_nccl_used_after_end");
  find(fake_nccl.last_comm, "myplugin_fake_nccl_last_comm");
  find(fake_nccl.wait_kernel, "myplugin_fake_nccl_wait_kernel");
  CHECK(fake_nccl.fail_after != nullptr && fake_nccl.aborts != nullptr);
  if (fake_nccl.wait_kernel == nullptr) fake_nccl.fail_after = nullptr;  // the tests check fail_after
  return fake_nccl;
}

// The job's key-value store, as a job of one process has it (in memory).
coll::BootstrapStore StoreOf(coll::InProcessKeyValues& values) {
  coll::BootstrapStore s;
  s.set = [&values](const std::string& k, const std::string& v) { return values.Set(k, v); };
  s.get = [&values](const std::string& k, double t) { return values.Get(k, t); };
  s.try_get = [&values](const std::string& k) { return values.Get(k, 0); };
  return s;
}

cudaStream_t const kStream = reinterpret_cast<cudaStream_t>(0x77);
void* const kSend = reinterpret_cast<void*>(0x10000);
void* const kRecv = reinterpret_cast<void*>(0x20000);

myplugin::Status AllReduceOn(coll::NcclCommunicator& comm) {
  return comm.AllReduce(kSend, kRecv, 8, coll::DataType::kF32, coll::Reduction::kSum, kStream);
}

// A non-cyclic permute (a pipeline shift) through the stand-in libnccl,
// whose cuMemsetD8Async fills host memory: the target of a rank that no rank
// sends to holds zeros after the call, as XLA gives, whatever was there; a
// rank with a source keeps what its receive writes (the stand-in's writes
// nothing, so the old contents stay: no fill behind NCCL's back).
void TestPermuteWithoutSourceGivesZeros() {
  FakeLibnccl nccl = LoadFakeLibnccl();
  if (nccl.fail_after == nullptr) return;
  kv.clear();
  auto comm = coll::NcclCommunicator::Create(nccl.api, 0, 1, Store(), "nccl/permute", 1.0);
  CHECK(comm.ok());
  if (!comm.ok()) return;
  std::vector<float> send(6, 1.5f), first(6, 7.0f), middle(6, 7.0f);
  CHECK(comm.value()->CollectivePermute(send.data(), first.data(), 6, coll::DataType::kF32, 1, -1, kStream).ok());
  CHECK(first == std::vector<float>(6, 0.0f));
  CHECK(comm.value()->CollectivePermute(send.data(), middle.data(), 6, coll::DataType::kF32, 1, 0, kStream).ok());
  CHECK(middle == std::vector<float>(6, 7.0f));
  std::vector<uint16_t> bf16(5, 0x3f80);  // 2-byte elements: every byte of the target
  CHECK(comm.value()->CollectivePermute(send.data(), bf16.data(), 5, coll::DataType::kBF16, -1, -1, kStream).ok());
  CHECK(bf16 == std::vector<uint16_t>(5, 0));
}

// The partition-id/replica-id handlers' lookup (both engines'): the entry of
// the device's global id, whatever its local ordinal; a table without it is
// an error, not a read past its end. The CUDA handler then writes the value
// with the stand-in driver's cuMemsetD32Async, checked here on host memory.
void TestDeviceIdTable() {
  coll::SetLocalDeviceIds({{0, 5}, {3, 6}});
  const std::vector<int64_t> ids = {0, 0, 0, 0, 0, 2, 3, 0};
  auto first = coll::DeviceIdFromTable(0, ids.data(), ids.size());
  auto second = coll::DeviceIdFromTable(3, ids.data(), ids.size());
  CHECK(first.ok() && first.value() == 2u && second.ok() && second.value() == 3u);
  auto past = coll::DeviceIdFromTable(3, ids.data(), 6);
  CHECK(!past.ok() && Has(past.status(), "no id for device 6"));
  coll::SetLocalDeviceIds({});
  FakeLibnccl nccl = LoadFakeLibnccl();
  if (nccl.fail_after == nullptr) return;
  uint32_t out = 77;
  CHECK(nccl.api.MemsetD32Async(reinterpret_cast<CUdeviceptr>(&out), 3u, 1, reinterpret_cast<CUstream>(kStream)) ==
        CUDA_SUCCESS);
  CHECK(out == 3u);
}

// (a) A peer found a mismatch, published it and left its NCCL calls: the
// kernel this process has in flight with it fails (ncclRemoteError, seen by
// ncclCommGetAsyncError at the next call). The error is the mismatch, and
// NCCL's communicator is aborted, as NCCL requires after such an error.
void TestNcclErrorNamesTheMismatch() {
  FakeLibnccl nccl = LoadFakeLibnccl();
  if (nccl.fail_after == nullptr) return;
  coll::InProcessKeyValues values;
  coll::NcclDeviceGroups device_groups(nccl.api, StoreOf(values), 1.0, /*notice_wait_s=*/2.0);
  auto comm = device_groups.ForDevice({0}, 0);
  CHECK(comm.ok());
  if (!comm.ok()) return;
  nccl.fail_after(2, ncclRemoteError);
  CHECK(AllReduceOn(*comm.value()).ok());  // the first poll: nothing has failed
  const std::string mismatch =
      "all-reduce sum f32[8] (call #4) on processes [0, 1]: process 1 issued all-gather f32[8] (call #4)";
  device_groups.ReportMismatch(myplugin::Status(myplugin::Code::kFailedPrecondition, mismatch));
  const int aborts = nccl.aborts();
  myplugin::Status st = AllReduceOn(*comm.value());
  CHECK(st.code() == myplugin::Code::kFailedPrecondition);
  CHECK(st.message().rfind(mismatch, 0) == 0);  // the cause first
  CHECK(Has(st, "remote process exited or there was a network error"));  // then what NCCL saw of it
  CHECK(st.failure() != nullptr && st.failure()->kind == myplugin::FailureKind::kMismatch);
  CHECK(nccl.aborts() == aborts + 1);
  myplugin::Status later = comm.value()->AllGather(kSend, kRecv, 4, coll::DataType::kF32, kStream);
  CHECK(later.code() == myplugin::Code::kAborted && Has(later, mismatch));
  nccl.fail_after(0, ncclSuccess);
}

// (b) A peer died: NCCL's error here comes before the service's notice
// (injected 0.3 s late), and the error names the failed process all the same;
// likewise for an error that an NCCL call returns itself.
void TestNcclErrorNamesTheFailedPeer() {
  FakeLibnccl nccl = LoadFakeLibnccl();
  if (nccl.fail_after == nullptr) return;
  coll::InProcessKeyValues values;
  coll::BootstrapStore store = StoreOf(values);
  auto notice = std::make_shared<std::mutex>();
  auto failure = std::make_shared<std::optional<myplugin::Status>>();
  store.failure = [notice, failure] {
    std::lock_guard<std::mutex> lock(*notice);
    return *failure;
  };
  const myplugin::Status died = myplugin::Status(myplugin::Code::kAborted, "process 2 failed: killed by signal 9")
                                    .WithFailure({myplugin::FailureKind::kPeerFailure, {2}, "", -1});
  coll::NcclDeviceGroups device_groups(nccl.api, store, 1.0, /*notice_wait_s=*/3.0);
  auto comm = device_groups.ForDevice({0}, 0);
  CHECK(comm.ok());
  if (!comm.ok()) return;
  nccl.fail_after(1, ncclRemoteError);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::lock_guard<std::mutex> lock(*notice);
    *failure = died;
  });
  myplugin::Status st = AllReduceOn(*comm.value());
  late.join();
  nccl.fail_after(0, ncclSuccess);
  CHECK(st.code() == myplugin::Code::kAborted);
  CHECK(st.message().rfind("process 2 failed: killed by signal 9 (", 0) == 0);
  CHECK(st.failure() != nullptr && st.failure()->kind == myplugin::FailureKind::kPeerFailure &&
        st.failure()->processes == std::vector<int>{2});

  // An NCCL call that returns the error itself (a connection NCCL makes as
  // the call starts), with the notice already there.
  kv.clear();
  fake = FakeLog();
  coll::NcclCauses causes{[died] { return std::optional<myplugin::Status>(died); }, 3.0};
  auto direct = coll::NcclCommunicator::Create(FakeApi(), 0, 2, Store(), "nccl/b", 1.0, causes);
  CHECK(direct.ok());
  if (!direct.ok()) return;
  fake.fail_all_reduce = ncclRemoteError;
  myplugin::Status sync = AllReduceOn(*direct.value());
  CHECK(sync.message().rfind("process 2 failed: killed by signal 9 (ncclAllReduce failed", 0) == 0);
  CHECK(sync.failure() != nullptr && sync.failure()->processes == std::vector<int>{2});
  fake.fail_all_reduce = ncclInvalidArgument;  // this process's own error is never blamed on a peer
  myplugin::Status own = AllReduceOn(*direct.value());
  CHECK(own.code() == myplugin::Code::kInvalidArgument && !Has(own, "process 2"));
}

// (c) Neither is known: NCCL's error, saying how long it actually took (the
// wait for a cause included); and a rank that waits in vain for rank 0's
// unique id says how long it waited.
void TestNcclErrorStatesTheTimeWaited() {
  FakeLibnccl nccl = LoadFakeLibnccl();
  if (nccl.fail_after == nullptr) return;
  coll::InProcessKeyValues values;
  constexpr double kWait = 0.5;
  coll::NcclDeviceGroups device_groups(nccl.api, StoreOf(values), 1.0, kWait);
  auto comm = device_groups.ForDevice({0}, 0);
  CHECK(comm.ok());
  if (!comm.ok()) return;
  // The calls inside a group leave the error to the next call: aborting
  // there would free the communicator under the calls already grouped.
  nccl.fail_after(2, ncclRemoteError);
  const int aborts = nccl.aborts();
  CHECK(comm.value()->Group([&] {
    MYPLUGIN_RETURN_IF_ERROR(AllReduceOn(*comm.value()));
    return AllReduceOn(*comm.value());
  }).ok());
  CHECK(nccl.aborts() == aborts);
  const auto start = std::chrono::steady_clock::now();
  myplugin::Status st = AllReduceOn(*comm.value());
  const double elapsed = SecondsSince(start);
  nccl.fail_after(0, ncclSuccess);
  CHECK(st.code() == myplugin::Code::kInternal);
  CHECK(Has(st, "an earlier call on this NCCL communicator failed after "));
  CHECK(Has(st, ": remote process exited or there was a network error (NCCL error " +
                    std::to_string(static_cast<int>(ncclRemoteError)) + ") on rank 0 of 1"));
  CHECK(Has(st, "no process is known to have failed or reported a mismatch"));
  const double stated = StatedSeconds(st.message(), "failed after ");
  CHECK(stated >= kWait && stated <= elapsed + 0.01);

  const auto asked = std::chrono::steady_clock::now();
  auto id = coll::ExchangeUniqueId(nccl.api, StoreOf(values), "nccl/never", 1, 0.2);
  const double waited = SecondsSince(asked);
  CHECK(!id.ok() && id.status().code() == myplugin::Code::kDeadlineExceeded);
  const double said = id.ok() ? -1 : StatedSeconds(id.status().message(), "rank 1 waited ");
  CHECK(said >= 0.2 && said <= waited + 0.01);
}

// What the communicators reported to the job: this process's failure, as
// NcclWatch::fail_process hands it over (reason, blamed processes).
struct Reports {
  std::mutex mu;
  std::vector<std::pair<std::string, std::vector<int>>> made;
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return made.size();
  }
  // The watchdog reports just after its abort has ended the kernel that the
  // test waits on: the report may come a moment later (seen under TSan).
  size_t SizeWithin(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (size() == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return size();
  }
};
void ReportTo(coll::BootstrapStore& store, const std::shared_ptr<Reports>& reports) {
  store.fail_process = [reports](const std::string& reason, const std::vector<int>& blamed) {
    std::lock_guard<std::mutex> lock(reports->mu);
    reports->made.push_back({reason, blamed});
  };
}

// The job's failure notice, set by a test's thread, read by the causes.
struct Notice {
  std::mutex mu;
  std::optional<myplugin::Status> failure;
};
void NoticeFrom(coll::BootstrapStore& store, const std::shared_ptr<Notice>& notice) {
  store.failure = [notice] {
    std::lock_guard<std::mutex> lock(notice->mu);
    return notice->failure;
  };
}

// The watchdog's poll period in these tests: short, so they take little time.
constexpr double kTestPollS = 0.02;
// How long the host waits for a kernel that should be ended by the abort:
// far past what finding it takes (the poll period plus the cause's wait).
constexpr double kKernelWaitS = 20;

// (a) The watchdog: a kernel is in flight (the host waits for its stream)
// when its peer dies; NCCL's asynchronous error appears 0.2 s later, the
// service's notice 0.3 s after that. The watchdog finds the error, waits
// for the notice, aborts the communicator (the kernel ends: nothing else in
// this test would end it), reports this process's failure naming the dead
// peer and the call, and the next call returns the explained error. Without
// a cause: NCCL's error, the time since the call was enqueued, "no process
// is known to have failed". Against the code before the watchdog the kernel
// is never ended (the host's wait runs out).
void TestWatchdogEndsTheKernelInFlight() {
  FakeLibnccl nccl = LoadFakeLibnccl();
  if (nccl.fail_after == nullptr) return;
  coll::NcclWatchdog watchdog(kTestPollS);
  CHECK(!watchdog.running());  // started by the first communicator
  coll::InProcessKeyValues values;
  coll::BootstrapStore store = StoreOf(values);
  auto notice = std::make_shared<Notice>();
  auto reports = std::make_shared<Reports>();
  NoticeFrom(store, notice);
  ReportTo(store, reports);
  const myplugin::Status died = myplugin::Status(myplugin::Code::kAborted, "process 2 failed: killed by signal 9")
                                    .WithFailure({myplugin::FailureKind::kPeerFailure, {2}, "", -1});
  coll::NcclDeviceGroups device_groups(nccl.api, store, 1.0, /*notice_wait_s=*/3.0, &watchdog);
  auto comm = device_groups.ForDevice({0}, 0);
  CHECK(comm.ok());
  if (!comm.ok()) return;
  CHECK(watchdog.running());
  const ncclComm_t kernel_comm = nccl.last_comm();
  const int aborts = nccl.aborts();
  {
    coll::FunctionScope scope("jit_step");
    CHECK(AllReduceOn(*comm.value()).ok());  // enqueued: the kernel is in flight
  }
  nccl.fail_in(200, ncclRemoteError);
  std::thread late([notice, died] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::lock_guard<std::mutex> lock(notice->mu);
    notice->failure = died;
  });
  const auto start = std::chrono::steady_clock::now();
  const int ended = nccl.wait_kernel(kernel_comm, kKernelWaitS);  // the host, blocked on the stream
  const double waited = SecondsSince(start);
  late.join();
  nccl.fail_in(-1, ncclSuccess);
  CHECK(ended == 1);
  // Within the 3 s that a cause is looked for: the notice ended the look.
  CHECK(waited < 3.0);
  CHECK(nccl.aborts() == aborts + 1);
  myplugin::Status st = AllReduceOn(*comm.value());
  CHECK(st.code() == myplugin::Code::kAborted);
  CHECK(st.message().rfind("process 2 failed: killed by signal 9 (the NCCL watchdog: ncclAllReduce of 8 f32 in "
                           "jit_step (call #1 on this NCCL communicator) failed: remote process exited",
                           0) == 0);
  CHECK(st.failure() != nullptr && st.failure()->kind == myplugin::FailureKind::kPeerFailure &&
        st.failure()->processes == std::vector<int>{2});
  myplugin::Status later = AllReduceOn(*comm.value());  // the abort stays
  CHECK(later.code() == myplugin::Code::kAborted &&
        later.message().rfind("the NCCL communicator was aborted: process 2 failed", 0) == 0);
  CHECK(reports->SizeWithin(5.0) == 1);
  if (reports->size() == 1) {
    const auto& [reason, blamed] = reports->made[0];
    CHECK(reason.rfind("aborted the NCCL communicator of device 0 (rank 0) in device group [0]: process 2 failed: "
                       "killed by signal 9 (the NCCL watchdog: ncclAllReduce of 8 f32 in jit_step",
                       0) == 0);
    CHECK(blamed == std::vector<int>{2});
  }

  // No cause: NCCL's error after the look, with the time since the call.
  constexpr double kWait = 0.3;
  coll::BootstrapStore quiet = StoreOf(values);
  auto quiet_reports = std::make_shared<Reports>();
  ReportTo(quiet, quiet_reports);
  coll::NcclDeviceGroups alone(nccl.api, quiet, 1.0, kWait, &watchdog);
  auto solo = alone.ForDevice({5}, 5);
  CHECK(solo.ok());
  if (!solo.ok()) return;
  const ncclComm_t solo_comm = nccl.last_comm();
  const auto enqueued = std::chrono::steady_clock::now();
  CHECK(solo.value()->AllGather(kSend, kRecv, 4, coll::DataType::kS32, kStream).ok());
  nccl.fail_in(100, ncclSystemError);
  const int solo_ended = nccl.wait_kernel(solo_comm, kKernelWaitS);
  nccl.fail_in(-1, ncclSuccess);
  const double since = SecondsSince(enqueued);
  CHECK(solo_ended == 1);
  myplugin::Status none = solo.value()->AllGather(kSend, kRecv, 4, coll::DataType::kS32, kStream);
  CHECK(none.code() == myplugin::Code::kInternal);
  CHECK(Has(none, "the NCCL watchdog: ncclAllGather of 4 s32 (call #1 on this NCCL communicator) failed after "));
  CHECK(Has(none, "on rank 0 of 1; no process is known to have failed or reported a mismatch"));
  const double stated = StatedSeconds(none.message(), "failed after ");
  CHECK(stated >= 0.1 + kWait && stated <= since + 0.01);
  CHECK(quiet_reports->SizeWithin(5.0) == 1);
  if (quiet_reports->size() == 1) {
    CHECK(quiet_reports->made[0].first.rfind("aborted the NCCL communicator of device 5 (rank 0) in device group "
                                             "[5]: the NCCL watchdog: ncclAllGather of 4 s32",
                                             0) == 0);
    CHECK(quiet_reports->made[0].second.empty());
  }
}

// (b) No false alarm: a healthy communicator (its polls answer success and,
// every other time, ncclInProgress) polled many times is never aborted nor
// reported, and its calls go on.
void TestWatchdogNoFalseAlarm() {
  FakeLibnccl nccl = LoadFakeLibnccl();
  if (nccl.fail_after == nullptr) return;
  coll::NcclWatchdog watchdog(0.002);
  coll::InProcessKeyValues values;
  coll::BootstrapStore store = StoreOf(values);
  auto reports = std::make_shared<Reports>();
  ReportTo(store, reports);
  coll::NcclDeviceGroups device_groups(nccl.api, store, 1.0, 0.2, &watchdog);
  nccl.in_progress(1);
  auto comm = device_groups.ForDevice({0}, 0);
  CHECK(comm.ok());
  if (!comm.ok()) return;
  const ncclComm_t handle = nccl.last_comm();
  const int aborts = nccl.aborts();
  CHECK(AllReduceOn(*comm.value()).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (nccl.polls(handle) < 100 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(nccl.polls(handle) >= 100);
  CHECK(nccl.aborts() == aborts);
  CHECK(reports->size() == 0);
  CHECK(AllReduceOn(*comm.value()).ok());
  nccl.in_progress(0);
}

// (c) A communicator destroyed (or aborted) while the watchdog polls as
// fast as it can is never polled after NCCL's communicator is gone: the
// stand-in counts uses of an aborted or destroyed one. Some are aborted by
// another thread as they are destroyed, as a failure notice does. And one
// destroyed while the watchdog explains its error (the cause's look takes
// 0.3 s) is destroyed only after that poll ended: the poll's abort then
// comes before, not after, NCCL's communicator is gone.
void TestWatchdogNeverPollsAnEndedCommunicator() {
  FakeLibnccl nccl = LoadFakeLibnccl();
  if (nccl.fail_after == nullptr) return;
  coll::NcclWatchdog watchdog(0.0002);
  coll::InProcessKeyValues values;
  const int after_end = nccl.used_after_end();
  int polled = 0;
  for (int i = 0; i < 300; ++i) {
    auto made = coll::NcclCommunicator::Create(nccl.api, 0, 1, StoreOf(values), "nccl/c/" + std::to_string(i), 1.0,
                                               {}, {&watchdog, {}, ""});
    CHECK(made.ok());
    if (!made.ok()) return;
    const ncclComm_t handle = nccl.last_comm();
    std::unique_ptr<coll::NcclCommunicator> comm = made.take();
    std::this_thread::sleep_for(std::chrono::microseconds(100 * (i % 7)));
    if (i % 3 == 0) {
      coll::NcclCommunicator* aborted = comm.get();
      std::thread notice([aborted] { aborted->Abort(myplugin::Status(myplugin::Code::kAborted, "process 1 failed")); });
      std::this_thread::sleep_for(std::chrono::microseconds(50 * (i % 5)));
      notice.join();
    }
    comm.reset();
    polled += nccl.polls(handle) > 0 ? 1 : 0;
  }
  CHECK(nccl.used_after_end() == after_end);
  CHECK(polled > 0);  // the watchdog did poll them while they lived

  coll::NcclCauses slow{[] { return std::optional<myplugin::Status>(); }, 0.3};
  auto explained = coll::NcclCommunicator::Create(nccl.api, 0, 1, StoreOf(values), "nccl/c/slow", 1.0, slow,
                                                  {&watchdog, {}, ""});
  CHECK(explained.ok());
  if (!explained.ok()) return;
  const ncclComm_t handle = nccl.last_comm();
  const int aborts = nccl.aborts();
  nccl.fail_in(0, ncclRemoteError);
  // A poll counted from here on reads the error (the fake counts, then
  // reads it); one counted before may have read the health before it (a
  // loaded machine: the watchdog's first poll came before the injection).
  const int polls_at_fail = nccl.polls(handle);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (nccl.polls(handle) < polls_at_fail + 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  explained.value().reset();  // while the watchdog looks for the cause
  nccl.fail_in(-1, ncclSuccess);
  CHECK(nccl.aborts() == aborts + 1);  // the poll's, before the destruction returned
  CHECK(nccl.used_after_end() == after_end);
}

// (d) What a poll finds is handled on a thread of its own: a communicator
// whose error takes long to explain (its cause's look waits) holds up no
// other communicator's poll, is not polled again meanwhile, and Unwatch
// waits for its handling to end.
void TestWatchdogSlowHandlingHoldsUpNoOtherPoll() {
  coll::NcclWatchdog watchdog(0.005);
  std::atomic<int> slow_polls{0}, other_polls{0}, other_polls_during{0};
  std::atomic<bool> handling{false}, handled{false};
  int slow_key = 0, other_key = 0;
  watchdog.Watch(&slow_key, [&]() -> std::function<void()> {
    if (slow_polls++ > 0) return {};
    return [&] {
      handling = true;
      const int before = other_polls.load();
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      other_polls_during = other_polls.load() - before;
      handling = false;
      handled = true;
    };
  });
  watchdog.Watch(&other_key, [&]() -> std::function<void()> {
    ++other_polls;
    return {};
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!handling && !handled && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(handling || handled);
  const int slow_polls_at_start = slow_polls.load();
  watchdog.Unwatch(&slow_key);
  CHECK(handled);  // Unwatch returned only after the handling ended
  CHECK(slow_polls_at_start == 1);
  CHECK(slow_polls.load() == 1);  // not polled while handled, nor after Unwatch
  // 800 ms at a poll every 5 ms: 160 rounds where nothing waits; a loaded
  // machine gives fewer, and the poll that handled the error inline gave 0.
  CHECK(other_polls_during.load() >= 10);
  watchdog.Unwatch(&other_key);
  watchdog.Stop();
  CHECK(!watchdog.running());
}

// (e) The watchdog's thread stops at the job's end and starts again with
// the next communicator; the process's own stops at ShutdownJob.
void TestWatchdogStopsAtShutdown() {
  FakeLibnccl nccl = LoadFakeLibnccl();
  if (nccl.fail_after == nullptr) return;
  coll::NcclWatchdog watchdog(kTestPollS);
  coll::InProcessKeyValues values;
  auto first = coll::NcclCommunicator::Create(nccl.api, 0, 1, StoreOf(values), "nccl/d/0", 1.0, {},
                                              {&watchdog, {}, ""});
  CHECK(first.ok() && watchdog.running());
  if (!first.ok()) return;
  const ncclComm_t handle = nccl.last_comm();
  auto polls_reach = [&](ncclComm_t c, int n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (nccl.polls(c) < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return nccl.polls(c) >= n;
  };
  CHECK(polls_reach(handle, 3));
  watchdog.Stop();
  CHECK(!watchdog.running());
  const int stopped_at = nccl.polls(handle);
  std::this_thread::sleep_for(std::chrono::duration<double>(10 * kTestPollS));
  CHECK(nccl.polls(handle) == stopped_at);  // no thread polls any more
  auto second = coll::NcclCommunicator::Create(nccl.api, 0, 1, StoreOf(values), "nccl/d/1", 1.0, {},
                                               {&watchdog, {}, ""});
  CHECK(second.ok() && watchdog.running());
  CHECK(polls_reach(handle, stopped_at + 2));  // the first is watched again too

  // The process's watchdog: the job's end joins its thread.
  coll::NcclWatchdog& process_watchdog = coll::ProcessRuntime::Get().nccl_watchdog();
  auto process_comm = coll::NcclCommunicator::Create(nccl.api, 0, 1, StoreOf(values), "nccl/d/2", 1.0, {},
                                                     {&process_watchdog, {}, ""});
  CHECK(process_comm.ok() && process_watchdog.running());
  const ncclComm_t process_handle = nccl.last_comm();
  CHECK(polls_reach(process_handle, 2));
  CHECK(coll::ProcessRuntime::Get().ShutdownJob(1.0).ok());  // no job joined: only the watchdog to end
  CHECK(!process_watchdog.running());
  const int ended_at = nccl.polls(process_handle);
  std::this_thread::sleep_for(std::chrono::duration<double>(3 * process_watchdog.poll_s()));
  CHECK(nccl.polls(process_handle) == ended_at);
}

// (f) An abort (a failure notice's, on another thread) that comes while a
// call is past its guard but has not reached NCCL (a fault delay holds it
// there) waits for the call to leave before ncclCommAbort frees NCCL's
// communicator: the stand-in counts a call enqueued on an ended one. Both
// a single call and a group (whose calls come one after another). The next
// call hears of the abort.
void TestAbortWaitsForTheCallUnderWay() {
  FakeLibnccl nccl = LoadFakeLibnccl();
  if (nccl.fail_after == nullptr) return;
  coll::InProcessKeyValues values;
  const int after_end = nccl.used_after_end();
  for (bool group : {false, true}) {
    auto made = coll::NcclCommunicator::Create(nccl.api, 0, 1, StoreOf(values),
                                               std::string("nccl/e/") + (group ? "group" : "call"), 1.0);
    CHECK(made.ok());
    if (!made.ok()) return;
    std::unique_ptr<coll::NcclCommunicator> comm = made.take();
    const int aborts = nccl.aborts();
    myplugin::SetFaultDelay(myplugin::FaultPoint::kNcclEnqueue, 0.2);
    myplugin::Status enqueued;
    std::thread device([&] {
      enqueued = group ? comm->Group([&] {
        MYPLUGIN_RETURN_IF_ERROR(AllReduceOn(*comm));
        return AllReduceOn(*comm);
      })
                       : AllReduceOn(*comm);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the call is inside its delay
    comm->Abort(myplugin::Status(myplugin::Code::kAborted, "process 1 failed"));
    device.join();
    myplugin::SetFaultDelay(myplugin::FaultPoint::kNcclEnqueue, 0);
    CHECK(nccl.aborts() == aborts + 1);
    CHECK(nccl.used_after_end() == after_end);
    // A group's second call, after the abort began, stops at its guard.
    CHECK(group ? enqueued.message().find("process 1 failed") != std::string::npos : enqueued.ok());
    myplugin::Status next = AllReduceOn(*comm);
    CHECK(next.code() == myplugin::Code::kAborted && next.message().find("process 1 failed") != std::string::npos);
  }
}

// A mismatch that one process published (NcclDeviceGroups::ReportMismatch,
// as RunNccl does when the agreement finds one) explains another process's
// NCCL error: two coordination clients of one real service, each with its
// own device groups on the job's store (ClientStore). Process 0's kernel
// fails 0.1 s after it was enqueued, process 1 publishes the mismatch 0.3 s
// later; process 0's watchdog names the mismatch, and process 1 hears of
// process 0's failure from the service, naming the call.
void TestMismatchFoundAcrossProcesses() {
  FakeLibnccl nccl = LoadFakeLibnccl();
  if (nccl.fail_after == nullptr) return;
  using myplugin::coordination::CoordinationClient;
  using myplugin::coordination::CoordinationService;
  myplugin::coordination::ServiceOptions options;
  options.num_processes = 2;
  options.token = "nccl-mismatch";
  options.heartbeat_timeout_s = 60;
  auto service = CoordinationService::Start("127.0.0.1", 0, options);
  CHECK(service.ok());
  if (!service.ok()) return;
  std::shared_ptr<CoordinationClient> client[2];
  std::thread joins[2];
  for (int i = 0; i < 2; ++i) {
    joins[i] = std::thread([&, i] {
      auto c = CoordinationClient::Connect(
          unit::LocalClientOptions(service.value()->port(), "nccl-mismatch", i, 2, 20));
      if (c.ok() && c.value()->Register("").ok()) client[i] = std::shared_ptr<CoordinationClient>(c.take().release());
    });
  }
  for (auto& t : joins) t.join();
  CHECK(client[0] && client[1]);
  if (!client[0] || !client[1]) return;
  {
    coll::NcclWatchdog watchdog(kTestPollS);
    coll::NcclDeviceGroups process0(nccl.api, coll::ClientStore(client[0]), 5.0, /*notice_wait_s=*/3.0, &watchdog);
    coll::NcclDeviceGroups process1(nccl.api, coll::ClientStore(client[1]), 5.0, /*notice_wait_s=*/3.0, &watchdog);
    auto comm = process0.ForDevice({0}, 0);
    CHECK(comm.ok());
    if (!comm.ok()) return;
    const ncclComm_t handle = nccl.last_comm();
    CHECK(AllReduceOn(*comm.value()).ok());
    nccl.fail_in(100, ncclRemoteError);
    const std::string mismatch =
        "all-reduce sum f32[8] (call #2) on processes [0, 1]: process 1 issued all-gather f32[8] (call #2)";
    std::thread deviant([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      process1.ReportMismatch(myplugin::Status(myplugin::Code::kFailedPrecondition, mismatch)
                                  .WithFailure({myplugin::FailureKind::kMismatch, {1}, "", -1}));
    });
    const int ended = nccl.wait_kernel(handle, kKernelWaitS);
    deviant.join();
    nccl.fail_in(-1, ncclSuccess);
    CHECK(ended == 1);
    myplugin::Status st = AllReduceOn(*comm.value());
    CHECK(st.code() == myplugin::Code::kFailedPrecondition);
    CHECK(st.message().rfind(mismatch + " (the NCCL watchdog: ncclAllReduce of 8 f32", 0) == 0);
    CHECK(st.failure() != nullptr && st.failure()->kind == myplugin::FailureKind::kMismatch);
    // Process 1 hears of process 0's failure, with the call and the cause.
    std::optional<myplugin::Status> heard;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!(heard = client[1]->failure()) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(heard.has_value());
    if (heard) {
      CHECK(Has(*heard, "process 0"));
      CHECK(Has(*heard, "aborted the NCCL communicator of device 0 (rank 0) in device group [0]: " + mismatch));
      CHECK(Has(*heard, "ncclAllReduce of 8 f32"));
    }
  }
  service.value()->Stop();
}

// NCCL's answer to two ranks on one GPU with one host identity: the error
// says what it usually means, which rank and device, and what to set.
ncclResult_t FakeInitDuplicate(ncclComm_t*, int, ncclUniqueId, int) { return ncclInvalidUsage; }
ncclResult_t FakeInitSystemError(ncclComm_t*, int, ncclUniqueId, int) { return ncclSystemError; }

void TestDuplicateGpu() {
  coll::NcclApi api = FakeApi();
  api.CommInitRank = FakeInitDuplicate;
  kv.clear();
  // Device 3 is rank 0 of this group: it makes the id, so nothing waits.
  coll::NcclDeviceGroups device_groups(api, Store(), 1.0);
  auto dup = device_groups.ForDevice({3, 1, 2, 0}, 3);
  CHECK(!dup.ok() && dup.status().code() == myplugin::Code::kInvalidArgument);
  CHECK(!dup.ok() && Has(dup.status(), "the NCCL communicator of device 3 (rank 0) in device group [3, 1, 2, 0]: "
                                       "ncclCommInitRank failed: other (NCCL error 5) for rank 0 of 4: this usually "
                                       "means that several ranks of the communicator are on the same GPU with the "
                                       "same host identity"));
  CHECK(!dup.ok() && Has(dup.status(), "needs its own NCCL_HOSTID (myplugin-run --share-gpu sets one per process)"));
  CHECK(!dup.ok() && Has(dup.status(), "this process has no NCCL_HOSTID"));
  // The settings' NCCL_HOSTID (common/settings.h), which the process's api carries.
  api.host_id = "job-7-rank-3";
  coll::NcclDeviceGroups with_host_id(api, Store(), 1.0);
  auto with_id = with_host_id.ForDevice({3, 1, 2, 0}, 3);
  CHECK(!with_id.ok() && Has(with_id.status(), "this process has NCCL_HOSTID=job-7-rank-3"));
  // Other failures of the init say only what NCCL said.
  api.CommInitRank = FakeInitSystemError;
  coll::NcclDeviceGroups other(api, Store(), 1.0);
  auto sys = other.ForDevice({3, 1, 2, 0}, 3);
  CHECK(!sys.ok() && Has(sys.status(), "ncclCommInitRank failed: unhandled system error"));
  CHECK(!sys.ok() && !Has(sys.status(), "NCCL_HOSTID"));
}

// The handlers' call path: two devices of one process, each on its own
// thread as XLA runs them, meet, make one NCCL rank each (the unique id
// through the store), and enqueue on their own communicator.
std::mutex init_mu;
std::vector<int> init_ranks;
ncclResult_t FakeCommInitRankLocked(ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  std::lock_guard<std::mutex> lock(init_mu);
  init_ranks.push_back(rank * 10 + nranks);
  *comm = reinterpret_cast<ncclComm_t>(static_cast<intptr_t>(0x100 + rank));
  return ncclSuccess;
}
ncclResult_t FakeGetUniqueIdQuiet(ncclUniqueId* id) {
  std::memset(id->internal, 5, NCCL_UNIQUE_ID_BYTES);
  return ncclSuccess;
}
ncclResult_t FakeAbortQuiet(ncclComm_t) {
  std::lock_guard<std::mutex> lock(init_mu);
  init_ranks.push_back(-1);
  return ncclSuccess;
}

void TestFfiCallPath() {
  coll::NcclApi api = FakeApi();
  api.CommInitRank = FakeCommInitRankLocked;
  api.GetUniqueId = FakeGetUniqueIdQuiet;
  api.CommAbort = FakeAbortQuiet;
  coll::NcclDeviceGroups device_groups(api, coll::InProcessStore(), 5.0);
  std::vector<int> ranks(2, -1);
  std::vector<myplugin::Status> results(2);
  std::vector<std::thread> devices;
  for (int ordinal = 0; ordinal < 2; ++ordinal) {
    devices.emplace_back([&, ordinal] {
      coll::NcclCallSite call{ordinal, {0, 1}, coll::CollectiveOp::kAllReduce, coll::Reduction::kSum,
                              coll::DataType::kF32, 8, 0};
      results[ordinal] = coll::RunNccl(call, [&](coll::NcclCommunicator& comm) {
        ranks[ordinal] = comm.rank();
        return myplugin::OkStatus();
      }, &device_groups);
    });
  }
  for (auto& t : devices) t.join();
  CHECK(results[0].ok() && results[1].ok());
  CHECK(ranks[0] == 0 && ranks[1] == 1);
  std::sort(init_ranks.begin(), init_ranks.end());
  CHECK((init_ranks == std::vector<int>{2, 12}));  // ranks 0 and 1 of 2
  // The second call reuses the communicators.
  init_ranks.clear();
  std::thread again([&] {
    coll::NcclCallSite call{0, {0}, coll::CollectiveOp::kAllGather, coll::Reduction::kNone, coll::DataType::kS32, 4,
                            0};
    results[0] = coll::RunNccl(call, [](coll::NcclCommunicator&) { return myplugin::OkStatus(); }, &device_groups);
  });
  again.join();
  CHECK(results[0].ok() && init_ranks == std::vector<int>{1});  // a new device group {0}: rank 0 of 1
  // A group wholly within this process: one device's call goes straight to
  // NCCL, meeting no other device's thread on the host (before, it waited
  // for the other device at a local rendezvous, to fail at its deadline).
  {
    coll::NcclDeviceGroups alone(FakeApi(), coll::InProcessStore(), 5.0);
    coll::NcclCallSite call{0, {0, 1}, coll::CollectiveOp::kAllReduce, coll::Reduction::kSum, coll::DataType::kF32,
                            8, 0};
    bool enqueued = false;
    CHECK(coll::RunNccl(call, [&](coll::NcclCommunicator&) {
      enqueued = true;
      return myplugin::OkStatus();
    }, &alone).ok());
    CHECK(enqueued);
  }
  // A device outside its device group is an error, not a hang.
  coll::NcclCallSite stray{1, {0}, coll::CollectiveOp::kAllReduce, coll::Reduction::kSum, coll::DataType::kF32, 1, 0};
  CHECK(!coll::RunNccl(stray, [](coll::NcclCommunicator&) { return myplugin::OkStatus(); }, &device_groups).ok());
  // A reported failure aborts every communicator made.
  init_ranks.clear();
  device_groups.AbortAll(myplugin::Status(myplugin::Code::kAborted, "process 1 failed"));
  CHECK(init_ranks.size() == 3);
}

// Four processes on one GPU, as `myplugin-run -n 4 --share-gpu` starts
// them: each has one local device, CUDA ordinal 0, and the client names it
// global device 0..3; they join one coordination service and run the
// handlers' call path (RunNccl: the local meeting, the signature agreed
// across processes, the communicator of the device's device group) on a
// fake NCCL that logs what it is asked. The parent checks each process's
// log against what NCCL must see: rank = global id, one unique id per
// device group (made by its rank 0's process), counts, types, reductions.
constexpr int kShareProcesses = 4;
// Within the 120 s that tests/test_cpp_units.py gives the whole binary,
// even when a child waits out its own timeouts (a failing run).
constexpr double kShareDeadlineS = 90;
constexpr double kShareTimeoutS = 20;

std::vector<std::string> share_log;
int share_process = -1;
int share_ids_made = 0;

std::string CommName(ncclComm_t comm) {
  const auto v = reinterpret_cast<intptr_t>(comm);
  return std::to_string(v & 0xff) + "/" + std::to_string(v >> 8);
}
ncclResult_t ShareGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, NCCL_UNIQUE_ID_BYTES);
  const std::string made = "p" + std::to_string(share_process) + "#" + std::to_string(share_ids_made++);
  std::memcpy(id->internal, made.data(), made.size());
  share_log.push_back("GetUniqueId " + made);
  return ncclSuccess;
}
ncclResult_t ShareInit(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  *comm = reinterpret_cast<ncclComm_t>(static_cast<intptr_t>(nranks << 8 | rank));
  share_log.push_back("CommInitRank " + CommName(*comm) + " id=" + std::string(id.internal));
  return ncclSuccess;
}
std::string Operands(size_t count, ncclDataType_t t) {
  return " count=" + std::to_string(count) + " type=" + std::to_string(static_cast<int>(t));
}
ncclResult_t ShareAllReduce(const void*, void*, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                            cudaStream_t) {
  share_log.push_back("AllReduce " + CommName(c) + Operands(count, t) + " op=" + std::to_string(op));
  return ncclSuccess;
}
ncclResult_t ShareReduceScatter(const void*, void*, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                cudaStream_t) {
  share_log.push_back("ReduceScatter " + CommName(c) + Operands(count, t) + " op=" + std::to_string(op));
  return ncclSuccess;
}
ncclResult_t ShareAllGather(const void*, void*, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t) {
  share_log.push_back("AllGather " + CommName(c) + Operands(count, t));
  return ncclSuccess;
}
ncclResult_t ShareSend(const void*, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t) {
  share_log.push_back("Send " + CommName(c) + " peer=" + std::to_string(peer) + Operands(count, t));
  return ncclSuccess;
}
ncclResult_t ShareRecv(void*, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t) {
  share_log.push_back("Recv " + CommName(c) + " peer=" + std::to_string(peer) + Operands(count, t));
  return ncclSuccess;
}
ncclResult_t ShareGroupStart() { share_log.push_back("GroupStart"); return ncclSuccess; }
ncclResult_t ShareGroupEnd() { share_log.push_back("GroupEnd"); return ncclSuccess; }

// What process p's NCCL must be asked, in order (the calls of ShareChild).
std::vector<std::string> ExpectedShareLog(int p) {
  auto t = [](ncclDataType_t x) { return std::to_string(static_cast<int>(x)); };
  auto o = [](ncclRedOp_t x) { return std::to_string(static_cast<int>(x)); };
  const std::string all = std::to_string(p) + "/4", half = std::to_string(p / 2) + "/2";
  std::vector<std::string> want;
  if (p == 0) want.push_back("GetUniqueId p0#0");  // device 0 is rank 0 of [0, 1, 2, 3]
  want.push_back("CommInitRank " + all + " id=p0#0");
  want.push_back("AllReduce " + all + " count=8 type=" + t(ncclFloat32) + " op=" + o(ncclSum));
  want.push_back("ReduceScatter " + all + " count=2 type=" + t(ncclBfloat16) + " op=" + o(ncclMax));
  want.push_back("AllGather " + all + " count=12 type=" + t(ncclUint8));
  // [0, 2] and [1, 3]: rank 0 of each (devices 0 and 1) makes its id.
  const std::string pair_id = p % 2 == 0 ? "p0#1" : "p1#0";
  if (p < 2) want.push_back("GetUniqueId " + pair_id);
  want.push_back("CommInitRank " + half + " id=" + pair_id);
  want.push_back("AllReduce " + half + " count=10 type=" + t(ncclFloat32) + " op=" + o(ncclSum));
  want.push_back("GroupStart");
  want.push_back("Send " + all + " peer=" + std::to_string((p + 1) % 4) + " count=16 type=" + t(ncclUint8));
  want.push_back("Recv " + all + " peer=" + std::to_string((p + 3) % 4) + " count=16 type=" + t(ncclUint8));
  want.push_back("GroupEnd");
  return want;
}

}  // namespace

// One of the four processes (tests/cpp/main.cc starts it with
// --nccl-share-child): prints its fake NCCL's log, one line per call, and
// "failed: ..." for a call that failed.
int RunNcclShareChild(int process, int port) {
  using myplugin::collectives::ProcessRuntime;
  share_process = process;
  ProcessRuntime& runtime = ProcessRuntime::Get();
  myplugin::Settings settings = *runtime.settings();
  settings.collective_timeout_s = kShareTimeoutS;
  runtime.UseSettings(settings);
  myplugin::coordination::RuntimeOptions options;
  options.coordinator_addresses = {"127.0.0.1:" + std::to_string(port)};
  options.num_processes = kShareProcesses;
  options.process_id = process;
  options.token = "share-one-gpu";
  options.initialization_timeout_s = kShareTimeoutS;
  options.fate_sharing = false;
  options.advertise_address = "127.0.0.1";
  options.local.hostname = "one-host";
  options.local.num_devices = 1;
  options.local.device_kind = "fake GPU";
  options.local.pid = static_cast<int>(::getpid());
  myplugin::Status joined = runtime.distributed().Initialize(options);
  if (!joined.ok()) {
    std::printf("failed: %s\n", joined.message().c_str());
    return 1;
  }
  // What the client does with the engine's one device (local hardware id 0).
  coll::SetLocalDeviceIds({{0, process}});

  coll::NcclApi api = FakeApi();
  api.GetUniqueId = ShareGetUniqueId;
  api.CommInitRank = ShareInit;
  api.AllReduce = ShareAllReduce;
  api.ReduceScatter = ShareReduceScatter;
  api.AllGather = ShareAllGather;
  api.Send = ShareSend;
  api.Recv = ShareRecv;
  api.GroupStart = ShareGroupStart;
  api.GroupEnd = ShareGroupEnd;
  std::unique_ptr<coll::NcclDeviceGroups> device_groups = coll::DeviceGroupsForJob(api);
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x77);
  void* const send = reinterpret_cast<void*>(0x10000);
  void* const recv = reinterpret_cast<void*>(0x20000);
  const std::vector<int> all = {0, 1, 2, 3};
  const std::vector<int> pair = process % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
  using coll::CollectiveOp;
  using coll::DataType;
  using coll::Reduction;
  auto call = [&](const std::vector<int>& group, CollectiveOp op, Reduction r, DataType t, size_t count,
                  const std::function<myplugin::Status(coll::NcclCommunicator&)>& enqueue) {
    coll::NcclCallSite site{0, group, op, r, t, count, 0};  // ordinal 0 in every process
    myplugin::Status st = coll::RunNccl(site, enqueue, device_groups.get());
    if (!st.ok()) share_log.push_back("failed: " + st.message());
  };
  const int me = process;  // its rank in [0, 1, 2, 3]
  call(all, CollectiveOp::kAllReduce, Reduction::kSum, DataType::kF32, 8, [&](coll::NcclCommunicator& c) {
    return c.AllReduce(send, recv, 8, DataType::kF32, Reduction::kSum, stream);
  });
  call(all, CollectiveOp::kReduceScatter, Reduction::kMax, DataType::kBF16, 8, [&](coll::NcclCommunicator& c) {
    return c.ReduceScatter(send, recv, 8 / c.size(), DataType::kBF16, Reduction::kMax, stream);
  });
  call(all, CollectiveOp::kAllGather, Reduction::kNone, DataType::kS32, 3, [&](coll::NcclCommunicator& c) {
    return c.AllGather(send, recv, 3, DataType::kS32, stream);
  });
  call(pair, CollectiveOp::kAllReduce, Reduction::kSum, DataType::kC64, 5, [&](coll::NcclCommunicator& c) {
    return c.AllReduce(send, recv, 5, DataType::kC64, Reduction::kSum, stream);
  });
  call(all, CollectiveOp::kCollectivePermute, Reduction::kNone, DataType::kF32, 4, [&](coll::NcclCommunicator& c) {
    return c.CollectivePermute(send, recv, 4, DataType::kF32, (me + 1) % 4, (me + 3) % 4, stream);
  });
  for (const std::string& line : share_log) std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  myplugin::Status left = runtime.ShutdownJob(kShareTimeoutS);
  if (!left.ok()) std::printf("failed: shutdown: %s\n", left.message().c_str());
  // The failure callback holds the device groups: they stay until exit.
  (void)device_groups.release();
  return 0;
}

namespace {

// Reads every child's stdout to its end, within the deadline; kills them
// all (and says so) past it.
void TestShareOneGpu() {
  myplugin::coordination::ServiceOptions options;
  options.num_processes = kShareProcesses;
  options.token = "share-one-gpu";
  options.heartbeat_timeout_s = 60;
  options.initialization_timeout_s = kShareTimeoutS;
  auto service = myplugin::coordination::CoordinationService::Start("127.0.0.1", 0, options);
  CHECK(service.ok());
  if (!service.ok()) return;
  const std::string port = std::to_string(service.value()->port());
  std::vector<std::vector<std::string>> args;
  for (int p = 0; p < kShareProcesses; ++p) args.push_back({"--nccl-share-child", std::to_string(p), port});
  const std::vector<unit::ChildResult> children = unit::RunChildren(args, kShareDeadlineS);
  for (int p = 0; p < kShareProcesses; ++p) {
    const unit::ChildResult& child = children[p];
    CHECK(!child.killed);  // else past the deadline
    CHECK(WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0);
    const bool right = unit::Lines(child.output) == ExpectedShareLog(p);
    CHECK(right);
    if (!right) std::fprintf(stderr, "process %d of the shared GPU logged:\n%s", p, child.output.c_str());
  }
  service.value()->Stop();
}

}  // namespace

bool RunNcclTests() {
  TestBootstrap();
  TestMapping();
  TestCalls();
  TestLoadErrors();
  TestVersionCheck();
  TestPermuteWithoutSourceGivesZeros();
  TestDeviceIdTable();
  TestNcclErrorNamesTheMismatch();
  TestNcclErrorNamesTheFailedPeer();
  TestNcclErrorStatesTheTimeWaited();
  TestWatchdogEndsTheKernelInFlight();
  TestWatchdogNoFalseAlarm();
  TestWatchdogNeverPollsAnEndedCommunicator();
  TestWatchdogSlowHandlingHoldsUpNoOtherPoll();
  TestWatchdogStopsAtShutdown();
  TestAbortWaitsForTheCallUnderWay();
  TestMismatchFoundAcrossProcesses();
  TestDuplicateGpu();
  TestFfiCallPath();
  TestShareOneGpu();
  return true;
}

#endif
