// The service's life: Start (checks, the listener, its threads), Stop's orderly close,
// Restart's fresh state for the job's next attempt, and the queries under the state lock.
#include "coordination/service.h"

#include <chrono>
#include <functional>
#include <thread>

#include "coordination/service_io.h"

namespace myplugin::coordination {

StatusOr<std::unique_ptr<CoordinationService>> CoordinationService::Start(const std::string& bind_host, int port,
                                                                          const ServiceOptions& options) {
  if (options.num_processes < 1) {
    return InvalidArgument("num_processes must be at least 1, got " + std::to_string(options.num_processes));
  }
  if (!(options.heartbeat_timeout_s > 0) || !(options.initialization_timeout_s > 0)) {
    return InvalidArgument("heartbeat and initialization timeouts must be positive");
  }
  if (options.max_connections < options.num_processes) {
    return InvalidArgument("max_connections (" + std::to_string(options.max_connections) +
                           ") must be at least the number of processes (" + std::to_string(options.num_processes) +
                           ")");
  }
  StatusOr<Socket> listener = Socket::Listen(bind_host, port);
  if (!listener.ok()) return listener.status();
  int bound = listener.value().LocalPort();
  const bool v6 = listener.value().IsIPv6();
  std::unique_ptr<CoordinationService> service(new CoordinationService(bound, options));
  asio::error_code ec;
  Socket fd = listener.take();
  service->loop_->acceptor.assign(v6 ? tcp::v6() : tcp::v4(), fd.fd(), ec);
  if (ec) return Internal("cannot serve the coordinator's listening socket: " + ec.message());
  fd.Release();  // the acceptor owns it now
  service->AcceptNext();
  service->ReapEvery();
  service->loop_thread_ = std::thread([s = service.get()] { s->loop_->io.run(); });
  service->monitor_thread_ = std::thread([s = service.get()] { s->MonitorLoop(); });
  return service;
}

CoordinationService::CoordinationService(int port, const ServiceOptions& options)
    : options_(options), port_(port), loop_(std::make_unique<Loop>()), state_(options) {}

CoordinationService::~CoordinationService() { Stop(); }

void CoordinationService::Stop() {
  if (stopping_.exchange(true)) return;
  // The event loop first: no more connections, and the peers still saying
  // Hello are closed (their handlers, which own them, are destroyed with it).
  loop_->io.stop();
  if (loop_thread_.joinable()) loop_thread_.join();
  loop_.reset();
  if (monitor_thread_.joinable()) monitor_thread_.join();
  std::map<ConnectionId, std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    conns.swap(connections_);
  }
  // An orderly close, bounded in time: replies already queued (the
  // shutdown barrier's release above all: the host stops its service as
  // soon as its own barrier returns) still go out; then each peer gets end
  // of stream after them and closes its side. Closing while a peer's
  // frames sit unread would reset the connection and could destroy a
  // reply the peer has not read yet.
  // The replies' wait is bounded by progress, as a peer's sends are while
  // the service runs: a peer that reads slowly (megabytes of replies on a
  // loaded machine) still gets its release; one that reads nothing for the
  // send-progress bound is given up on.
  const auto stall = std::chrono::duration<double>(ServiceState::SendProgressTimeoutSeconds(options_.heartbeat_timeout_s));
  for (auto& [id, c] : conns) {
    size_t left = c->queue.bytes();
    auto last_progress = std::chrono::steady_clock::now();
    while (left > 0 && std::chrono::steady_clock::now() - last_progress < stall) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const size_t now_left = c->queue.bytes();
      if (now_left < left) last_progress = std::chrono::steady_clock::now();
      left = now_left;
    }
  }
  for (auto& [id, c] : conns) c->socket.ShutdownWrite();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  auto wait_until = [&](const std::function<bool()>& done) {
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  // After the shutdown barrier every member closes its side; otherwise
  // (a failed job) nobody is waited for.
  if (all_departed()) {
    for (auto& [id, c] : conns) wait_until([&c = c] { return c->finished.load(); });
  }
  for (auto& [id, c] : conns) {
    c->Close();
  }
  for (auto& [id, c] : conns) {
    if (c->reader.joinable()) c->reader.join();
    if (c->writer.joinable()) c->writer.join();
  }
}

Status CoordinationService::Restart(const std::string& token, int num_processes) {
  if (num_processes < 1 || num_processes > options_.max_connections) {
    return InvalidArgument("a restart needs between 1 and " + std::to_string(options_.max_connections) +
                           " processes, got " + std::to_string(num_processes));
  }
  std::vector<std::shared_ptr<Connection>> earlier;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return FailedPrecondition("the coordination service has stopped");
    ServiceOptions next = state_.options();
    if (token == next.token) return InvalidArgument("a restart needs a new token");
    next.earlier_tokens.push_back(next.token);
    next.token = token;
    next.num_processes = num_processes;
    next.attempt += 1;
    state_ = ServiceState(next);
    for (auto& [id, c] : connections_) earlier.push_back(c);
  }
  // Their readers then report to the new state, which does not know them.
  for (auto& c : earlier) {
    c->Close();
  }
  return OkStatus();
}

int CoordinationService::attempt() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.options().attempt;
}

std::optional<Status> CoordinationService::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.failure();
}

int CoordinationService::failed_process() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.failed_process();
}

bool CoordinationService::all_departed() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.all_departed();
}

bool CoordinationService::recoverable() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.recoverable();
}

void CoordinationService::ExpectRejoin(int pid, bool expected) {
  std::lock_guard<std::mutex> lock(mu_);
  Outbox out;
  state_.ExpectRejoin(pid, expected, out);
  Deliver(out);
}

void CoordinationService::ProcessEnded(int pid, const std::string& how) {
  std::shared_ptr<Connection> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Outbox out;
    const ConnectionId conn = state_.OnProcessEnded(pid, how, out);
    Deliver(out);
    auto it = connections_.find(conn);
    if (conn && it != connections_.end()) dropped = it->second;
  }
  // Its reader then sees the end and reports to a state that has let go of it.
  if (dropped) dropped->Close();
}

std::vector<uint64_t> CoordinationService::failures_per_process() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.failures_per_process();
}

uint64_t CoordinationService::epoch() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.epoch();
}

}  // namespace myplugin::coordination
