#include "collectives/transfer_endpoint.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "collectives/defaults.h"
#include "collectives/fd_passing.h"
#include "collectives/flight_recorder.h"
#include "collectives/process_runtime.h"
#include "common/deadline.h"
#include "common/tcp_links.h"

namespace myplugin::collectives {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x31524658;  // "XFR1"
constexpr size_t kSecretBytes = 32;            // RandomToken's
constexpr size_t kHelloBytes = 4 + 4 + 8 + kSecretBytes + 4;
constexpr uint32_t kHelloRing = 1;  // the hello's flag: a ring's descriptor follows
// Pieces in a ring between two processes of one host: one being filled,
// one being taken, and two more to cover the jitter between them.
constexpr size_t kRingSlots = 4;
constexpr size_t kRingBytes = kRingSlots * kTransferPieceBytes;
// How long an accepted connection may take to say who it is.
constexpr double kHelloTimeoutS = 10;
// The longest header or reply; anything longer is a broken peer.
constexpr uint32_t kMaxControlBytes = 1 << 20;
// How often a blocked wait looks at the abort and stop flags.
constexpr auto kSlice = std::chrono::milliseconds(200);

// A transfer that waited its stall bound on `peer` (`idle`: "took no data"
// or "sent no data"), with what its connection `fd` says of the link
// (common/tcp_links.h; nothing for one on this host's Unix socket).
std::string Stalled(const std::string& what, const std::string& peer, const char* idle, double stall_s, int fd) {
  const std::string link = DescribeTcpSocket(peer, fd);
  return what + ": " + peer + " " + idle + " for " + SecondsText(stall_s) +
         " (MYPLUGIN_COLLECTIVE_STALL_SECONDS): stopped, stuck, or its link is down" + (link.empty() ? "" : "; " + link);
}

// kRingPiece: the next ring slot holds `length` bytes (nothing follows on
// the socket); kSlotFree: the receiver took the oldest one.
enum FrameType : uint32_t { kHeader = 1, kReply = 2, kPiece = 3, kSenderFailed = 4, kRingPiece = 5, kSlotFree = 6 };

std::string AddressKey(uint64_t epoch, int process) {
  return "myplugin/transfers/" + std::to_string(epoch) + "/" + std::to_string(process);
}

// A ring's mapping, unmapped with its owner.
struct Mapping {
  char* base = nullptr;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { Reset(); }
  void Reset() {
    if (base != nullptr) ::munmap(base, kRingBytes);
    base = nullptr;
  }
  Status Map(int fd) {
    void* p = ::mmap(nullptr, kRingBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return Errno("mapping a transfer ring");
    base = static_cast<char*>(p);
    return OkStatus();
  }
  char* slot(uint64_t piece) const { return base + (piece % kRingSlots) * kTransferPieceBytes; }
};

void Put(std::string& out, const void* v, size_t n) { out.append(static_cast<const char*>(v), n); }

template <typename T>
bool Take(const std::string& in, size_t& at, T* v) {
  if (at > in.size() || in.size() - at < sizeof(T)) return false;
  std::memcpy(v, in.data() + at, sizeof(T));
  at += sizeof(T);
  return true;
}

std::string EncodeSpec(const TransferSpec& s) {
  std::string out;
  const uint32_t n = static_cast<uint32_t>(s.dims.size());
  Put(out, &s.key, 8);
  Put(out, &s.src_device, 4);
  Put(out, &s.dst_device, 4);
  Put(out, &s.element_type, 4);
  Put(out, &n, 4);
  for (int64_t d : s.dims) Put(out, &d, 8);
  Put(out, &s.bytes, 8);
  return out;
}

StatusOr<TransferSpec> DecodeSpec(const std::string& in) {
  TransferSpec s;
  uint32_t n = 0;
  size_t at = 0;
  if (!Take(in, at, &s.key) || !Take(in, at, &s.src_device) || !Take(in, at, &s.dst_device) ||
      !Take(in, at, &s.element_type) || !Take(in, at, &n) || n > 64) {
    return DataLoss("a transfer header is malformed");
  }
  s.dims.resize(n);
  for (auto& d : s.dims) {
    if (!Take(in, at, &d)) return DataLoss("a transfer header is malformed");
  }
  if (!Take(in, at, &s.bytes) || at != in.size()) return DataLoss("a transfer header is malformed");
  return s;
}

std::string EncodeReply(const Status& st) {
  std::string out;
  const uint32_t code = static_cast<uint32_t>(st.code());
  Put(out, &code, 4);
  out += st.message();
  return out;
}

Status DecodeReply(const std::string& in) {
  uint32_t code = 0;
  size_t at = 0;
  if (!Take(in, at, &code)) return DataLoss("a transfer reply is malformed");
  if (code == 0) return OkStatus();
  return Status(static_cast<Code>(code), in.substr(at));
}

// Socket I/O in slices, so that a wait sees `stop` (abort or shutdown)
// within kSlice; `bound_s` < 0 waits for ever, else that long without
// progress. `peer_spoke` (for a sender's writes): the peer sent something
// while we wrote, which the caller reads.
struct Io {
  int fd;
  std::function<std::optional<Status>()> stop;

  Status Wait(short events, Clock::time_point deadline, bool forever, short* revents) {
    while (true) {
      if (std::optional<Status> st = stop()) return *st;
      const auto now = Clock::now();
      if (!forever && now >= deadline) return Status(Code::kDeadlineExceeded, "timed out");
      auto slice = forever ? kSlice : std::min<Clock::duration>(kSlice, deadline - now);
      pollfd p{fd, events, 0};
      int r = ::poll(&p, 1, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(slice).count()) + 1);
      if (r < 0 && errno != EINTR) return Status(Code::kUnavailable, std::string("poll: ") + std::strerror(errno));
      if (r > 0) {
        *revents = p.revents;
        return OkStatus();
      }
    }
  }

  Status ReadAll(char* out, size_t n, double bound_s) {
    auto deadline = After(bound_s);
    while (n > 0) {
      short ev = 0;
      MYPLUGIN_RETURN_IF_ERROR(Wait(POLLIN, deadline, bound_s < 0, &ev));
      ssize_t r = ::recv(fd, out, n, 0);
      if (r == 0) return Status(Code::kUnavailable, "the connection closed");
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return Status(Code::kUnavailable, std::string("the connection failed: ") + std::strerror(errno));
      }
      out += r;
      n -= static_cast<size_t>(r);
      deadline = After(bound_s);
    }
    return OkStatus();
  }

  Status WriteAll(const char* data, size_t n, double bound_s, bool* peer_spoke = nullptr) {
    auto deadline = After(bound_s);
    while (n > 0) {
      short ev = 0;
      MYPLUGIN_RETURN_IF_ERROR(Wait(peer_spoke ? POLLOUT | POLLIN : POLLOUT, deadline, bound_s < 0, &ev));
      if (peer_spoke && (ev & POLLIN)) {
        *peer_spoke = true;
        return OkStatus();
      }
      ssize_t r = ::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return Status(Code::kUnavailable, std::string("the connection failed: ") + std::strerror(errno));
      }
      data += r;
      n -= static_cast<size_t>(r);
      deadline = After(bound_s);
    }
    return OkStatus();
  }

  Status WriteFrame(uint32_t type, const std::string& payload, double bound_s) {
    std::string frame;
    const uint32_t n = static_cast<uint32_t>(payload.size());
    Put(frame, &type, 4);
    Put(frame, &n, 4);
    frame += payload;
    return WriteAll(frame.data(), frame.size(), bound_s);
  }

  // A frame's type and length.
  Status ReadFrameHead(uint32_t* type, uint32_t* n, double bound_s) {
    char head[8];
    MYPLUGIN_RETURN_IF_ERROR(ReadAll(head, 8, bound_s));
    std::memcpy(type, head, 4);
    std::memcpy(n, head + 4, 4);
    return OkStatus();
  }

  Status ReadControl(uint32_t* type, std::string* payload, double bound_s) {
    uint32_t n = 0;
    MYPLUGIN_RETURN_IF_ERROR(ReadFrameHead(type, &n, bound_s));
    if (n > kMaxControlBytes) return DataLoss("a transfer frame of " + std::to_string(n) + " bytes is malformed");
    payload->resize(n);
    return ReadAll(payload->data(), n, bound_s);
  }
};

Signature SignatureOf(CollectiveOp op, const TransferSpec& spec) {
  Signature sig;
  sig.op = op;
  sig.dtype = DataType::kU8;
  sig.count = spec.bytes;
  // Both sides' records name the same call, as a collective's do, so that
  // the straggler report matches them.
  sig.group_hash = HashInts({spec.src_device, spec.dst_device});
  sig.sequence = static_cast<uint64_t>(spec.key);
  return sig;
}

// After a write to the receiver failed: what it said before it closed, if
// anything (its reason for giving up, behind any slots it freed).
std::optional<Status> ReceiverSaid(Io& io) {
  for (int frames = 0; frames < static_cast<int>(kRingSlots) + 1; ++frames) {
    uint32_t type = 0;
    std::string payload;
    if (!io.ReadControl(&type, &payload, 0.5).ok()) return std::nullopt;
    if (type == kReply) {
      Status why = DecodeReply(payload);
      if (!why.ok()) return why;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string TransferSpec::Name() const {
  return "transfer " + std::to_string(key) + " from device " + std::to_string(src_device) + " to device " +
         std::to_string(dst_device);
}

std::string TransferSpec::Shape() const {
  std::string s = "type " + std::to_string(element_type) + " [";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "] (" + std::to_string(bytes) + " bytes)";
}

struct TransferEndpoint::SendJob {
  TransferSpec spec;
  PieceSource source;
  std::function<void(const Status&)> done;
  uint64_t record = 0;
};

struct TransferEndpoint::Outgoing {
  int process = 0;
  coordination::Socket socket;  // connected, hello sent; invalid until the first send (and after a failure)
  std::deque<SendJob> queue;    // under mu_
  std::unique_ptr<char[]> scratch;
  Mapping ring;               // on one host: pieces go through it
  uint64_t ring_pieces = 0;   // pieces sent through it so far
  std::thread thread;
};

struct TransferEndpoint::Incoming {
  coordination::Socket socket;
  int process = -1;
  bool finished = false;  // under mu_
  std::unique_ptr<char[]> scratch;
  Mapping ring;
  uint64_t ring_pieces = 0;
  std::thread thread;
};

class TransferEndpoint::Receive {
 public:
  enum class State { kPosted, kMatched, kDone };
  int src_process = 0;
  TransferSpec expected;
  PieceSink sink;
  char* landing = nullptr;
  State state = State::kPosted;  // under the endpoint's mu_
  Status status;                 // under the endpoint's mu_
  Clock::time_point posted_at;
  uint64_t record = 0;
};

StatusOr<std::unique_ptr<TransferEndpoint>> TransferEndpoint::Create(
    std::shared_ptr<coordination::CoordinationClient> client, uint64_t epoch, int my_process, int num_processes,
    const std::string& listen_host, std::vector<bool> same_host, WaitLimits limits) {
  StatusOr<coordination::Socket> listener = coordination::Socket::Listen(listen_host, 0);
  if (!listener.ok()) {
    return Status(listener.status().code(), "opening this process's transfer endpoint at " + listen_host +
                                                " failed: " + listener.status().message());
  }
  const int port = listener.value().LocalPort();
  // The Unix socket's name is visible on the host (/proc/net/unix): not the secret.
  const std::string unix_name = "myplugin-transfers-" + RandomToken();
  Fd unix_listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  socklen_t len;
  sockaddr_un addr = AbstractAddress(unix_name, &len);
  if (unix_listener.get() < 0 || ::bind(unix_listener.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(unix_listener.get(), 64) != 0) {
    return Errno("opening this process's transfer endpoint for processes of its host");
  }
  std::string secret = RandomToken();
  std::unique_ptr<TransferEndpoint> endpoint(new TransferEndpoint(client, epoch, my_process, num_processes, limits,
                                                                  listener.take(), std::move(unix_listener),
                                                                  secret, std::move(same_host)));
  MYPLUGIN_RETURN_IF_ERROR(client->KeyValueSet(
      AddressKey(epoch, my_process), secret + "\n" + listen_host + "\n" + std::to_string(port) + "\n" + unix_name));
  return endpoint;
}

TransferEndpoint::TransferEndpoint(std::shared_ptr<coordination::CoordinationClient> client, uint64_t epoch, int me,
                                   int n, WaitLimits limits, coordination::Socket listener, Fd unix_listener,
                                   std::string secret, std::vector<bool> same_host)
    : client_(std::move(client)),
      epoch_(epoch),
      me_(me),
      n_(n),
      limits_(limits),
      listener_(std::move(listener)),
      unix_listener_(std::move(unix_listener)),
      secret_(std::move(secret)),
      same_host_(std::move(same_host)) {
  for (int p = 0; p < n_; ++p) {
    auto out = std::make_unique<Outgoing>();
    out->process = p;
    outgoing_.push_back(std::move(out));
  }
  // Sender threads start with their first send.
  acceptor_ = std::thread([this] { AcceptLoop(); });
  failure_callback_ = client_->AddFailureCallback([this](const Status& why) { Abort(why); });
}

TransferEndpoint::~TransferEndpoint() {
  client_->RemoveFailureCallback(failure_callback_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& in : incoming_) in->socket.ShutdownBoth();
    for (auto& out : outgoing_) out->socket.ShutdownBoth();
  }
  cv_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  for (auto& out : outgoing_) {
    if (out->thread.joinable()) out->thread.join();
  }
  for (auto& in : incoming_) {
    if (in->thread.joinable()) in->thread.join();
  }
  (void)client_->KeyValueDelete(AddressKey(epoch_, me_));
}

std::optional<Status> TransferEndpoint::aborted() {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return aborted_;
  if (stopping_) return Status(Code::kCancelled, "this process's transfer endpoint closed");
  return std::nullopt;
}

void TransferEndpoint::Abort(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = why;
    for (auto& in : incoming_) in->socket.ShutdownBoth();
    for (auto& out : outgoing_) out->socket.ShutdownBoth();
  }
  cv_.notify_all();
}

Status TransferEndpoint::WithCause(const Status& st, int process) {
  const auto deadline = After(kFailureNoticeWaitS);
  while (true) {
    if (std::optional<Status> failure = client_->failure()) {
      return Status(st.code() == Code::kDeadlineExceeded ? Code::kAborted : st.code(),
                    st.message() + ": " + failure->message())
          .WithFailureOf(*failure);
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return st.WithFailure({FailureKind::kPeerFailure, {process}, "", -1});
}

// ---- Sending ----

void TransferEndpoint::Send(int dst, const TransferSpec& spec, PieceSource source,
                            std::function<void(const Status&)> done) {
  if (dst < 0 || dst >= n_ || dst == me_) {
    done(InvalidArgument(spec.Name() + ": process " + std::to_string(dst) + " is not another process of the job"));
    return;
  }
  SendJob job{spec, std::move(source), std::move(done), 0};
  job.record = ProcessRuntime::Get().flight_recorder().Begin(SignatureOf(CollectiveOp::kSend, spec), {me_, dst},
                                                             nullptr, FunctionScope::Current());
  Outgoing* out = outgoing_[dst].get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    out->queue.push_back(std::move(job));
    if (!out->thread.joinable()) out->thread = std::thread([this, out] { SendLoop(out); });
  }
  cv_.notify_all();
}

void TransferEndpoint::SendLoop(Outgoing* out) {
  out->scratch.reset(new char[kTransferPieceBytes]);
  while (true) {
    SendJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // After an abort, the connection and its ring go at once: nothing of
      // a failed job (or peer) is kept.
      cv_.wait(lock, [&] { return stopping_ || !out->queue.empty() || (aborted_ && out->socket.valid()); });
      if (aborted_ && out->socket.valid()) {
        out->socket = coordination::Socket();
        out->ring.Reset();
      }
      if (out->queue.empty()) {
        if (stopping_) return;
        continue;
      }
      job = std::move(out->queue.front());
      out->queue.pop_front();
    }
    Status st;
    if (std::optional<Status> stop = aborted()) {
      st = Status(Code::kAborted, "sending " + job.spec.Name() + " to process " + std::to_string(out->process) +
                                      " was aborted: " + stop->message())
               .WithFailureOf(*stop);
    } else {
      st = RunSend(out, job);
    }
    ProcessRuntime::Get().flight_recorder().End(job.record, st.ok());
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      out->socket = coordination::Socket();  // out of step: the next send connects anew
      out->ring.Reset();
    }
    if (!st.ok()) {
      std::fprintf(stderr, "myplugin: %s\n", st.message().c_str());
    }
    job.done(st);
  }
}

Status TransferEndpoint::Connect(Outgoing* out) {
  StatusOr<std::string> published = client_->KeyValueGet(AddressKey(epoch_, out->process), limits_.arrival_s);
  if (!published.ok()) {
    return Status(published.status().code(), "process " + std::to_string(out->process) +
                                                 " published no transfer endpoint: " + published.status().message());
  }
  const std::string& v = published.value();
  const size_t a = v.find('\n'), b = v.find('\n', a + 1);
  if (a == std::string::npos || b == std::string::npos) return DataLoss("a published transfer endpoint is malformed");
  const size_t c = v.find('\n', b + 1);
  if (c == std::string::npos) return DataLoss("a published transfer endpoint is malformed");
  const std::string secret = v.substr(0, a), host = v.substr(a + 1, b - a - 1), unix_name = v.substr(c + 1);
  const int port = std::atoi(v.c_str() + b + 1);
  const bool local = same_host_[out->process];
  coordination::Socket socket;
  if (local) {
    socket = coordination::Socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    socklen_t len;
    sockaddr_un addr = AbstractAddress(unix_name, &len);
    if (!socket.valid() || ::connect(socket.fd(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      return Errno("connecting to process " + std::to_string(out->process) +
                   "'s transfer endpoint on this host (its host identity says it shares this network namespace)");
    }
  } else {
    StatusOr<coordination::Socket> connected = coordination::Socket::Connect(host, port, limits_.arrival_s);
    if (!connected.ok()) {
      return Status(connected.status().code(), "connecting to process " + std::to_string(out->process) +
                                                   "'s transfer endpoint at " + host + ":" + std::to_string(port) +
                                                   " failed: " + connected.status().message());
    }
    socket = connected.take();
  }
  std::string hello;
  const uint32_t magic = kHelloMagic, me = static_cast<uint32_t>(me_), flags = local ? kHelloRing : 0;
  Put(hello, &magic, 4);
  Put(hello, &me, 4);
  Put(hello, &epoch_, 8);
  hello += secret;
  Put(hello, &flags, 4);
  Io io{socket.fd(), [this] { return aborted(); }};
  MYPLUGIN_RETURN_IF_ERROR(io.WriteAll(hello.data(), hello.size(), limits_.stall_s));
  out->ring.Reset();
  out->ring_pieces = 0;
  if (local) {
    Fd ring(::memfd_create("myplugin-transfer-ring", MFD_CLOEXEC));
    if (ring.get() < 0) return Errno("memfd_create");
    if (::ftruncate(ring.get(), static_cast<off_t>(kRingBytes)) != 0) return Errno("sizing a transfer ring");
    // Reserved now: a later shortage would be a SIGBUS mid-transfer.
    if (int e = ::posix_fallocate(ring.get(), 0, static_cast<off_t>(kRingBytes)); e != 0) {
      errno = e;
      return Errno("reserving " + std::to_string(kRingBytes >> 20) + " MiB of shared memory for a transfer ring");
    }
    MYPLUGIN_RETURN_IF_ERROR(out->ring.Map(ring.get()));
    MYPLUGIN_RETURN_IF_ERROR(SendFd(socket.fd(), ring.get(), kRingBytes));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    out->socket = std::move(socket);
    if (aborted_ || stopping_) out->socket.ShutdownBoth();
  }
  return OkStatus();
}

Status TransferEndpoint::RunSend(Outgoing* out, SendJob& job) {
  const TransferSpec& spec = job.spec;
  const std::string peer = "process " + std::to_string(out->process);
  const std::string what = "sending " + spec.Name() + " (" + spec.Shape() + ") to " + peer;
  auto fail = [&](const Status& st) { return Status(st.code(), what + " failed: " + st.message()); };
  if (!out->socket.valid()) {
    if (Status st = Connect(out); !st.ok()) return fail(st);
  }
  Io io{out->socket.fd(), [this] { return aborted(); }};
  // A stop (abort) wins over the broken connection it causes.
  auto lost = [&](const Status& st) {
    if (std::optional<Status> stop = aborted()) {
      return Status(Code::kAborted, what + " was aborted: " + stop->message()).WithFailureOf(*stop);
    }
    return WithCause(fail(st), out->process);
  };
  if (Status st = io.WriteFrame(kHeader, EncodeSpec(spec), limits_.stall_s); !st.ok()) return lost(st);
  // The receiver answers once it posted the receive.
  uint32_t type = 0;
  std::string payload;
  if (Status st = io.ReadControl(&type, &payload, limits_.arrival_s); !st.ok()) {
    if (st.code() == Code::kDeadlineExceeded) {
      return Status(Code::kDeadlineExceeded, what + ": " + peer + " did not take it within " +
                                                 SecondsText(limits_.arrival_s) +
                                                 " (MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS): stopped, stuck, or "
                                                 "running other code")
          .WithFailure({FailureKind::kTimeout, {out->process}, "send", spec.key});
    }
    return lost(st);
  }
  if (type != kReply) return fail(DataLoss("the receiver answered with a frame of type " + std::to_string(type)));
  if (Status reply = DecodeReply(payload); !reply.ok()) {
    FailureKind kind = reply.code() == Code::kInvalidArgument ? FailureKind::kMismatch : FailureKind::kNone;
    return Status(reply.code(), what + ": " + peer + " refused it: " + reply.message())
        .WithFailure({kind, {out->process}, "send", spec.key});
  }
  ProcessRuntime::Get().flight_recorder().Matched(job.record);
  return out->ring.base != nullptr ? StreamThroughRing(out, job, what, lost) : StreamOverSocket(out, job, what, lost);
}

Status TransferEndpoint::StreamOverSocket(Outgoing* out, SendJob& job, const std::string& what,
                                          const std::function<Status(const Status&)>& lost) {
  const TransferSpec& spec = job.spec;
  const std::string peer = "process " + std::to_string(out->process);
  auto fail = [&](const Status& st) { return Status(st.code(), what + " failed: " + st.message()); };
  Io io{out->socket.fd(), [this] { return aborted(); }};
  uint32_t type = 0;
  std::string payload;
  uint64_t offset = 0;
  do {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kTransferPieceBytes, spec.bytes - offset));
    StatusOr<const char*> piece = n > 0 ? job.source(offset, n, out->scratch.get()) : StatusOr<const char*>(nullptr);
    if (!piece.ok()) {
      // Tell the receiver why no more bytes come.
      (void)io.WriteFrame(kSenderFailed, EncodeReply(piece.status()), limits_.stall_s);
      return fail(piece.status());
    }
    std::string head;
    const uint32_t t = kPiece, len = static_cast<uint32_t>(n);
    Put(head, &t, 4);
    Put(head, &len, 4);
    bool receiver_spoke = false;
    Status st = io.WriteAll(head.data(), head.size(), limits_.stall_s, &receiver_spoke);
    if (st.ok() && !receiver_spoke && n > 0) st = io.WriteAll(piece.value(), n, limits_.stall_s, &receiver_spoke);
    if (st.ok() && receiver_spoke) {
      // The receiver gave up mid-transfer and says why (or closed).
      st = io.ReadControl(&type, &payload, limits_.stall_s);
      if (st.ok()) {
        Status why = DecodeReply(payload);
        return Status(why.ok() ? Code::kAborted : why.code(), what + ": " + peer + " gave up: " + why.message())
            .WithFailure({FailureKind::kPeerFailure, {out->process}, "send", spec.key});
      }
    }
    if (!st.ok()) {
      if (st.code() == Code::kDeadlineExceeded) {
        return Status(Code::kDeadlineExceeded, Stalled(what, peer, "took no data", limits_.stall_s, io.fd))
            .WithFailure({FailureKind::kTimeout, {out->process}, "send", spec.key});
      }
      if (std::optional<Status> why = ReceiverSaid(io)) {
        return Status(why->code(), what + ": " + peer + " gave up: " + why->message())
            .WithFailure({FailureKind::kPeerFailure, {out->process}, "send", spec.key});
      }
      return lost(st);
    }
    offset += n;
  } while (offset < spec.bytes);
  return OkStatus();
}


Status TransferEndpoint::StreamThroughRing(Outgoing* out, SendJob& job, const std::string& what,
                                           const std::function<Status(const Status&)>& lost) {
  const TransferSpec& spec = job.spec;
  const std::string peer = "process " + std::to_string(out->process);
  auto fail = [&](const Status& st) { return Status(st.code(), what + " failed: " + st.message()); };
  Io io{out->socket.fd(), [this] { return aborted(); }};
  size_t in_flight = 0;  // slots the receiver has not yet freed
  // The receiver's next notice: a slot it freed, or why it gave up.
  auto take_notice = [&]() -> Status {
    uint32_t type = 0;
    std::string payload;
    Status st = io.ReadControl(&type, &payload, limits_.stall_s);
    if (st.code() == Code::kDeadlineExceeded) {
      return Status(Code::kDeadlineExceeded, Stalled(what, peer, "took no data", limits_.stall_s, io.fd))
          .WithFailure({FailureKind::kTimeout, {out->process}, "send", spec.key});
    }
    if (!st.ok()) return lost(st);
    if (type == kSlotFree) {
      --in_flight;
      return OkStatus();
    }
    if (type == kReply) {
      Status why = DecodeReply(payload);
      return Status(why.ok() ? Code::kAborted : why.code(), what + ": " + peer + " gave up: " + why.message())
          .WithFailure({FailureKind::kPeerFailure, {out->process}, "send", spec.key});
    }
    return fail(DataLoss("the receiver sent a frame of type " + std::to_string(type)));
  };
  uint64_t offset = 0;
  do {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kTransferPieceBytes, spec.bytes - offset));
    if (in_flight == kRingSlots) MYPLUGIN_RETURN_IF_ERROR(take_notice());
    char* slot = out->ring.slot(out->ring_pieces);
    if (n > 0) {
      StatusOr<const char*> piece = job.source(offset, n, slot);
      if (!piece.ok()) {
        (void)io.WriteFrame(kSenderFailed, EncodeReply(piece.status()), limits_.stall_s);
        return fail(piece.status());
      }
      if (piece.value() != slot) std::memcpy(slot, piece.value(), n);
    }
    std::string head;
    const uint32_t t = kRingPiece, len = static_cast<uint32_t>(n);
    Put(head, &t, 4);
    Put(head, &len, 4);
    if (Status st = io.WriteAll(head.data(), head.size(), limits_.stall_s); !st.ok()) {
      if (std::optional<Status> why = ReceiverSaid(io)) {
        return Status(why->code(), what + ": " + peer + " gave up: " + why->message())
            .WithFailure({FailureKind::kPeerFailure, {out->process}, "send", spec.key});
      }
      return lost(st);
    }
    ++out->ring_pieces;
    ++in_flight;
    offset += n;
  } while (offset < spec.bytes);
  // Done once the receiver freed every slot: the ring is then whole for the next transfer.
  while (in_flight > 0) MYPLUGIN_RETURN_IF_ERROR(take_notice());
  return OkStatus();
}

// ---- Receiving ----

std::shared_ptr<TransferEndpoint::Receive> TransferEndpoint::Post(int src, const TransferSpec& expected,
                                                                  PieceSink sink, char* landing) {
  auto r = std::make_shared<Receive>();
  r->src_process = src;
  r->expected = expected;
  r->sink = std::move(sink);
  r->landing = landing;
  r->posted_at = Clock::now();
  r->record = ProcessRuntime::Get().flight_recorder().Begin(SignatureOf(CollectiveOp::kReceive, expected),
                                                            {src, me_}, nullptr, FunctionScope::Current());
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{src, expected.key, expected.src_device, expected.dst_device};
    if (src < 0 || src >= n_ || src == me_) {
      r->state = Receive::State::kDone;
      r->status = InvalidArgument(expected.Name() + ": process " + std::to_string(src) +
                                  " is not another process of the job");
    } else if (posted_.count(key)) {
      r->state = Receive::State::kDone;
      r->status = InvalidArgument(expected.Name() + " is already being received");
    } else {
      posted_[key] = r;
    }
  }
  cv_.notify_all();
  return r;
}

Status TransferEndpoint::Wait(const std::shared_ptr<Receive>& r) {
  const std::string peer = "process " + std::to_string(r->src_process);
  const std::string what = "receiving " + r->expected.Name() + " from " + peer;
  const Key key{r->src_process, r->expected.key, r->expected.src_device, r->expected.dst_device};
  const auto deadline = r->posted_at + Millis(limits_.arrival_s);
  std::unique_lock<std::mutex> lock(mu_);
  while (r->state != Receive::State::kDone) {
    if (r->state == Receive::State::kPosted) {
      std::optional<Status> stop = aborted_;
      if (!stop && stopping_) stop = Status(Code::kCancelled, "this process's transfer endpoint closed");
      if (stop || Clock::now() >= deadline) {
        posted_.erase(key);
        r->state = Receive::State::kDone;
        if (stop) {
          r->status = Status(Code::kAborted, what + " was aborted: " + stop->message()).WithFailureOf(*stop);
        } else {
          r->status = Status(Code::kDeadlineExceeded,
                             what + " timed out after " + SecondsText(limits_.arrival_s) +
                                 " (MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS): " + peer +
                                 " never sent it (stopped, stuck, or running other code)")
                          .WithFailure({FailureKind::kTimeout, {r->src_process}, "receive", r->expected.key});
          gave_up_[key] = "process " + std::to_string(me_) + " gave up " + r->expected.Name() + " after " +
                          SecondsText(limits_.arrival_s);
        }
        break;
      }
    }
    // The connection's thread bounds a matched receive (the stall bound);
    // an abort ends it through its socket.
    cv_.wait_until(lock, std::min(deadline, Clock::now() + kSlice));
  }
  Status st = r->status;
  lock.unlock();
  ProcessRuntime::Get().flight_recorder().End(r->record, st.ok());
  return st;
}

void TransferEndpoint::AcceptLoop() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      // Connections that ended are let go here.
      for (auto it = incoming_.begin(); it != incoming_.end();) {
        if ((*it)->finished) {
          (*it)->thread.join();
          it = incoming_.erase(it);
        } else {
          ++it;
        }
      }
    }
    // Either listener: TCP from other hosts, the Unix socket from this one.
    pollfd p[2] = {{listener_.fd(), POLLIN, 0}, {unix_listener_.get(), POLLIN, 0}};
    if (::poll(p, 2, static_cast<int>(kSlice.count())) <= 0) continue;
    coordination::Socket accepted;
    for (const pollfd& l : p) {
      if ((l.revents & POLLIN) && !accepted.valid()) accepted = coordination::Socket(::accept4(l.fd, nullptr, nullptr, SOCK_CLOEXEC));
    }
    if (!accepted.valid()) continue;
    auto in = std::make_unique<Incoming>();
    in->socket = std::move(accepted);
    Incoming* raw = in.get();
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || aborted_) continue;  // dropped: closes it
    in->thread = std::thread([this, raw] { ReadLoop(raw); });
    incoming_.push_back(std::move(in));
  }
}

void TransferEndpoint::ReadLoop(Incoming* in) {
  Io io{in->socket.fd(), [this] { return aborted(); }};
  std::string hello(kHelloBytes, '\0');
  if (io.ReadAll(hello.data(), hello.size(), kHelloTimeoutS).ok()) {
    uint32_t magic = 0, process = 0, flags = 0;
    uint64_t epoch = 0;
    std::memcpy(&magic, hello.data(), 4);
    std::memcpy(&process, hello.data() + 4, 4);
    std::memcpy(&epoch, hello.data() + 8, 8);
    std::memcpy(&flags, hello.data() + 16 + kSecretBytes, 4);
    bool ok = magic == kHelloMagic && epoch == epoch_ && hello.compare(16, kSecretBytes, secret_) == 0 &&
              static_cast<int>(process) < n_;
    if (ok && (flags & kHelloRing)) {
      StatusOr<std::pair<Fd, uint64_t>> ring = ReceiveFd(in->socket.fd(), After(kHelloTimeoutS), "a transfer ring");
      ok = ring.ok() && ring.value().second == kRingBytes && in->ring.Map(ring.value().first.get()).ok();
    }
    if (ok) {
      in->process = static_cast<int>(process);
      if (in->ring.base == nullptr) in->scratch.reset(new char[kTransferPieceBytes]);
      while (true) {
        uint32_t type = 0;
        std::string payload;
        if (!io.ReadControl(&type, &payload, -1).ok() || type != kHeader) break;  // closed, or out of step
        StatusOr<TransferSpec> spec = DecodeSpec(payload);
        if (!spec.ok() || !ServeTransfer(in, spec.value())) break;
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  in->socket.ShutdownBoth();
  in->finished = true;
}

bool TransferEndpoint::ServeTransfer(Incoming* in, const TransferSpec& spec) {
  Io io{in->socket.fd(), [this] { return aborted(); }};
  const Key key{in->process, spec.key, spec.src_device, spec.dst_device};
  const std::string peer = "process " + std::to_string(in->process);
  std::shared_ptr<Receive> r;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = After(limits_.arrival_s);
    while (true) {
      if (stopping_ || aborted_) return false;
      if (auto it = posted_.find(key); it != posted_.end()) {
        r = it->second;
        posted_.erase(it);
        r->state = Receive::State::kMatched;
        break;
      }
      if (auto it = gave_up_.find(key); it != gave_up_.end()) {
        const std::string why = it->second;
        gave_up_.erase(it);
        lock.unlock();
        return io.WriteFrame(kReply, EncodeReply(Status(Code::kDeadlineExceeded, why)), limits_.stall_s).ok();
      }
      if (Clock::now() >= deadline) {
        lock.unlock();
        Status why(Code::kDeadlineExceeded, "process " + std::to_string(me_) + " posted no receive for " +
                                                spec.Name() + " within " + SecondsText(limits_.arrival_s));
        return io.WriteFrame(kReply, EncodeReply(why), limits_.stall_s).ok();
      }
      cv_.wait_until(lock, std::min(deadline, Clock::now() + kSlice));
    }
  }
  const std::string what = "receiving " + spec.Name() + " from " + peer;
  auto finish = [&](const Status& st) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      r->status = st;
      r->state = Receive::State::kDone;
    }
    cv_.notify_all();
  };
  const TransferSpec& want = r->expected;
  if (spec.element_type != want.element_type || spec.dims != want.dims || spec.bytes != want.bytes) {
    const std::string why = spec.Name() + ": process " + std::to_string(in->process) + " sends " + spec.Shape() +
                            ", process " + std::to_string(me_) + " expects " + want.Shape();
    // The sender is told first: this process may exit as soon as its wait ends.
    const bool sent = io.WriteFrame(kReply, EncodeReply(InvalidArgument(why)), limits_.stall_s).ok();
    finish(InvalidArgument(what + " failed: " + why)
               .WithFailure({FailureKind::kMismatch, {in->process}, "receive", spec.key}));
    return sent;
  }
  auto lost = [&](const Status& st) {
    if (std::optional<Status> stop = aborted()) {
      return Status(Code::kAborted, what + " was aborted: " + stop->message()).WithFailureOf(*stop);
    }
    return WithCause(Status(st.code(), what + " failed: " + peer + " " + st.message()), in->process);
  };
  if (Status st = io.WriteFrame(kReply, EncodeReply(OkStatus()), limits_.stall_s); !st.ok()) {
    finish(lost(st));
    return false;
  }
  ProcessRuntime::Get().flight_recorder().Matched(r->record);
  const uint32_t piece_type = in->ring.base != nullptr ? kRingPiece : kPiece;
  uint64_t offset = 0;
  do {
    uint32_t type = 0, n = 0;
    Status st = io.ReadFrameHead(&type, &n, limits_.stall_s);
    if (st.ok() && type == kSenderFailed && n <= kMaxControlBytes) {
      std::string payload(n, '\0');
      st = io.ReadAll(payload.data(), n, limits_.stall_s);
      Status why = st.ok() ? DecodeReply(payload) : st;
      finish(Status(why.ok() ? Code::kInternal : why.code(), what + " failed: " + peer + " failed: " + why.message())
                 .WithFailure({FailureKind::kPeerFailure, {in->process}, "receive", spec.key}));
      return false;
    }
    if (st.ok() && (type != piece_type || n > kTransferPieceBytes || n > spec.bytes - offset ||
                    (n == 0 && spec.bytes > 0))) {
      st = DataLoss("sent a malformed piece (frame type " + std::to_string(type) + ", " + std::to_string(n) +
                    " bytes)");
    }
    const char* data = nullptr;
    if (st.ok() && in->ring.base != nullptr) {
      data = in->ring.slot(in->ring_pieces++);
    } else if (st.ok()) {
      // The type, dims and size agreed with the receive's: a landing area holds the whole.
      char* into = r->landing != nullptr ? r->landing + offset : in->scratch.get();
      data = into;
      st = io.ReadAll(into, n, limits_.stall_s);
    }
    if (!st.ok()) {
      if (st.code() == Code::kDeadlineExceeded) {
        (void)io.WriteFrame(kReply, EncodeReply(Status(Code::kDeadlineExceeded,
                                                       "process " + std::to_string(me_) + " received no data for " +
                                                           SecondsText(limits_.stall_s))),
                            1);
        finish(Status(Code::kDeadlineExceeded, Stalled(what, peer, "sent no data", limits_.stall_s, io.fd))
                   .WithFailure({FailureKind::kTimeout, {in->process}, "receive", spec.key}));
      } else {
        finish(lost(st));
      }
      return false;
    }
    offset += n;
    Status taken = r->sink(offset - n, data, n, offset == spec.bytes);
    // The slot is free again once the sink has the bytes. A notice that
    // cannot be sent is no error yet: the next frame says why (a sender
    // that failed says so before it closes), and after the last piece the
    // data is all here.
    if (taken.ok() && in->ring.base != nullptr) (void)io.WriteFrame(kSlotFree, "", limits_.stall_s);
    if (!taken.ok()) {
      (void)io.WriteFrame(kReply, EncodeReply(Status(taken.code(), "process " + std::to_string(me_) +
                                                                      " could not take the data: " + taken.message())),
                          1);
      finish(Status(taken.code(), what + " failed: " + taken.message()));
      return false;
    }
  } while (offset < spec.bytes);
  finish(OkStatus());
  return true;
}

}  // namespace myplugin::collectives
