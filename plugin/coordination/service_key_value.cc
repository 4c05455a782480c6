// The service's key-value store: ServiceState's handlers of set, insert,
// increment, get, try-get, delete and list (service_state.h).
#include "coordination/service_state.h"

#include <algorithm>

#include "common/deadline.h"
#include "common/parse_int.h"
#include "coordination/messages.h"

namespace myplugin::coordination {

// --- the key-value store ---------------------------------------------------

Status ServiceState::HandleKeyValue(int pid, MessageType type, const std::string& payload, Outbox& out) {
  const ConnectionId conn = processes_[pid].conn;
  switch (type) {
    case MessageType::kKeyValueSet: return HandleKeyValueSet(conn, payload, out);
    case MessageType::kKeyValueInsert: return HandleKeyValueInsert(conn, payload, out);
    case MessageType::kKeyValueIncrement: return HandleKeyValueIncrement(conn, payload, out);
    case MessageType::kKeyValueGet: return HandleKeyValueGet(conn, payload, out);
    case MessageType::kKeyValueTryGet: return HandleKeyValueTryGet(conn, payload, out);
    case MessageType::kKeyValueDelete: return HandleKeyValueDelete(conn, payload, out);
    case MessageType::kKeyValueList: return HandleKeyValueList(conn, payload, out);
    default: return InvalidArgument(std::string("unexpected ") + MessageTypeName(type));
  }
}

Status ServiceState::StoreKeyValue(const std::string& what, const std::string& key, std::string value, Outbox& out) {
  MYPLUGIN_RETURN_IF_ERROR(CheckKeyValue(what, key, value));
  auto old = kv_.find(key);
  size_t freed = old == kv_.end() ? 0 : old->first.size() + old->second.size();
  size_t after = store_bytes_ - freed + key.size() + value.size();
  if (after > kMaxStoreBytes) {
    return Status(Code::kResourceExhausted, what + ": the store would hold " + ByteCount(after) + ", over its " +
                                                ByteCount(kMaxStoreBytes) + " limit (delete keys that are no longer needed)");
  }
  store_bytes_ = after;
  auto range = key_waiters_.equal_range(key);
  for (auto it = range.first; it != range.second; ++it) {
    msg::Value v;
    v.request_id = it->second.waiter.request_id;
    v.value = value;
    out.Send(it->second.waiter.conn, v.Encode());
    DropWaiter(it->second.waiter.conn);
  }
  key_waiters_.erase(range.first, range.second);
  kv_[key] = std::move(value);
  return OkStatus();
}

Status ServiceState::HandleKeyValueSet(ConnectionId conn, const std::string& payload, Outbox& out) {
  StatusOr<msg::KeyValueSet> m = msg::KeyValueSet::Decode(payload);
  if (!m.ok()) return m.status();
  Waiter w{conn, m.value().request_id};
  Status st = StoreKeyValue("key_value_set of " + QuotedKey(m.value().key), m.value().key,
                            std::move(m.value().value), out);
  st.ok() ? ReplyOk(w, out) : ReplyError(w, st, out);
  return OkStatus();
}

// Atomic here, where every request is handled in turn: of two processes
// racing to create a key, exactly one succeeds (as jax's service does it).
Status ServiceState::HandleKeyValueInsert(ConnectionId conn, const std::string& payload, Outbox& out) {
  StatusOr<msg::KeyValueInsert> m = msg::KeyValueInsert::Decode(payload);
  if (!m.ok()) return m.status();
  Waiter w{conn, m.value().request_id};
  const std::string& key = m.value().key;
  Status st = kv_.count(key) ? Status(Code::kAlreadyExists, "key " + QuotedKey(key) + " already exists")
                             : StoreKeyValue("key_value_set of " + QuotedKey(key), key, std::move(m.value().value), out);
  st.ok() ? ReplyOk(w, out) : ReplyError(w, st, out);
  return OkStatus();
}

namespace {

// The value exactly as increments write it: an optional '-' and digits
// (ParseInt64 alone would also take strtoll's leading space or '+').
bool ParseStoredInt64(const std::string& text, int64_t* out) {
  return !text.empty() && (text[0] == '-' || (text[0] >= '0' && text[0] <= '9')) && ParseInt64(text, out);
}

}  // namespace

Status ServiceState::HandleKeyValueIncrement(ConnectionId conn, const std::string& payload, Outbox& out) {
  StatusOr<msg::KeyValueIncrement> m = msg::KeyValueIncrement::Decode(payload);
  if (!m.ok()) return m.status();
  Waiter w{conn, m.value().request_id};
  const std::string& key = m.value().key;
  const std::string what = "key_value_increment of " + QuotedKey(key);
  int64_t value = 0;
  auto it = kv_.find(key);
  Status st;
  if (it != kv_.end() && !ParseStoredInt64(it->second, &value)) {
    // FAILED_PRECONDITION, as jax's service answers it.
    st = Status(Code::kFailedPrecondition, what + ": the key holds " + std::to_string(it->second.size()) +
                                               " bytes that are not a decimal integer");
  } else if (__builtin_add_overflow(value, m.value().increment, &value)) {
    st = Status(Code::kOutOfRange, what + ": the sum overflows a 64-bit integer");
  } else {
    st = StoreKeyValue(what, key, std::to_string(value), out);
  }
  if (!st.ok()) {
    ReplyError(w, st, out);
    return OkStatus();
  }
  msg::Value v;
  v.request_id = w.request_id;
  v.value = std::to_string(value);
  out.Send(conn, v.Encode());
  return OkStatus();
}

Status ServiceState::HandleKeyValueGet(ConnectionId conn, const std::string& payload, Outbox& out) {
  StatusOr<msg::KeyValueGet> m = msg::KeyValueGet::Decode(payload);
  if (!m.ok()) return m.status();
  Waiter w{conn, m.value().request_id};
  const std::string& key = m.value().key;
  auto it = kv_.find(key);
  if (it != kv_.end()) {
    msg::Value v;
    v.request_id = w.request_id;
    v.value = it->second;
    out.Send(conn, v.Encode());
    return OkStatus();
  }
  Status fits = CheckKey("key_value_get of " + QuotedKey(key), key);
  if (fits.ok()) fits = CheckWaitingOf(conn, "key_value_get of " + QuotedKey(key));
  if (fits.ok() && Waiting() >= MaxWaitingFor(options_.num_processes)) {
    fits = Status(Code::kResourceExhausted, "key_value_get of " + QuotedKey(key) + ": " +
                                                std::to_string(MaxWaitingFor(options_.num_processes)) +
                                                " blocking gets and barriers are already waiting (the limit)");
  }
  if (!fits.ok()) {
    ReplyError(w, fits, out);
    return OkStatus();
  }
  double timeout_s = m.value().timeout_ms / 1000.0;
  auto waiter = key_waiters_.emplace(key, KeyWaiter{w, After(timeout_s), SaturatedSeconds(timeout_s)});
  next_expiry_ = std::min(next_expiry_, waiter->second.deadline);
  AddWaiter(conn);
  return OkStatus();
}

Status ServiceState::HandleKeyValueTryGet(ConnectionId conn, const std::string& payload, Outbox& out) {
  StatusOr<msg::KeyValueTryGet> m = msg::KeyValueTryGet::Decode(payload);
  if (!m.ok()) return m.status();
  Waiter w{conn, m.value().request_id};
  auto it = kv_.find(m.value().key);
  if (it == kv_.end()) {
    ReplyError(w, NotFound("key '" + m.value().key.substr(0, kMaxKeyBytes) + "' is not set"), out);
    return OkStatus();
  }
  msg::Value v;
  v.request_id = w.request_id;
  v.value = it->second;
  out.Send(conn, v.Encode());
  return OkStatus();
}

Status ServiceState::HandleKeyValueDelete(ConnectionId conn, const std::string& payload, Outbox& out) {
  StatusOr<msg::KeyValueDelete> m = msg::KeyValueDelete::Decode(payload);
  if (!m.ok()) return m.status();
  auto it = kv_.find(m.value().key);
  if (it != kv_.end()) {
    store_bytes_ -= it->first.size() + it->second.size();
    kv_.erase(it);
  }
  ReplyOk(Waiter{conn, m.value().request_id}, out);
  return OkStatus();
}

Status ServiceState::HandleKeyValueList(ConnectionId conn, const std::string& payload, Outbox& out) {
  StatusOr<msg::KeyValueList> m = msg::KeyValueList::Decode(payload);
  if (!m.ok()) return m.status();
  const std::string& prefix = m.value().prefix;
  Waiter w{conn, m.value().request_id};
  // Sized before it is built: a reply over the frame limit would cost
  // the memory and then kill the connection that asked.
  size_t bytes = 5 + 4;
  for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
       ++it) {
    bytes += 8 + it->first.size() + it->second.size();
  }
  if (bytes > kMaxFrameBytes) {
    ReplyError(w, Status(Code::kResourceExhausted,
                         "key_value_list of prefix " + QuotedKey(prefix) + ": the reply of " +
                             ByteCount(bytes) + " exceeds the " + ByteCount(kMaxFrameBytes) +
                             " message limit (list a narrower prefix, or get the keys one by one)"), out);
    return OkStatus();
  }
  msg::Entries e;
  e.request_id = w.request_id;
  for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
       ++it) {
    e.entries.emplace_back(*it);
  }
  out.Send(conn, e.Encode());
  return OkStatus();
}

}  // namespace myplugin::coordination
