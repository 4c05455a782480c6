// The suites of the C++ unit tests, one per file (each named after what it
// tests); main.cc runs them all.
#pragma once

#include <string>

void RunClientOptionsTests();
void RunWireTests();
void RunProcessInfoTests();
void RunSocketTests();
void RunNetworkAddressTests();
void RunEngineLibraryTests();
void RunSerializedExecutableTests();
void RunMessagesTests();
void RunServiceStateTests();
void RunCoordinationStressTests();
void RunFlightRecorderTests();
void RunProfileSpansTests();
void RunGpuTargetTests();
void RunHugePagesTests();
void RunTcpLinksTests();
void RunDtypeTests();
void RunSignatureTests();
void RunCallClockTests();
void RunAbortableGlooContextTests();
void RunCombinedOperandsTests();
void RunLocalRendezvousTests();
void RunAgreementGateTests();
void RunSigtermNoticeTests();
void RunDeviceAssignmentTests();
void RunStreamingCopyTests();
void RunFfiApiVersionTests();
void RunCollectiveTableTests();
void RunSettingsTests();
void RunEngineClientTests();
void RunEngineExtensionsTests();
void RunProcessRuntimeTests();
void RunBufferCaptureTests();
void RunBufferHoldsTests();
void RunGilAwareMutexTests();
void RunTransferEndpointTests();
// The plan always; the whole call where the NCCL backend is built.
void RunRaggedAllToAllTests();
// False when the NCCL backend is not built.
bool RunNcclTests();
// One process of the NCCL tests' four on one GPU (main's --nccl-share-child).
int RunNcclShareChild(int process, int port);
// The agreement beside the launch across four processes (nothing where the
// NCCL backend is not built), and one of them (main's --nccl-beside-child).
void RunNcclAgreementBesideTests();
int RunNcclBesideChild(int process, int port, const std::string& scenario);
