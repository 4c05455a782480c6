// Every coordination message as a typed struct, encoded and decoded here
// only: the client, the service, the tests and the fuzz targets all go
// through these, so the two sides cannot drift apart field by field.
//
// Decode(Reader&) reads the whole payload (header included) and fails on a
// wrong type, a truncated field or trailing bytes. Counts read from the wire
// never size an allocation up front: entries are appended one by one, each
// backed by bytes that are really there.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "coordination/wire.h"

namespace myplugin::coordination {

struct RegisteredProcess {
  uint64_t incarnation = 0;
  std::string topology;
};

// A live process of the job at some epoch: its coordination id (fixed for
// the life of the job), its incarnation (numbered by the service: id + 1 for
// the first process of that id, then N more for each restart in a job of N,
// so that no two are equal, as jax's random ones are not; consecutive ids'
// differ by one, and a table of thousands carries a byte each) and the
// topology it registered.
struct Member {
  uint32_t process_id = 0;
  uint64_t incarnation = 0;
  std::string topology;
};

namespace msg {

// The type of a payload, read without decoding the rest.
Status PeekType(const std::string& payload, MessageType* type, uint32_t* request_id);

template <typename M, MessageType T>
struct Message {
  static constexpr MessageType kType = T;
  uint32_t request_id = 0;

  // The frame, length prefix included.
  std::string Encode() const {
    Writer w(T, request_id);
    static_cast<const M*>(this)->Put(w);
    return w.Finish();
  }
  static StatusOr<M> Decode(Reader& r) {
    M m;
    MessageType type;
    MYPLUGIN_RETURN_IF_ERROR(r.Header(&type, &m.request_id));
    if (type != T) {
      return InvalidArgument(std::string("malformed coordination message: expected ") + MessageTypeName(T) +
                             ", got " + MessageTypeName(type));
    }
    MYPLUGIN_RETURN_IF_ERROR(m.Get(r));
    MYPLUGIN_RETURN_IF_ERROR(r.End());
    return m;
  }
  static StatusOr<M> Decode(const std::string& payload) {
    Reader r(payload);
    return Decode(r);
  }
};

struct Hello : Message<Hello, MessageType::kHello> {
  uint32_t magic = kMagic;
  uint16_t version = kProtocolVersion;
  std::string token;
  uint32_t process_id = 0;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct HelloOk : Message<HelloOk, MessageType::kHelloOk> {
  uint32_t num_processes = 0;
  uint64_t heartbeat_interval_ms = 0;
  uint64_t heartbeat_timeout_ms = 0;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct Error : Message<Error, MessageType::kError> {
  uint32_t code = 0;
  std::string message;
  // The status's failure detail (common/status.h); kind 0 is none.
  uint32_t kind = 0;
  std::vector<uint32_t> processes;
  std::string collective;
  int64_t call = -1;
  static Error From(uint32_t request_id, const Status& status);
  Status ToStatus() const;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct Ok : Message<Ok, MessageType::kOk> {
  void Put(Writer&) const {}
  Status Get(Reader&) { return OkStatus(); }
};

struct Register : Message<Register, MessageType::kRegister> {
  uint32_t num_processes = 0;
  std::string topology;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct Topology : Message<Topology, MessageType::kTopology> {
  std::vector<RegisteredProcess> processes;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct KeyValueSet : Message<KeyValueSet, MessageType::kKeyValueSet> {
  std::string key;
  std::string value;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct KeyValueInsert : Message<KeyValueInsert, MessageType::kKeyValueInsert> {
  std::string key;
  std::string value;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct KeyValueIncrement : Message<KeyValueIncrement, MessageType::kKeyValueIncrement> {
  std::string key;
  int64_t increment = 0;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct KeyValueGet : Message<KeyValueGet, MessageType::kKeyValueGet> {
  std::string key;
  uint64_t timeout_ms = 0;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct KeyValueTryGet : Message<KeyValueTryGet, MessageType::kKeyValueTryGet> {
  std::string key;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct KeyValueDelete : Message<KeyValueDelete, MessageType::kKeyValueDelete> {
  std::string key;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct KeyValueList : Message<KeyValueList, MessageType::kKeyValueList> {
  std::string prefix;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct Value : Message<Value, MessageType::kValue> {
  std::string value;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct Entries : Message<Entries, MessageType::kEntries> {
  std::vector<std::pair<std::string, std::string>> entries;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct Barrier : Message<Barrier, MessageType::kBarrier> {
  std::string name;
  uint64_t timeout_ms = 0;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct Shutdown : Message<Shutdown, MessageType::kShutdown> {
  uint64_t timeout_ms = 0;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct Heartbeat : Message<Heartbeat, MessageType::kHeartbeat> {
  void Put(Writer&) const {}
  Status Get(Reader&) { return OkStatus(); }
};

struct Failure : Message<Failure, MessageType::kFailure> {
  uint32_t process_id = 0;
  std::string reason;
  // The processes at fault as the failed one saw it (one that gave up
  // waiting for a peer that left names that peer); empty: itself.
  std::vector<uint32_t> blamed;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct ReportError : Message<ReportError, MessageType::kReportError> {
  std::string reason;
  std::vector<uint32_t> blamed;  // as in Failure
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct PeerShutdown : Message<PeerShutdown, MessageType::kPeerShutdown> {
  uint32_t process_id = 0;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

struct Agree : Message<Agree, MessageType::kAgree> {
  uint64_t timeout_ms = 0;
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

// The verdict of an agreement: every member hears the same one.
struct Membership : Message<Membership, MessageType::kMembership> {
  uint64_t epoch = 0;
  std::vector<Member> members;  // by process id
  void Put(Writer& w) const;
  Status Get(Reader& r);
};

// Decodes `payload` as whatever type its header names and encodes it again
// (the frame, length prefix included): for the codec's tests and fuzz target.
StatusOr<std::string> DecodeAndEncodeAny(const std::string& payload);

}  // namespace msg
}  // namespace myplugin::coordination
