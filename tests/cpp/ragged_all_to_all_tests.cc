// The ragged all-to-all: its plan (collectives/ragged_plan.h) against
// hand-worked cases and every error it names; and, where the NCCL backend
// is built, four devices running the whole call (RunRaggedAllToAll: the
// offsets copied to the host, the plan, one NCCL group each) over a
// stand-in NCCL that moves the bytes between the devices' threads, every
// byte of every result checked against jax's documented semantics of
// lax.ragged_all_to_all, computed here independently from the senders'
// arrays.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "collectives/ragged_plan.h"

namespace coll = myplugin::collectives;

namespace {

bool Has(const myplugin::Status& st, const std::string& text) {
  return st.message().find(text) != std::string::npos;
}

// jax's docstring example: an axis of 2, one slice per peer, rows of one element.
void TestDocstringExample() {
  // Axis index 0: operand [1, 2, 2], input_offsets [0, 1], send_sizes [1, 2],
  // output_offsets [0, 0], recv_sizes [1, 1]. Axis index 1: input_offsets
  // [0, 1], send_sizes [1, 1], output_offsets [1, 2], recv_sizes [2, 1].
  // Device 0 receives its own slice 0 (at 0, 1 row) and device 1's slice 0
  // (at 1, 1 row): the pairs are (0, 1) and (1, 1).
  coll::RaggedArrays zero{{0, 1}, {1, 2}, {0, 1, 1, 1}, {1, 1}};
  auto plan = coll::PlanRaggedAllToAll(zero, 0, 2, 3, 4, 1);
  CHECK(plan.ok());
  CHECK((plan.value().sends == std::vector<coll::RaggedTransfer>{{0, 0, 1}, {1, 1, 2}}));
  CHECK((plan.value().recvs == std::vector<coll::RaggedTransfer>{{0, 0, 1}, {1, 1, 1}}));
  // Device 1 receives device 0's slice 1 (at 0, 2 rows) and its own slice 1 (at 2, 1 row).
  coll::RaggedArrays one{{0, 1}, {1, 1}, {0, 2, 2, 1}, {2, 1}};
  plan = coll::PlanRaggedAllToAll(one, 1, 2, 3, 4, 1);
  CHECK(plan.ok());
  CHECK((plan.value().sends == std::vector<coll::RaggedTransfer>{{0, 0, 1}, {1, 1, 1}}));
  CHECK((plan.value().recvs == std::vector<coll::RaggedTransfer>{{0, 0, 2}, {1, 2, 1}}));
}

void TestSlicesPerPeerRowsAndEmptySlices() {
  // Two slices per peer over 2 devices (K = 4): slices 0 and 1 go to rank 0,
  // 2 and 3 to rank 1; rows of 3 elements; an empty slice moves nothing on
  // either side.
  coll::RaggedArrays a{{0, 2, 2, 5}, {2, 0, 3, 1}, {0, 2, 4, 0, 2, 3, 6, 1}, {2, 0, 3, 1}};
  auto plan = coll::PlanRaggedAllToAll(a, 0, 2, 6, 8, 3);
  CHECK(plan.ok());
  CHECK((plan.value().sends == std::vector<coll::RaggedTransfer>{{0, 0, 6}, {1, 6, 9}, {1, 15, 3}}));
  CHECK((plan.value().recvs == std::vector<coll::RaggedTransfer>{{0, 0, 6}, {1, 6, 9}, {1, 18, 3}}));
}

void TestErrorsNameTheSlice() {
  auto plan = [](coll::RaggedArrays a, int64_t in_rows = 4, int64_t out_rows = 4) {
    return coll::PlanRaggedAllToAll(a, 0, 2, in_rows, out_rows, 1).status();
  };
  const coll::RaggedArrays good{{0, 2}, {2, 2}, {0, 2, 2, 2}, {2, 2}};
  CHECK(plan(good).ok());
  auto bad = good;
  bad.input_offsets[1] = 3;  // rows [3, 5) of 4
  CHECK(Has(plan(bad), "slice 1 sent to rank 1 (input_offsets, send_sizes) is rows [3, 5) of an array of 4 rows"));
  bad = good;
  bad.send_sizes[0] = -1;
  CHECK(Has(plan(bad), "slice 0 sent to rank 0 (input_offsets, send_sizes) has offset 0 and size -1"));
  bad = good;
  bad.recv_sizes[1] = 1;  // the sender says 2
  CHECK(Has(plan(bad), "rank 1 sends 2 rows in slice 1 to rank 0, whose recv_sizes says 1"));
  bad = good;
  bad.sender_pairs[2] = 3;  // rank 1 writes rows [3, 5) of this device's 4
  CHECK(Has(plan(bad), "slice 1 received from rank 1 (its output_offsets, recv_sizes) is rows [3, 5)"));
  bad = good;
  bad.sender_pairs[2] = 1;  // rows [1, 3) over rank 0's [0, 2)
  CHECK(Has(plan(bad), "slices 0 and 1 received by rank 0 both write output rows [1, 2)"));
  bad = good;
  bad.recv_sizes.pop_back();
  CHECK(Has(plan(bad), "input_offsets has 2 entries, send_sizes 2, recv_sizes 1"));
  coll::RaggedArrays odd{{0, 1, 2}, {1, 1, 1}, {0, 1, 1, 1, 2, 1}, {1, 1, 1}};
  CHECK(Has(plan(odd), "3 offsets and sizes over 2 devices"));
  // The largest offsets never overflow the bounds check.
  bad = good;
  bad.input_offsets[0] = INT64_MAX;
  CHECK(Has(plan(bad), "is rows ["));
  CHECK(!coll::PlanRaggedAllToAll(good, 2, 2, 4, 4, 1).ok());  // a rank outside the group
}

}  // namespace

#ifndef MYPLUGIN_HAVE_NCCL
void RunRaggedAllToAllTests() {
  TestDocstringExample();
  TestSlicesPerPeerRowsAndEmptySlices();
  TestErrorsNameTheSlice();
}
#else

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "collectives/dtype.h"
#include "collectives/nccl_communicator.h"
#include "collectives/nccl_ffi_handlers.h"

namespace {

// A stand-in NCCL whose ranks are threads of this process and whose
// "device memory" is host memory: a send copies its bytes into the queue
// from its rank to the peer as it is enqueued; a receive takes the oldest
// from the peer's queue (NCCL matches a pair's transfers in issue order),
// at the end of its group, as NCCL runs a group's transfers together.
struct Wire {
  std::mutex mu;
  std::condition_variable arrived;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> queues;  // (from, to)
  std::vector<std::string> errors;
};
Wire wire;

struct WireRank {
  int rank;
};
thread_local int group_depth = 0;
thread_local std::vector<std::function<void()>> pending;

// Every communicator made: held for the test's life (a deque keeps their
// addresses), so an abort and a destroy of one never free it twice.
std::mutex ranks_mu;
std::deque<WireRank> ranks;

ncclResult_t WireInit(ncclComm_t* comm, int, ncclUniqueId, int rank) {
  std::lock_guard<std::mutex> lock(ranks_mu);
  ranks.push_back(WireRank{rank});
  *comm = reinterpret_cast<ncclComm_t>(&ranks.back());
  return ncclSuccess;
}
ncclResult_t WireUniqueId(ncclUniqueId* id) {
  *id = ncclUniqueId{};
  return ncclSuccess;
}
int RankOf(ncclComm_t comm) { return reinterpret_cast<WireRank*>(comm)->rank; }
ncclResult_t WireSend(const void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  if (type != ncclUint8) return ncclInvalidArgument;
  std::vector<char> bytes(static_cast<const char*>(data), static_cast<const char*>(data) + count);
  {
    std::lock_guard<std::mutex> lock(wire.mu);
    wire.queues[{RankOf(comm), peer}].push_back(std::move(bytes));
  }
  wire.arrived.notify_all();
  return ncclSuccess;
}
ncclResult_t WireRecv(void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  if (type != ncclUint8) return ncclInvalidArgument;
  const int me = RankOf(comm);
  auto take = [=] {
    std::unique_lock<std::mutex> lock(wire.mu);
    auto& queue = wire.queues[{peer, me}];
    if (!wire.arrived.wait_for(lock, std::chrono::seconds(20), [&] { return !queue.empty(); })) {
      wire.errors.push_back("rank " + std::to_string(me) + " waited for a send from " + std::to_string(peer));
      return;
    }
    std::vector<char> bytes = std::move(queue.front());
    queue.pop_front();
    if (bytes.size() != count) {
      wire.errors.push_back("rank " + std::to_string(me) + " received " + std::to_string(bytes.size()) +
                            " bytes from " + std::to_string(peer) + " where it expected " + std::to_string(count));
      return;
    }
    std::memcpy(data, bytes.data(), count);
  };
  if (group_depth > 0) {
    pending.push_back(take);
  } else {
    take();
  }
  return ncclSuccess;
}
ncclResult_t WireGroupStart() {
  ++group_depth;
  return ncclSuccess;
}
ncclResult_t WireGroupEnd() {
  if (--group_depth == 0) {
    for (auto& take : pending) take();
    pending.clear();
  }
  return ncclSuccess;
}
ncclResult_t WireNoError(ncclComm_t, ncclResult_t* e) {
  *e = ncclSuccess;
  return ncclSuccess;
}
ncclResult_t WireDone(ncclComm_t) { return ncclSuccess; }
const char* WireErrorString(ncclResult_t) { return "stand-in NCCL error"; }
CUresult HostCopyToHost(void* dst, CUdeviceptr src, size_t bytes, CUstream) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}
CUresult HostCopy(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream) {
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}
CUresult NoWait(CUstream) { return CUDA_SUCCESS; }

coll::NcclApi WireApi() {
  coll::NcclApi api;
  api.GetUniqueId = WireUniqueId;
  api.CommInitRank = WireInit;
  api.CommDestroy = WireDone;
  api.CommAbort = WireDone;
  api.CommGetAsyncError = WireNoError;
  api.GetErrorString = WireErrorString;
  api.Send = WireSend;
  api.Recv = WireRecv;
  api.GroupStart = WireGroupStart;
  api.GroupEnd = WireGroupEnd;
  api.MemcpyDtoHAsync = HostCopyToHost;
  api.MemcpyDtoDAsync = HostCopy;
  api.StreamSynchronize = NoWait;
  return api;
}

// One device's arrays of a ragged all-to-all over `n` devices with `per_peer`
// slices each, rows of `row` floats: random sizes, the input packed with a
// gap, every receiver's slots laid out in an order other than slice order.
struct Device {
  std::vector<float> input, output;
  std::vector<int64_t> input_offsets, send_sizes, output_offsets, recv_sizes;
};

std::vector<Device> MakeDevices(int n, int per_peer, int row, uint32_t seed) {
  const int k = n * per_peer;
  uint32_t state = seed;
  auto next = [&](int below) {
    state = state * 1664525u + 1013904223u;
    return static_cast<int>((state >> 8) % static_cast<uint32_t>(below));
  };
  std::vector<Device> d(n);
  for (int s = 0; s < n; ++s) {
    d[s].input_offsets.resize(k);
    d[s].send_sizes.resize(k);
    d[s].output_offsets.resize(k);
    int64_t at = 1;  // row 0 is never sent
    for (int i = 0; i < k; ++i) {
      d[s].send_sizes[i] = next(4);  // 0..3 rows: some slices empty
      d[s].input_offsets[i] = at;
      at += d[s].send_sizes[i];
    }
    d[s].input.resize(static_cast<size_t>(at + 2) * row);
    for (size_t e = 0; e < d[s].input.size(); ++e) d[s].input[e] = static_cast<float>(1000 * (s + 1) + e);
  }
  for (int r = 0; r < n; ++r) {
    // Receiver r's slots: senders' slices k-major, senders in reverse.
    int64_t at = 0;
    d[r].recv_sizes.assign(k, 0);
    for (int j = 0; j < per_peer; ++j) {
      for (int s = n - 1; s >= 0; --s) {
        const int i = r * per_peer + j;  // sender s's slice to r
        d[s].output_offsets[i] = at;
        d[r].recv_sizes[s * per_peer + j] = d[s].send_sizes[i];
        at += d[s].send_sizes[i];
      }
    }
    d[r].output.assign(static_cast<size_t>(at + 3) * row, -1.0f);  // rows nobody writes keep -1
  }
  return d;
}

// jax's documented semantics, from the senders' arrays alone.
std::vector<float> Expected(const std::vector<Device>& d, int r, int per_peer, int row) {
  std::vector<float> result = d[r].output;
  for (size_t s = 0; s < d.size(); ++s) {
    for (int j = 0; j < per_peer; ++j) {
      const int i = r * per_peer + j;
      const size_t from = static_cast<size_t>(d[s].input_offsets[i]) * row;
      const size_t to = static_cast<size_t>(d[s].output_offsets[i]) * row;
      for (int64_t e = 0; e < d[s].send_sizes[i] * row; ++e) result[to + e] = d[s].input[from + e];
    }
  }
  return result;
}

template <typename Index>
std::vector<Index> As(const std::vector<int64_t>& v) {
  return std::vector<Index>(v.begin(), v.end());
}

// Four devices (threads, ordinals 0..3 = global ids 0..3) run the call as
// the rewritten program does: an all-to-all of each device's (output
// offset, send size) pairs, then the ragged all-to-all.
template <typename Index>
void RunFourDevices(int per_peer, int row, uint32_t seed, bool separate_result) {
  constexpr int n = 4;
  const int k = n * per_peer;
  std::vector<Device> d = MakeDevices(n, per_peer, row, seed);
  coll::NcclDeviceGroups groups(WireApi(), coll::InProcessStore(), 10.0);
  const std::vector<int> group = {0, 1, 2, 3};
  std::vector<std::vector<float>> results(n);
  std::vector<myplugin::Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<Index> offsets = As<Index>(d[r].input_offsets), sizes = As<Index>(d[r].send_sizes),
                         recv = As<Index>(d[r].recv_sizes), pairs(2 * k), got(2 * k);
      for (int i = 0; i < k; ++i) {
        pairs[2 * i] = static_cast<Index>(d[r].output_offsets[i]);
        pairs[2 * i + 1] = static_cast<Index>(d[r].send_sizes[i]);
      }
      const coll::DataType index = sizeof(Index) == 4 ? coll::DataType::kS32 : coll::DataType::kS64;
      coll::NcclCallSite exchange{r, group, coll::CollectiveOp::kAllToAll, coll::Reduction::kNone, index,
                                  static_cast<size_t>(2 * k), 0};
      status[r] = coll::RunNccl(exchange, [&](coll::NcclCommunicator& comm) {
        return comm.AllToAll(pairs.data(), got.data(), 2 * per_peer, index, nullptr);
      }, &groups);
      if (!status[r].ok()) return;
      results[r] = separate_result ? std::vector<float>(d[r].output.size(), 7.0f) : d[r].output;
      std::vector<float> output = d[r].output;
      coll::RaggedCall call{r, group, coll::DataType::kF32,
                            d[r].input.data(), static_cast<int64_t>(d[r].input.size() / row),
                            separate_result ? output.data() : results[r].data(), results[r].data(),
                            static_cast<int64_t>(d[r].output.size() / row), static_cast<size_t>(row),
                            offsets.data(), sizes.data(), got.data(), recv.data(), index, static_cast<size_t>(k)};
      status[r] = coll::RunRaggedAllToAll(call, nullptr, &groups);
    });
  }
  for (auto& t : threads) t.join();
  {
    std::lock_guard<std::mutex> lock(wire.mu);
    CHECK(wire.errors.empty());
    for (const auto& [pair, queue] : wire.queues) CHECK(queue.empty());
  }
  for (int r = 0; r < n; ++r) {
    CHECK(status[r].ok());
    CHECK(results[r] == Expected(d, r, per_peer, row));
  }
}

// A device whose recv_sizes disagree with what its peer sends fails before
// it enqueues anything, naming both; its peers' transfers to it stay queued
// (on a GPU the job's failure notice aborts their communicators).
void TestDisagreeingSizesFailBeforeEnqueuing() {
  std::vector<Device> d = MakeDevices(2, 1, 1, 7);
  d[0].recv_sizes[1] += 1;
  coll::NcclDeviceGroups groups(WireApi(), coll::InProcessStore(), 10.0);
  std::vector<int64_t> pairs = {d[0].output_offsets[0], d[0].send_sizes[0], d[1].output_offsets[0],
                                d[1].send_sizes[0]};
  coll::RaggedCall call{0, {0, 1}, coll::DataType::kF32, d[0].input.data(), static_cast<int64_t>(d[0].input.size()),
                        d[0].output.data(), d[0].output.data(), static_cast<int64_t>(d[0].output.size()), 1,
                        d[0].input_offsets.data(), d[0].send_sizes.data(), pairs.data(), d[0].recv_sizes.data(),
                        coll::DataType::kS64, 2};
  myplugin::Status st = coll::RunRaggedAllToAll(call, nullptr, &groups);
  CHECK(!st.ok() && Has(st, "rank 1 sends") && Has(st, "whose recv_sizes says"));
  call.index_type = coll::DataType::kF32;
  CHECK(Has(coll::RunRaggedAllToAll(call, nullptr, &groups), "they must be int32 or int64"));
  std::lock_guard<std::mutex> lock(wire.mu);
  for (const auto& [pair, queue] : wire.queues) CHECK(queue.empty());  // nothing was sent
}

}  // namespace

void RunRaggedAllToAllTests() {
  TestDocstringExample();
  TestSlicesPerPeerRowsAndEmptySlices();
  TestErrorsNameTheSlice();
  RunFourDevices<int32_t>(1, 3, 1, false);
  RunFourDevices<int32_t>(2, 5, 2, false);
  RunFourDevices<int64_t>(3, 1, 3, true);
  TestDisagreeingSizesFailBeforeEnqueuing();
}

#endif
