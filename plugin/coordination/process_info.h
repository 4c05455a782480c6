// What each process publishes about itself when it registers: enough for
// every process to build the same global device list. Encoded with the
// wire codec, so a malformed record is an error, not a crash.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordination/wire.h"

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

// Every process's topology in one message (the registration reply, a
// membership) is what every process receives, so its size times the job's
// is what the service sends: it must take few bytes a process. The service
// holds each topology as the bytes its process registered (nearly always an
// EncodeProcessInfo); a table writes those field by field against the entry
// before it: a flags byte naming the fields that changed, the pid as a
// signed varint difference, and each changed string as the lengths of what
// it keeps of the previous one's start and end plus the bytes between. The
// processes of one host, consecutive in a job, then cost a few bytes each.
// Anything else is carried as it is. Every table has one encoding, and
// the decoder refuses any other, and more than kMaxFrameBytes of topologies.
class TopologyEncoder {
 public:
  explicit TopologyEncoder(Writer& w) : w_(w) {}
  void Put(const std::string& topology);

 private:
  Writer& w_;
  ProcessInfo previous_;
};

class TopologyDecoder {
 public:
  explicit TopologyDecoder(Reader& r) : r_(r) {}
  Status Get(std::string* topology);

 private:
  Reader& r_;
  ProcessInfo previous_;
  size_t total_bytes_ = 0;
};

}  // namespace myplugin::coordination
