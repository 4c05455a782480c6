// The NCCL backend's logic against a fake NCCL: bootstrap through the key-
// value store, type and reduction mapping, the calls each collective makes,
// abort, error reporting and the version check. No GPU, no libnccl.
#include "check.h"

#ifndef MYPLUGIN_HAVE_NCCL
bool RunNcclTests() { return false; }
#else

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "collectives/nccl_communicator.h"
#include "collectives/nccl_ffi_handlers.h"

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
  CHECK(comm->CollectivePermute(send, recv, 2, coll::DataType::kF32, 1, -1, stream).ok());
  CHECK((fake.calls == std::vector<std::string>{"GroupStart", "Send1", "GroupEnd"}));

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
  auto new_nccl = coll::NcclApi::Load(MYPLUGIN_FAKE_NCCL_NEW);
  CHECK(new_nccl.ok());
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
  ::unsetenv("NCCL_HOSTID");
  auto dup = device_groups.ForDevice({3, 1, 2, 0}, 3);
  CHECK(!dup.ok() && dup.status().code() == myplugin::Code::kInvalidArgument);
  CHECK(!dup.ok() && Has(dup.status(), "the NCCL communicator of device 3 (rank 0) in device group [3, 1, 2, 0]: "
                                       "ncclCommInitRank failed: other (NCCL error 5) for rank 0 of 4: this usually "
                                       "means that several ranks of the communicator are on the same GPU with the "
                                       "same host identity"));
  CHECK(!dup.ok() && Has(dup.status(), "needs its own NCCL_HOSTID (myplugin-run --share-gpu sets one per process)"));
  CHECK(!dup.ok() && Has(dup.status(), "this process has no NCCL_HOSTID"));
  ::setenv("NCCL_HOSTID", "job-7-rank-3", 1);
  auto with_id = device_groups.ForDevice({3, 1, 2, 0}, 3);  // a failed making is tried again
  ::unsetenv("NCCL_HOSTID");
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
  // A device outside its device group is an error, not a hang.
  coll::NcclCallSite stray{1, {0}, coll::CollectiveOp::kAllReduce, coll::Reduction::kSum, coll::DataType::kF32, 1, 0};
  CHECK(!coll::RunNccl(stray, [](coll::NcclCommunicator&) { return myplugin::OkStatus(); }, &device_groups).ok());
  // A reported failure aborts every communicator made.
  init_ranks.clear();
  device_groups.AbortAll(myplugin::Status(myplugin::Code::kAborted, "process 1 failed"));
  CHECK(init_ranks.size() == 3);
}

}  // namespace

bool RunNcclTests() {
  TestBootstrap();
  TestMapping();
  TestCalls();
  TestLoadErrors();
  TestVersionCheck();
  TestDuplicateGpu();
  TestFfiCallPath();
  return true;
}

#endif
