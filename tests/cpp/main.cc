// The C++ unit tests of the pieces that need no engine: run by
// tests/test_cpp_units.py through CMake (MYPLUGIN_BUILD_TESTS=ON).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.h"
#include "suites.h"

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--nccl-share-child") == 0) {
    return RunNcclShareChild(std::atoi(argv[2]), std::atoi(argv[3]));
  }
  if (argc == 5 && std::strcmp(argv[1], "--nccl-beside-child") == 0) {
    return RunNcclBesideChild(std::atoi(argv[2]), std::atoi(argv[3]), argv[4]);
  }
  RunClientOptionsTests();
  RunSettingsTests();
  RunEngineClientTests();
  RunEngineExtensionsTests();
  RunProcessRuntimeTests();
  RunBufferCaptureTests();
  RunBufferHoldsTests();
  RunGilAwareMutexTests();
  RunTransferEndpointTests();
  RunWireTests();
  RunProcessInfoTests();
  RunSocketTests();
  RunNetworkAddressTests();
  RunEngineLibraryTests();
  RunDtypeTests();
  RunSignatureTests();
  RunCallClockTests();
  RunAbortableGlooContextTests();
  RunCombinedOperandsTests();
  RunLocalRendezvousTests();
  RunAgreementGateTests();
  RunSigtermNoticeTests();
  RunDeviceAssignmentTests();
  RunStreamingCopyTests();
  RunFfiApiVersionTests();
  RunCollectiveTableTests();
  RunSerializedExecutableTests();
  RunMessagesTests();
  RunServiceStateTests();
  RunCoordinationStressTests();
  RunFlightRecorderTests();
  RunProfileSpansTests();
  RunGpuTargetTests();
  RunHugePagesTests();
  RunTcpLinksTests();
  bool nccl = RunNcclTests();
  RunRaggedAllToAllTests();
  RunNcclAgreementBesideTests();
  std::printf("NCCL backend tests: %s\n", nccl ? "ran" : "not built (no NCCL headers)");
  std::printf("%d passed, %d failed\n", unit::passes, unit::failures);
  return unit::failures == 0 ? 0 : 1;
}
