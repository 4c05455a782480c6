// The coordination service's state and message handling, with no sockets:
// registration, the key-value store, barriers, heartbeats, the job's
// failure and the members' agreement on who is left after one. It takes (connection id, frame) and answers with frames to send,
// so the service's network layer (service.h) is a thin shell around it, and
// the unit tests and the fuzz target drive it in-process.
//
// Not thread-safe: the service calls it under one lock, and never does I/O
// under that lock (frames go to per-connection send queues).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordination/defaults.h"
#include "coordination/limits.h"
#include "coordination/wire.h"

namespace myplugin::coordination {

// The barrier every process meets at shutdown.
constexpr char kShutdownBarrier[] = "__myplugin_shutdown__";

struct ServiceOptions {
  int num_processes = 1;
  // Every connection must present it. Empty means "no token", which the
  // callers only allow on a loopback address.
  std::string token;
  double heartbeat_timeout_s = kDefaultHeartbeatTimeoutSeconds;
  double initialization_timeout_s = kDefaultInitializationTimeoutSeconds;
  // 0: MaxConnectionsFor(num_processes) (limits.h).
  int max_connections = 0;
  // Event-loop threads; 0: IoThreadsFor(num_processes, the machine's cores)
  // (limits.h).
  int io_threads = 0;
  // The launcher's restarts: this is attempt `attempt` of the job, and
  // `earlier_tokens` are the tokens of the attempts before it (index =
  // attempt), so a process left over from one is told so, not "wrong token".
  int attempt = 0;
  std::vector<std::string> earlier_tokens;
};

// 0 is no connection.
using ConnectionId = uint64_t;

// What the state asks the network layer to do, in order.
struct Outbox {
  struct Frame {
    ConnectionId to;
    std::shared_ptr<const std::string> bytes;
  };
  std::vector<Frame> frames;
  void Send(ConnectionId to, std::string frame);
  void Send(ConnectionId to, const std::shared_ptr<const std::string>& frame);
};

class ServiceState {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ServiceState(const ServiceOptions& options);

  static double HeartbeatIntervalSeconds(double heartbeat_timeout_s);
  // A member whose connection takes no bytes for this long is not reading:
  // shorter than the heartbeat timeout, so the reason names what happened.
  static double SendProgressTimeoutSeconds(double heartbeat_timeout_s);
  // How often the service says who it still waits for at initialization.
  static double InitReportSeconds(double initialization_timeout_s);

  // The first frame of a connection. OK: the connection is the member it
  // claims to be, and a HelloOk is in `out`. An error: why it was refused,
  // and the Error frame to send it before closing is in `out`.
  Status OnHello(ConnectionId conn, const std::string& peer, const std::string& payload, Outbox& out);
  // A frame from an accepted connection. An error means the stream is
  // broken (malformed): the caller closes the connection and reports it
  // through OnDisconnect.
  Status OnFrame(ConnectionId conn, const std::string& payload, Outbox& out);
  void OnDisconnect(ConnectionId conn, const Status& why, Outbox& out);
  // The member on `conn` stopped reading what the service sends it.
  void OnStoppedReading(ConnectionId conn, const std::string& detail, Outbox& out);
  // The launcher saw process `pid`'s process end (`how`: its exit status,
  // for the failure's reason): unless it had departed it is failed now, and
  // its connection is no longer a member's even if it is still open (a
  // child of the dead process holds the socket, or its close is still on
  // the way), so a new process may claim the id at once. A live process's
  // id stays refused to any other. Returns the connection to close, or 0.
  ConnectionId OnProcessEnded(int pid, const std::string& how, Outbox& out);
  // The launcher started failed process `pid` again: the next agreement
  // waits for it to register (within the agreement's timeout), so it is let
  // in there. `expected` false: its new process ended before it registered.
  void ExpectRejoin(int pid, bool expected, Outbox& out);
  // Heartbeats out; heartbeat, barrier, key and initialization deadlines.
  void Tick(Clock::time_point now, Outbox& out);
  // What the network shell can say of a member's link (common/tcp_links.h),
  // added to the reason when a process stops responding: whether its host
  // still acknowledges what the service sends. Called under the caller's
  // lock; unset (unit tests), nothing is added.
  using LinkDescriber = std::function<std::string(ConnectionId conn, int process)>;
  void set_link_describer(LinkDescriber describe) { describe_link_ = std::move(describe); }

  const ServiceOptions& options() const { return options_; }
  // The members of the current epoch (all processes until an agreement
  // changes that) and the epoch's number.
  const std::set<int>& live() const { return live_; }
  uint64_t epoch() const { return epoch_; }
  // A failure can still be recovered from: registration completed and no
  // agreement has failed.
  bool recoverable() const { return registration_complete_ && !terminal_; }
  std::optional<Status> failure() const { return failure_; }
  int failed_process() const { return failed_process_; }
  // The job's failure came from the failed process's own report (an error
  // it raised, a collective it cannot complete): that process is alive and
  // exiting by itself, not dead or frozen.
  bool failure_self_reported() const { return failure_self_reported_; }
  // How many times each process id was declared failed (this attempt): the
  // launcher compares it with the count when it started the id's process,
  // so a process failed while still running (stopped, stuck) is ended.
  std::vector<uint64_t> failures_per_process() const;
  bool all_departed() const;
  size_t store_bytes() const { return store_bytes_; }
  // The member on `conn`, or -1.
  int ProcessOf(ConnectionId conn) const;
  // An empty string, or the first invariant found broken (for tests and the
  // fuzz target): store accounting, limits, one connection per member.
  std::string CheckInvariants() const;

 private:
  // Forgets the member on `conn`; its process id if that process was still
  // live (neither departed nor failed) and on this connection, else -1.
  int DetachLiveMember(ConnectionId conn);
  struct Waiter {
    ConnectionId conn;
    uint32_t request_id;
  };
  struct Barrier {
    std::set<int> arrived;
    size_t live_arrived = 0;  // of `arrived`, the members of the epoch (live_)
    std::vector<Waiter> waiters;
    Clock::time_point deadline;
    double timeout_s;  // set with the deadline (no initializer here: clang then refuses optional<Agreement>::emplace())
  };
  struct KeyWaiter {
    Waiter waiter;
    Clock::time_point deadline;
    double timeout_s;  // set with the deadline (no initializer here: clang then refuses optional<Agreement>::emplace())
  };
  enum class ProcessState { kAbsent, kConnected, kRegistered, kShuttingDown, kDeparted, kFailed };
  struct Process {
    ProcessState state = ProcessState::kAbsent;
    ConnectionId conn = 0;
    std::string peer;
    uint64_t incarnation = 0;
    std::string topology;
    Clock::time_point last_heartbeat;
    uint64_t failures = 0;  // declared failed, this attempt
  };

  // One per concern; each decodes its own messages.
  Status HandleRegister(int pid, const std::string& payload, Outbox& out);
  Status HandleKeyValue(int pid, MessageType type, const std::string& payload, Outbox& out);
  Status HandleKeyValueSet(ConnectionId conn, const std::string& payload, Outbox& out);
  Status HandleKeyValueInsert(ConnectionId conn, const std::string& payload, Outbox& out);
  Status HandleKeyValueIncrement(ConnectionId conn, const std::string& payload, Outbox& out);
  // Stores key = value and answers its blocking gets, or says why not (sizes, the store's limit).
  Status StoreKeyValue(const std::string& what, const std::string& key, std::string value, Outbox& out);
  Status HandleKeyValueGet(ConnectionId conn, const std::string& payload, Outbox& out);
  Status HandleKeyValueTryGet(ConnectionId conn, const std::string& payload, Outbox& out);
  Status HandleKeyValueDelete(ConnectionId conn, const std::string& payload, Outbox& out);
  Status HandleKeyValueList(ConnectionId conn, const std::string& payload, Outbox& out);
  Status HandleBarrier(int pid, const std::string& payload, Outbox& out);
  Status HandleShutdown(int pid, const std::string& payload, Outbox& out);
  Status HandleReportError(int pid, const std::string& payload, Outbox& out);
  Status HandleAgree(int pid, const std::string& payload, Outbox& out);
  // A process that registers after registration completed (a rank the
  // launcher started again) waits for the next agreement to be let in.
  void AddJoiner(int pid, const Waiter& w);
  // A member of the current epoch the agreement must hear from.
  bool AwaitedInAgreement(int pid) const;
  // Answers the agreement once every live member asked for it.
  void CheckAgreement(Outbox& out);
  // No agreement is possible any more: everyone waiting for one hears why.
  void EndRecovery(const Status& why, Outbox& out);

  void ReplyError(const Waiter& w, const Status& status, Outbox& out);
  void ReplyOk(const Waiter& w, Outbox& out);
  // `blamed`: the processes the failed one named as the cause (its
  // ReportError); they are what the others' errors name.
  LinkDescriber describe_link_;
  void DeclareFailure(int process_id, const std::string& reason, Outbox& out,
                      const std::vector<uint32_t>& blamed = {});
  void FailAllWaiters(const Status& status, Outbox& out);
  void ArriveAtBarrier(const std::string& name, int pid, const Waiter& w, double timeout_s, Outbox& out);
  void CheckBarrier(const std::string& name, Outbox& out);
  void FailBarriersWaitingFor(int process_id, const std::string& why, Outbox& out);
  void ExpireDeadlines(Clock::time_point now, Outbox& out);
  void Broadcast(const std::string& frame, int except, Outbox& out);
  size_t Waiting() const;
  // Blocking gets and barrier arrivals each connection has waiting, kept
  // with every waiter added or answered (bounded per process).
  void AddWaiter(ConnectionId conn);
  void DropWaiter(ConnectionId conn);
  // Every waiter of `b` gets `st` (an Ok reply when it is OK) and stops
  // counting against its process's waiting limit.
  void AnswerBarrier(const Barrier& b, const Status& st, Outbox& out);
  size_t WaitingOf(ConnectionId conn) const;
  // RESOURCE_EXHAUSTED naming `what` when conn's process is at its cap.
  Status CheckWaitingOf(ConnectionId conn, const std::string& what) const;
  // A duration as messages say it ("2.5 s"), and a line of the coordinator's log.
  static std::string Seconds(double s);
  static void Log(const std::string& line);
  std::string ProcessList(const std::set<int>& ids) const;
  std::set<int> Missing(const std::set<int>& present) const;
  // The processes that have registered (before registration completes).
  std::set<int> Registered() const;

  ServiceOptions options_;  // not const: a restart assigns a fresh state
  std::vector<Process> processes_;
  std::unordered_map<ConnectionId, int> members_;
  Clock::time_point init_deadline_;
  Clock::time_point next_init_report_;
  Clock::time_point next_beat_;
  // No watched process can be silent too long before this (Tick).
  Clock::time_point next_liveness_check_ = Clock::time_point::max();
  // No get or barrier can time out before this (ExpireDeadlines).
  Clock::time_point next_expiry_ = Clock::time_point::max();
  bool registration_complete_ = false;
  size_t registered_ = 0;  // before registration completes
  std::vector<Waiter> registration_waiters_;
  std::map<std::string, std::string> kv_;
  size_t store_bytes_ = 0;
  std::multimap<std::string, KeyWaiter> key_waiters_;
  std::map<std::string, Barrier> barriers_;
  // The processes that asked to shut down (a barrier they miss cannot complete).
  std::set<int> shutting_down_;
  std::unordered_map<ConnectionId, size_t> waiting_of_;
  std::optional<Status> failure_;
  int failed_process_ = -1;
  bool failure_self_reported_ = false;

  // Membership: the processes of the current epoch, and the agreement on
  // the next one (members that asked; the deadline runs from the first).
  std::set<int> live_;
  uint64_t epoch_ = 0;
  bool terminal_ = false;
  std::optional<Status> recovery_failure_;  // why no agreement is possible any more
  struct Agreement {
    std::map<int, Waiter> arrived;
    Clock::time_point deadline;
    double timeout_s;  // set with the deadline (no initializer here: clang then refuses optional<Agreement>::emplace())
  };
  std::optional<Agreement> agreement_;
  std::map<int, Waiter> joiners_;
  std::set<int> expected_joiners_;
};

}  // namespace myplugin::coordination
