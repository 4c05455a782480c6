// A stand-in libnccl.so.2 for NcclApi::Load: every entry point the NCCL
// backend resolves, of which only ncclGetVersion answers (with
// FAKE_NCCL_VERSION_CODE, set by CMake); the rest fail if ever called.
// Built twice, as an NCCL older than the minimum and as one new enough.
#include <nccl.h>

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = FAKE_NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId*) { return ncclInternalError; }
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int) { return ncclInternalError; }
ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclInternalError; }
ncclResult_t ncclCommAbort(ncclComm_t) { return ncclInternalError; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*) { return ncclInternalError; }
const char* ncclGetErrorString(ncclResult_t) { return "fake NCCL"; }
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInternalError; }
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInternalError; }
ncclResult_t ncclGroupStart() { return ncclInternalError; }
ncclResult_t ncclGroupEnd() { return ncclInternalError; }

}  // extern "C"
