// A process's connection to the coordination service.
//
// Two threads of its own: a reader that delivers replies and failure
// notices, and a heartbeat thread that keeps the service informed and
// watches the service in turn. When the job fails (a peer failed, or the
// coordinator is gone), every pending and later call returns that error,
// the failure callbacks run (the collectives layer aborts its operations
// there), and, with fate-sharing on, the process exits shortly after with
// an error line that names the failed process. With it off, the survivors
// may agree on a new membership (Agree), which ends the failure for them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "coordination/defaults.h"
#include "coordination/messages.h"
#include "coordination/socket.h"

namespace myplugin::coordination {

// The exit code of a process that ends because a peer failed.
inline constexpr int kFateSharingExitCode = 42;

struct ClientOptions {
  std::string address;  // host:port of the service
  std::string token;
  int process_id = 0;
  int num_processes = 1;
  // How long to keep trying to reach the service, and to wait for everyone to register.
  double initialization_timeout_s = kDefaultInitializationTimeoutSeconds;
  // Exit the process when the job fails (after the callbacks ran).
  bool fate_sharing = true;
  // Time between the failure notice and the exit: long enough for a Python
  // exception raised from a pending call to be printed.
  double fate_sharing_grace_s = 2.0;
};

class CoordinationClient {
 public:
  // Connects and says Hello; retries until the initialization timeout.
  static StatusOr<std::unique_ptr<CoordinationClient>> Connect(const ClientOptions& options);
  ~CoordinationClient();
  CoordinationClient(const CoordinationClient&) = delete;
  CoordinationClient& operator=(const CoordinationClient&) = delete;

  int process_id() const { return options_.process_id; }
  int num_processes() const { return options_.num_processes; }
  bool fate_sharing() const { return options_.fate_sharing; }

  // Publishes this process's topology; returns the members' (every
  // process's, at epoch 0) once all have registered. A process that comes
  // back after a failure is answered at the survivors' next agreement.
  StatusOr<msg::Membership> Register(const std::string& local_topology);
  // The membership agreement: every live member calls it; all hear the same
  // verdict (the live members and the epoch, which changes with them), or
  // the same error. A verdict ends the job's failure for this process.
  StatusOr<msg::Membership> Agree(double timeout_s);
  // The epoch of the last verdict this process heard (0 at the start).
  uint64_t epoch();

  Status KeyValueSet(const std::string& key, const std::string& value);
  // Sets the key only if it is absent (ALREADY_EXISTS otherwise): of two
  // processes racing to create it, exactly one succeeds.
  Status KeyValueInsert(const std::string& key, const std::string& value);
  // Adds to the key's decimal integer value (absent: 0), atomically; the sum.
  StatusOr<int64_t> KeyValueIncrement(const std::string& key, int64_t increment);
  StatusOr<std::string> KeyValueGet(const std::string& key, double timeout_s);
  // NOT_FOUND when the key is not set. `during_failure`: a read that
  // explains a failure (what a peer reported before it), answered after one too.
  StatusOr<std::string> KeyValueTryGet(const std::string& key, bool during_failure = false);
  Status KeyValueDelete(const std::string& key);
  StatusOr<std::vector<std::pair<std::string, std::string>>> KeyValueList(const std::string& prefix);
  Status Barrier(const std::string& name, double timeout_s);
  // The shutdown barrier; afterwards a lost connection is not a failure.
  Status Shutdown(double timeout_s);
  // Tells the service that this process is failing (an uncaught exception,
  // say), so that the others learn why instead of only "connection lost".
  // `blamed`: the processes that caused it, if not this one (the others'
  // errors name them).
  void ReportError(const std::string& reason, const std::vector<int>& blamed = {});
  // ReportError, and with fate-sharing on, exit shortly after: for a
  // process that is stuck for good (a collective that can never complete).
  void FailThisProcess(const std::string& reason, const std::vector<int>& blamed = {});

  // Runs once, on the thread that learns of the failure, before any exit.
  int AddFailureCallback(std::function<void(const Status&)> callback);
  void RemoveFailureCallback(int id);
  // Runs when another process enters the shutdown barrier (it finished), on
  // the reader thread: collectives that wait for it can never complete.
  void AddPeerShutdownCallback(std::function<void(int process_id)> callback);
  // Processes known to have entered shutdown.
  std::vector<int> finished_peers();
  // The job's failure, once known.
  std::optional<Status> failure();
  double heartbeat_timeout_s() const { return heartbeat_timeout_s_; }
  // This end's address on the connection to the service: an address that
  // the route to the coordinator leaves from, so peers can usually reach it.
  std::string local_address() const { return socket_.LocalAddress(); }

 private:
  struct Pending {
    bool done = false;
    Status status;
    std::string payload;
  };

  CoordinationClient(const ClientOptions& options, Socket socket);
  Status Hello();
  // `what` names the call in errors: a failure that interrupts it says what
  // this process was waiting for.
  // `during_failure`: the call is one that leads out of a failure (the
  // agreement), so a failure neither refuses nor interrupts it.
  StatusOr<std::string> Call(const std::string& what, std::string frame, uint32_t request_id, double timeout_s,
                             bool during_failure = false);
  uint32_t NextRequestId() { return next_request_id_++; }
  void ReaderLoop();
  void HeartbeatLoop();
  void OnFailure(const Status& status);
  void ExitSoon();
  void StopThreads();

  const ClientOptions options_;
  Socket socket_;
  std::mutex write_mu_;
  std::atomic<uint32_t> next_request_id_{1};
  double heartbeat_interval_s_ = 1;
  double heartbeat_timeout_s_ = 10;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint32_t, Pending*> pending_;
  std::optional<Status> failure_;
  uint64_t epoch_ = 0;
  bool shut_down_ = false;
  bool stopping_ = false;
  // Once this process asked to shut down, the coordinator closing the
  // connection is the expected end, not a failure.
  bool shutdown_requested_ = false;
  bool connection_lost_ = false;
  std::chrono::steady_clock::time_point last_heard_;
  std::map<int, std::function<void(const Status&)>> callbacks_;
  std::vector<std::function<void(int)>> peer_shutdown_callbacks_;
  std::vector<int> finished_peers_;
  int next_callback_id_ = 1;

  std::thread reader_;
  std::thread heartbeat_;
};

}  // namespace myplugin::coordination
