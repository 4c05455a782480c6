// The client's requests, Hello to Shutdown: each message made, sent (through Call,
// Hello on the bare socket) and its reply read back as the value or error it carries.
#include "coordination/client.h"

#include "common/deadline.h"
#include "common/parse_int.h"
#include "coordination/limits.h"
#include "coordination/messages.h"

namespace myplugin::coordination {
namespace {

// On the wire (and in the waits below): saturated, never an overflow.
uint64_t WireMillis(double seconds) { return static_cast<uint64_t>(SaturatedSeconds(seconds) * 1000); }

// A reply frame as the message it should be, or the error it carries.
template <typename M>
StatusOr<M> Reply(const StatusOr<std::string>& reply) {
  if (!reply.ok()) return reply.status();
  MessageType type;
  uint32_t rid;
  MYPLUGIN_RETURN_IF_ERROR(msg::PeekType(reply.value(), &type, &rid));
  if (type == MessageType::kError) {
    StatusOr<msg::Error> e = msg::Error::Decode(reply.value());
    if (!e.ok()) return e.status();
    return e.value().ToStatus();
  }
  if (type != M::kType) {
    return Internal(std::string("coordinator replied ") + MessageTypeName(type) + ", expected " +
                    MessageTypeName(M::kType));
  }
  return M::Decode(reply.value());
}

// A reply that carries nothing but success or an error.
Status OkReply(const StatusOr<std::string>& reply) { return Reply<msg::Ok>(reply).status(); }

// A reply that carries one value.
StatusOr<std::string> ValueReply(const StatusOr<std::string>& reply) {
  StatusOr<msg::Value> v = Reply<msg::Value>(reply);
  if (!v.ok()) return v.status();
  return std::move(v.value().value);
}

}  // namespace

Status CoordinationClient::Hello() {
  msg::Hello hello;
  hello.token = options_.token;
  hello.process_id = static_cast<uint32_t>(options_.process_id);
  MYPLUGIN_RETURN_IF_ERROR(socket_.SendAll(hello.Encode()));
  std::string frame;
  Status st = socket_.RecvFrame(&frame, static_cast<int>(std::min<uint64_t>(WireMillis(std::max(10.0, options_.initialization_timeout_s)), INT32_MAX)));
  if (!st.ok()) {
    return Status(st.code(), "no answer from the myplugin coordinator at " + options_.address + ": " + st.message());
  }
  StatusOr<msg::HelloOk> ok = Reply<msg::HelloOk>(frame);
  if (!ok.ok()) {
    return Status(ok.status().code(), "the myplugin coordinator at " + options_.address + " refused process " +
                                          std::to_string(options_.process_id) + ": " + ok.status().message());
  }
  const uint32_t num_processes = ok.value().num_processes;
  const uint64_t interval_ms = ok.value().heartbeat_interval_ms, timeout_ms = ok.value().heartbeat_timeout_ms;
  if (static_cast<int>(num_processes) != options_.num_processes) {
    return InvalidArgument("this process believes the job has " + std::to_string(options_.num_processes) +
                           " processes, the coordinator at " + options_.address + " was started for " +
                           std::to_string(num_processes));
  }
  heartbeat_interval_s_ = interval_ms / 1000.0;
  heartbeat_timeout_s_ = timeout_ms / 1000.0;
  return OkStatus();
}

StatusOr<msg::Membership> CoordinationClient::Register(const std::string& local_topology) {
  msg::Register m;
  m.request_id = NextRequestId();
  m.num_processes = static_cast<uint32_t>(options_.num_processes);
  m.topology = local_topology;
  StatusOr<std::string> reply = Call("registration", m.Encode(), m.request_id, options_.initialization_timeout_s);
  MessageType type;
  uint32_t rid;
  if (reply.ok() && msg::PeekType(reply.value(), &type, &rid).ok() && type == MessageType::kMembership) {
    return Reply<msg::Membership>(reply);  // a restarted process, let in by an agreement
  }
  StatusOr<msg::Topology> t = Reply<msg::Topology>(reply);
  if (!t.ok()) return t.status();
  msg::Membership all;
  for (size_t i = 0; i < t.value().processes.size(); ++i) {
    all.members.push_back({static_cast<uint32_t>(i), t.value().processes[i].incarnation,
                           std::move(t.value().processes[i].topology)});
  }
  return all;
}

StatusOr<msg::Membership> CoordinationClient::Agree(double timeout_s) {
  msg::Agree m;
  m.request_id = NextRequestId();
  m.timeout_ms = WireMillis(timeout_s);
  return Reply<msg::Membership>(
      Call("the membership agreement", m.Encode(), m.request_id, timeout_s, /*during_failure=*/true));
}

uint64_t CoordinationClient::epoch() {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

Status CoordinationClient::KeyValueSet(const std::string& key, const std::string& value) {
  const std::string what = "key_value_set of " + QuotedKey(key);
  // Checked here too: a frame over the limit would cost this process its
  // connection, and the job with it.
  MYPLUGIN_RETURN_IF_ERROR(CheckKeyValue(what, key, value));
  msg::KeyValueSet m;
  m.request_id = NextRequestId();
  m.key = key;
  m.value = value;
  return OkReply(Call(what, m.Encode(), m.request_id, 0));
}

Status CoordinationClient::KeyValueInsert(const std::string& key, const std::string& value) {
  const std::string what = "key_value_set of " + QuotedKey(key);
  MYPLUGIN_RETURN_IF_ERROR(CheckKeyValue(what, key, value));
  msg::KeyValueInsert m;
  m.request_id = NextRequestId();
  m.key = key;
  m.value = value;
  return OkReply(Call(what, m.Encode(), m.request_id, 0));
}

StatusOr<int64_t> CoordinationClient::KeyValueIncrement(const std::string& key, int64_t increment) {
  const std::string what = "key_value_increment of " + QuotedKey(key);
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, key));
  msg::KeyValueIncrement m;
  m.request_id = NextRequestId();
  m.key = key;
  m.increment = increment;
  StatusOr<std::string> sum = ValueReply(Call(what, m.Encode(), m.request_id, 0));
  if (!sum.ok()) return sum.status();
  int64_t value;
  if (!ParseInt64(sum.value(), &value)) {
    return Status(Code::kInternal, what + ": the service's reply is not a decimal integer");
  }
  return value;
}

StatusOr<std::string> CoordinationClient::KeyValueGet(const std::string& key, double timeout_s) {
  const std::string what = "key_value_get of " + QuotedKey(key);
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, key));
  msg::KeyValueGet m;
  m.request_id = NextRequestId();
  m.key = key;
  m.timeout_ms = WireMillis(timeout_s);
  return ValueReply(Call(what, m.Encode(), m.request_id, timeout_s));
}

StatusOr<std::string> CoordinationClient::KeyValueTryGet(const std::string& key, bool during_failure) {
  const std::string what = "key_value_try_get of " + QuotedKey(key);
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, key));
  msg::KeyValueTryGet m;
  m.request_id = NextRequestId();
  m.key = key;
  return ValueReply(Call(what, m.Encode(), m.request_id, 0, during_failure));
}

Status CoordinationClient::KeyValueDelete(const std::string& key) {
  const std::string what = "key_value_delete of " + QuotedKey(key);
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, key));
  msg::KeyValueDelete m;
  m.request_id = NextRequestId();
  m.key = key;
  return OkReply(Call(what, m.Encode(), m.request_id, 0));
}

StatusOr<std::vector<std::pair<std::string, std::string>>> CoordinationClient::KeyValueList(const std::string& prefix) {
  const std::string what = "key_value_list of prefix " + QuotedKey(prefix);
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, prefix));
  msg::KeyValueList m;
  m.request_id = NextRequestId();
  m.prefix = prefix;
  StatusOr<msg::Entries> e = Reply<msg::Entries>(Call(what, m.Encode(), m.request_id, 0));
  if (!e.ok()) return e.status();
  return std::move(e.value().entries);
}

Status CoordinationClient::Barrier(const std::string& name, double timeout_s) {
  const std::string what = "barrier '" + name + "'";
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, name));
  msg::Barrier m;
  m.request_id = NextRequestId();
  m.name = name;
  m.timeout_ms = WireMillis(timeout_s);
  return OkReply(Call(what, m.Encode(), m.request_id, timeout_s));
}

Status CoordinationClient::Shutdown(double timeout_s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_requested_ = true;
  }
  msg::Shutdown m;
  m.request_id = NextRequestId();
  m.timeout_ms = WireMillis(timeout_s);
  Status st = OkReply(Call("the shutdown barrier", m.Encode(), m.request_id, timeout_s));
  if (st.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shut_down_ = true;
    }
    StopThreads();
  }
  return st;
}

}  // namespace myplugin::coordination
