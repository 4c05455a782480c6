// What each process publishes about itself when it registers: enough for
// every process to build the same global device list. Encoded with the
// wire codec, so a malformed record is an error, not a crash.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace myplugin::coordination {

struct ProcessInfo {
  std::string hostname;
  int num_devices = 0;
  std::string device_kind;
  int pid = 0;  // the OS process id, for messages
  // Where peers reach this process for collectives (a numeric address, or
  // a host name the user gave).
  std::string address;
  // Equal for processes that can share memory (coordination/host_identity.h).
  std::string host_id;
};

std::string EncodeProcessInfo(const ProcessInfo& info);
StatusOr<ProcessInfo> DecodeProcessInfo(const std::string& bytes);

}  // namespace myplugin::coordination
