// The service's life: Start (checks, the listener, its threads), Stop's orderly close,
// Restart's fresh state for the job's next attempt, and the queries under the state lock.
#include "coordination/service.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "common/tcp_links.h"
#include "coordination/service_io.h"

namespace myplugin::coordination {

namespace {

// Raises the soft limit on descriptors towards `want` (up to the hard
// limit: the service holds one per connection); an error when even the
// hard limit leaves no room for `need`.
Status EnsureDescriptors(rlim_t need, rlim_t want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return OkStatus();
  if (rl.rlim_cur < want) {
    rlimit raised = rl;
    raised.rlim_cur = std::min(want, rl.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (rl.rlim_cur >= need) return OkStatus();
  return Status(Code::kResourceExhausted,
                "the myplugin coordinator needs " + std::to_string(need) + " file descriptors (one per process of the job, "
                "and a few), and this process may open " + std::to_string(rl.rlim_cur) + " (its hard limit, ulimit -Hn, is " +
                std::to_string(rl.rlim_max) + "): raise it, e.g. ulimit -n " + std::to_string(need));
}

}  // namespace

StatusOr<std::unique_ptr<CoordinationService>> CoordinationService::Start(const std::string& bind_host, int port,
                                                                          const ServiceOptions& options_in) {
  ServiceOptions options = options_in;
  if (options.max_connections == 0) options.max_connections = MaxConnectionsFor(options.num_processes);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (options.io_threads == 0) options.io_threads = IoThreadsFor(options.num_processes, cores);
  if (options.io_threads < 1 || options.io_threads > kMaxIoThreads) {
    return InvalidArgument("io_threads must be between 1 and " + std::to_string(kMaxIoThreads) + " (or 0 for " +
                           std::to_string(IoThreadsFor(options.num_processes, cores)) +
                           ", the default for this job), got " + std::to_string(options.io_threads));
  }
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
  MYPLUGIN_RETURN_IF_ERROR(EnsureDescriptors(static_cast<rlim_t>(options.num_processes) + kSpareDescriptors,
                                             static_cast<rlim_t>(options.max_connections) + kSpareDescriptors));
  StatusOr<Socket> listener = Socket::Listen(bind_host, port);
  if (!listener.ok()) return listener.status();
  int bound = listener.value().LocalPort();
  const bool v6 = listener.value().IsIPv6();
  std::unique_ptr<CoordinationService> service(new CoordinationService(bound, options));
  asio::error_code ec;
  Socket fd = listener.take();
  service->listener_->acceptor.assign(v6 ? tcp::v6() : tcp::v4(), fd.fd(), ec);
  if (ec) return Internal("cannot serve the coordinator's listening socket: " + ec.message());
  fd.Release();  // the acceptor owns it now
  service->AcceptNext();
  for (auto& loop : service->loops_) loop->thread = std::thread([l = loop.get()] { l->io.run(); });
  service->monitor_thread_ = std::thread([s = service.get()] { s->MonitorLoop(); });
  return service;
}

CoordinationService::CoordinationService(int port, const ServiceOptions& options)
    : options_(options), port_(port), state_(options) {
  for (int i = 0; i < options_.io_threads; ++i) loops_.push_back(std::make_unique<Loop>(loops_.size()));
  listener_ = std::make_unique<Listener>(loops_.front()->io);
  // Under mu_, like every call into the state: a connection still in
  // connections_ has its socket open (EndMember erases it before closing).
  state_.set_link_describer([this](ConnectionId id, int process) -> std::string {
    auto it = connections_.find(id);
    if (it == connections_.end()) return "";
    return DescribeTcpSocket("process " + std::to_string(process), it->second->socket.native_handle(),
                             "the coordinator");
  });
}

CoordinationService::~CoordinationService() { Stop(); }

void CoordinationService::Stop() {
  if (stopping_.exchange(true)) return;
  if (monitor_thread_.joinable()) monitor_thread_.join();
  // No more connections; the peers still saying Hello end on their
  // deadlines or with the loop.
  asio::post(loops_.front()->io, [this] {
    asio::error_code ignored;
    listener_->acceptor.close(ignored);
    listener_->backoff.cancel();
  });
  std::unordered_map<ConnectionId, std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    conns.swap(connections_);
  }
  // An orderly close while the loop still runs: replies already queued
  // (the shutdown barrier's release above all: the host stops its service
  // as soon as its own barrier returns) still go out; then each peer gets
  // end of stream after them and closes its side. Closing while a peer's
  // frames sit unread would reset the connection and could destroy a reply
  // the peer has not read yet. The replies' wait is bounded by progress, as
  // a peer's sends are while the service runs: a peer that reads slowly
  // (megabytes of replies on a loaded machine) still gets its release; one
  // that reads nothing for the send-progress bound is given up on.
  const auto stall = std::chrono::duration<double>(ServiceState::SendProgressTimeoutSeconds(options_.heartbeat_timeout_s));
  for (auto& [id, c] : conns) {
    size_t left = c->queue.bytes();
    auto last_progress = std::chrono::steady_clock::now();
    while (!c->finished.load() && left > 0 && std::chrono::steady_clock::now() - last_progress < stall) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const size_t now_left = c->queue.bytes();
      if (now_left < left) last_progress = std::chrono::steady_clock::now();
      left = now_left;
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  auto wait_until = [&](const std::function<bool()>& done) {
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  for (auto& loop : loops_) {
    asio::post(loop->io, [&conns, l = loop.get()] {
      asio::error_code ignored;
      for (auto& [id, c] : conns) {
        if (c->loop == l) c->socket.shutdown(tcp::socket::shutdown_send, ignored);
      }
    });
  }
  // After the shutdown barrier every member closes its side; otherwise
  // (a failed job) nobody is waited for.
  if (all_departed()) {
    for (auto& [id, c] : conns) wait_until([&c = c] { return c->finished.load(); });
  }
  for (auto& loop : loops_) loop->io.stop();
  for (auto& loop : loops_) {
    if (loop->thread.joinable()) loop->thread.join();
  }
  for (auto& [id, c] : conns) c->queue.Abort();
  conns.clear();
  std::vector<std::unique_ptr<Loop>> loops;
  std::unique_ptr<Listener> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    loops.swap(loops_);
    listener.swap(listener_);
  }
  // Their destruction closes every socket and ends the handlers still
  // pending: each loop's handlers hold only its own connections.
  listener.reset();
  loops.clear();
}

Status CoordinationService::Restart(const std::string& token, int num_processes) {
  if (num_processes < 1 || num_processes > options_.max_connections) {
    return InvalidArgument("a restart needs between 1 and " + std::to_string(options_.max_connections) +
                           " processes, got " + std::to_string(num_processes));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return FailedPrecondition("the coordination service has stopped");
  ServiceOptions next = state_.options();
  if (token == next.token) return InvalidArgument("a restart needs a new token");
  next.earlier_tokens.push_back(next.token);
  next.token = token;
  next.num_processes = num_processes;
  next.attempt += 1;
  state_ = ServiceState(next);
  // Their ends then reach the new state, which does not know them.
  for (auto& [id, c] : connections_) CloseOnLoop(c);
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

bool CoordinationService::failure_self_reported() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.failure_self_reported();
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
  std::lock_guard<std::mutex> lock(mu_);
  Outbox out;
  const ConnectionId conn = state_.OnProcessEnded(pid, how, out);
  Deliver(out);
  auto it = connections_.find(conn);
  // Its end then reaches a state that has let go of it.
  if (conn && it != connections_.end()) CloseOnLoop(it->second);
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
