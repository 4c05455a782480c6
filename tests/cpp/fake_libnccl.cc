// A stand-in libnccl.so.2 for NcclApi::Load and the NCCL communicator's
// error path: every entry point the NCCL backend resolves. ncclGetVersion
// answers FAKE_NCCL_VERSION_CODE (set by CMake); the others succeed and
// move nothing, and ncclCommGetAsyncError reports the error that a test
// injects (myplugin_fake_nccl_fail_after). Built twice, as an NCCL older
// than the minimum and as one new enough.
#include <nccl.h>

#include <atomic>

namespace {

// Polls of ncclCommGetAsyncError left before it reports `g_async_error`
// (negative: never).
std::atomic<int> g_polls_left{-1};
std::atomic<ncclResult_t> g_async_error{ncclSuccess};
std::atomic<int> g_aborts{0};
int g_comm = 0;  // what ncclCommInitRank hands out: any address will do

}  // namespace

extern "C" {

// Test-only: from its `polls`-th call on (counting from 1), ncclCommGetAsyncError
// reports `error`, as NCCL does once a kernel in flight lost its peer.
// `polls` < 1 ends the injection.
void myplugin_fake_nccl_fail_after(int polls, ncclResult_t error) {
  g_async_error = error;
  g_polls_left = polls < 1 ? -1 : polls;
}
// Test-only: how many times ncclCommAbort was called.
int myplugin_fake_nccl_aborts() { return g_aborts; }

ncclResult_t ncclGetVersion(int* version) {
  *version = FAKE_NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  *id = ncclUniqueId{};
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int, ncclUniqueId, int) {
  *comm = reinterpret_cast<ncclComm_t>(&g_comm);
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommAbort(ncclComm_t) {
  ++g_aborts;
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* error) {
  int left = g_polls_left;
  if (left > 1) g_polls_left = left - 1;
  *error = left == 1 ? g_async_error.load() : ncclSuccess;
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t result) {
  return result == ncclRemoteError ? "remote process exited or there was a network error" : "fake NCCL error";
}
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclSuccess; }
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclSuccess; }
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

}  // extern "C"
