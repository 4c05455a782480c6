#include "coordination/messages.h"

#include "coordination/process_info.h"

namespace myplugin::coordination::msg {

Status PeekType(const std::string& payload, MessageType* type, uint32_t* request_id) {
  Reader r(payload);
  return r.Header(type, request_id);
}

void Hello::Put(Writer& w) const { w.U32(magic).U16(version).Bytes(token).U32(process_id); }
Status Hello::Get(Reader& r) {
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&magic));
  MYPLUGIN_RETURN_IF_ERROR(r.U16(&version));
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&token));
  return r.U32(&process_id);
}

void HelloOk::Put(Writer& w) const { w.U32(num_processes).U64(heartbeat_interval_ms).U64(heartbeat_timeout_ms); }
Status HelloOk::Get(Reader& r) {
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&num_processes));
  MYPLUGIN_RETURN_IF_ERROR(r.U64(&heartbeat_interval_ms));
  return r.U64(&heartbeat_timeout_ms);
}

Error Error::From(uint32_t request_id, const Status& status) {
  Error e;
  e.request_id = request_id;
  e.code = static_cast<uint32_t>(status.code());
  e.message = status.message();
  if (const FailureDetail* f = status.failure()) {
    e.kind = static_cast<uint32_t>(f->kind);
    e.processes.assign(f->processes.begin(), f->processes.end());
    e.collective = f->collective;
    e.call = f->call;
  }
  return e;
}
Status Error::ToStatus() const {
  // A peer's code outside the known range, or OK in an error, must not pass
  // as success or as a value the enum cannot hold.
  Code c = code >= 1 && code <= static_cast<uint32_t>(Code::kUnauthenticated) ? static_cast<Code>(code)
                                                                              : Code::kUnknown;
  Status st(c, message);
  // So does a failure kind this build does not know: then the error has none.
  if (kind == 0 || kind > static_cast<uint32_t>(FailureKind::kCoordination)) return st;
  return st.WithFailure({static_cast<FailureKind>(kind), std::vector<int>(processes.begin(), processes.end()),
                         collective, call});
}
void Error::Put(Writer& w) const {
  w.U32(code).Bytes(message).U32(kind).U32(static_cast<uint32_t>(processes.size()));
  for (uint32_t p : processes) w.U32(p);
  w.Bytes(collective).I64(call);
}
Status Error::Get(Reader& r) {
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&code));
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&message));
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&kind));
  uint32_t n;
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&n));
  processes.clear();
  for (uint32_t i = 0; i < n; ++i) {  // a count beyond the payload fails at its end
    uint32_t p;
    MYPLUGIN_RETURN_IF_ERROR(r.U32(&p));
    processes.push_back(p);
  }
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&collective));
  return r.I64(&call);
}

void Register::Put(Writer& w) const { w.U32(num_processes).Bytes(topology); }
Status Register::Get(Reader& r) {
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&num_processes));
  return r.Bytes(&topology);
}

namespace {

// An incarnation as its difference from the entry before's (modulo 2^64,
// zigzagged): the service numbers them so that consecutive ids differ by
// one (messages.h), a byte each; any values still travel.
void PutIncarnation(Writer& w, uint64_t previous, uint64_t incarnation) {
  w.Varint(ZigZagDifference(previous, incarnation));
}
Status GetIncarnation(Reader& r, uint64_t previous, uint64_t* incarnation) {
  uint64_t z;
  MYPLUGIN_RETURN_IF_ERROR(r.Varint(&z));
  *incarnation = FromZigZagDifference(previous, z);
  return OkStatus();
}

}  // namespace

void Topology::Put(Writer& w) const {
  w.U32(static_cast<uint32_t>(processes.size()));
  TopologyEncoder table(w);
  uint64_t previous = 0;
  for (const RegisteredProcess& p : processes) {
    PutIncarnation(w, previous, p.incarnation);
    previous = p.incarnation;
    table.Put(p.topology);
  }
}
Status Topology::Get(Reader& r) {
  uint32_t n;
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&n));
  processes.clear();
  TopologyDecoder table(r);
  uint64_t previous = 0;
  for (uint32_t i = 0; i < n; ++i) {
    RegisteredProcess p;
    MYPLUGIN_RETURN_IF_ERROR(GetIncarnation(r, previous, &p.incarnation));
    previous = p.incarnation;
    MYPLUGIN_RETURN_IF_ERROR(table.Get(&p.topology));
    processes.push_back(std::move(p));
  }
  return OkStatus();
}

void KeyValueSet::Put(Writer& w) const { w.Bytes(key).Bytes(value); }
Status KeyValueSet::Get(Reader& r) {
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&key));
  return r.Bytes(&value);
}

void KeyValueInsert::Put(Writer& w) const { w.Bytes(key).Bytes(value); }
Status KeyValueInsert::Get(Reader& r) {
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&key));
  return r.Bytes(&value);
}

void KeyValueIncrement::Put(Writer& w) const { w.Bytes(key).I64(increment); }
Status KeyValueIncrement::Get(Reader& r) {
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&key));
  return r.I64(&increment);
}

void KeyValueGet::Put(Writer& w) const { w.Bytes(key).U64(timeout_ms); }
Status KeyValueGet::Get(Reader& r) {
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&key));
  return r.U64(&timeout_ms);
}

void KeyValueTryGet::Put(Writer& w) const { w.Bytes(key); }
Status KeyValueTryGet::Get(Reader& r) { return r.Bytes(&key); }

void KeyValueDelete::Put(Writer& w) const { w.Bytes(key); }
Status KeyValueDelete::Get(Reader& r) { return r.Bytes(&key); }

void KeyValueList::Put(Writer& w) const { w.Bytes(prefix); }
Status KeyValueList::Get(Reader& r) { return r.Bytes(&prefix); }

void Value::Put(Writer& w) const { w.Bytes(value); }
Status Value::Get(Reader& r) { return r.Bytes(&value); }

void Entries::Put(Writer& w) const {
  w.U32(static_cast<uint32_t>(entries.size()));
  for (const auto& e : entries) w.Bytes(e.first).Bytes(e.second);
}
Status Entries::Get(Reader& r) {
  uint32_t n;
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&n));
  entries.clear();
  for (uint32_t i = 0; i < n; ++i) {
    std::pair<std::string, std::string> e;
    MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&e.first));
    MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&e.second));
    entries.push_back(std::move(e));
  }
  return OkStatus();
}

void Barrier::Put(Writer& w) const { w.Bytes(name).U64(timeout_ms); }
Status Barrier::Get(Reader& r) {
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&name));
  return r.U64(&timeout_ms);
}

void Shutdown::Put(Writer& w) const { w.U64(timeout_ms); }
Status Shutdown::Get(Reader& r) { return r.U64(&timeout_ms); }

namespace {

void PutIds(Writer& w, const std::vector<uint32_t>& ids) {
  w.U32(static_cast<uint32_t>(ids.size()));
  for (uint32_t id : ids) w.U32(id);
}

Status GetIds(Reader& r, std::vector<uint32_t>* ids) {
  uint32_t n;
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&n));
  ids->clear();
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t id;
    MYPLUGIN_RETURN_IF_ERROR(r.U32(&id));
    ids->push_back(id);
  }
  return OkStatus();
}

}  // namespace

void Failure::Put(Writer& w) const {
  w.U32(process_id).Bytes(reason);
  PutIds(w, blamed);
}
Status Failure::Get(Reader& r) {
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&process_id));
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&reason));
  return GetIds(r, &blamed);
}

void ReportError::Put(Writer& w) const {
  w.Bytes(reason);
  PutIds(w, blamed);
}
Status ReportError::Get(Reader& r) {
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&reason));
  return GetIds(r, &blamed);
}

void PeerShutdown::Put(Writer& w) const { w.U32(process_id); }
Status PeerShutdown::Get(Reader& r) { return r.U32(&process_id); }

void Agree::Put(Writer& w) const { w.U64(timeout_ms); }
Status Agree::Get(Reader& r) { return r.U64(&timeout_ms); }

void Membership::Put(Writer& w) const {
  w.U64(epoch).U32(static_cast<uint32_t>(members.size()));
  TopologyEncoder table(w);
  uint64_t previous = 0;
  for (const Member& m : members) {
    w.Varint(m.process_id);
    PutIncarnation(w, previous, m.incarnation);
    previous = m.incarnation;
    table.Put(m.topology);
  }
}
Status Membership::Get(Reader& r) {
  uint32_t n;
  MYPLUGIN_RETURN_IF_ERROR(r.U64(&epoch));
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&n));
  members.clear();
  TopologyDecoder table(r);
  uint64_t previous = 0;
  for (uint32_t i = 0; i < n; ++i) {
    Member m;
    uint64_t id;
    MYPLUGIN_RETURN_IF_ERROR(r.Varint(&id));
    if (id > UINT32_MAX) return InvalidArgument("malformed coordination message: a member id beyond 32 bits");
    m.process_id = static_cast<uint32_t>(id);
    MYPLUGIN_RETURN_IF_ERROR(GetIncarnation(r, previous, &m.incarnation));
    previous = m.incarnation;
    MYPLUGIN_RETURN_IF_ERROR(table.Get(&m.topology));
    members.push_back(std::move(m));
  }
  return OkStatus();
}

namespace {
template <typename M>
StatusOr<std::string> Reencode(const std::string& payload) {
  StatusOr<M> m = M::Decode(payload);
  if (!m.ok()) return m.status();
  return m.value().Encode();
}
}  // namespace

StatusOr<std::string> DecodeAndEncodeAny(const std::string& payload) {
  MessageType type;
  uint32_t rid;
  MYPLUGIN_RETURN_IF_ERROR(PeekType(payload, &type, &rid));
  switch (type) {
    case MessageType::kHello: return Reencode<Hello>(payload);
    case MessageType::kHelloOk: return Reencode<HelloOk>(payload);
    case MessageType::kError: return Reencode<Error>(payload);
    case MessageType::kOk: return Reencode<Ok>(payload);
    case MessageType::kRegister: return Reencode<Register>(payload);
    case MessageType::kTopology: return Reencode<Topology>(payload);
    case MessageType::kKeyValueSet: return Reencode<KeyValueSet>(payload);
    case MessageType::kKeyValueGet: return Reencode<KeyValueGet>(payload);
    case MessageType::kKeyValueTryGet: return Reencode<KeyValueTryGet>(payload);
    case MessageType::kKeyValueDelete: return Reencode<KeyValueDelete>(payload);
    case MessageType::kKeyValueList: return Reencode<KeyValueList>(payload);
    case MessageType::kValue: return Reencode<Value>(payload);
    case MessageType::kEntries: return Reencode<Entries>(payload);
    case MessageType::kBarrier: return Reencode<Barrier>(payload);
    case MessageType::kShutdown: return Reencode<Shutdown>(payload);
    case MessageType::kHeartbeat: return Reencode<Heartbeat>(payload);
    case MessageType::kFailure: return Reencode<Failure>(payload);
    case MessageType::kReportError: return Reencode<ReportError>(payload);
    case MessageType::kPeerShutdown: return Reencode<PeerShutdown>(payload);
    case MessageType::kAgree: return Reencode<Agree>(payload);
    case MessageType::kMembership: return Reencode<Membership>(payload);
    case MessageType::kKeyValueInsert: return Reencode<KeyValueInsert>(payload);
    case MessageType::kKeyValueIncrement: return Reencode<KeyValueIncrement>(payload);
  }
  return InvalidArgument("malformed coordination message: unknown type");
}

}  // namespace myplugin::coordination::msg
