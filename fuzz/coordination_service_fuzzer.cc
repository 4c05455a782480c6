// libFuzzer target: the coordination service's message handling
// (service_state.h) in-process, driven by a script of events from four fake
// connections to a job of three processes: Hellos with the right or a wrong
// token, well-formed requests, raw bytes, disconnects, stopped readers, the
// launcher's word that a process ended or is being started again, and the
// passing of time.
//
// Invariants checked after every event:
//  - ServiceState::CheckInvariants(): the store's accounting and limits,
//    the bound on waiters, one connection per member;
//  - the service speaks only to connections that said Hello, and to a
//    refused one only the Error that refuses it;
//  - every frame it sends is a well-formed message within the frame limit;
//  - a connection the state refused is never a member;
//  - a Hello claiming an id another connection holds is refused;
//  - once the launcher says a process ended, no connection holds its id, its
//    old connection is not heard any more and its close changes nothing, and
//    a new process claiming the id is not refused because of that connection;
//  - once the job has failed, its failed process never changes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <set>
#include <string>

#include "coordination/messages.h"
#include "coordination/process_info.h"
#include "coordination/service_state.h"

namespace coord = myplugin::coordination;
namespace msg = myplugin::coordination::msg;

namespace {

void Require(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "coordination_service_fuzzer: invariant broken: %s\n", what);
    std::abort();
  }
}

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(Byte() | (Byte() << 8)); }
  std::string Bytes(size_t n) {
    n = std::min(n, size_ - std::min(pos_, size_));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  // Keys from a small alphabet, so that sets, gets and lists meet.
  std::string Key() {
    static const char* const kKeys[] = {"a", "b", "a/1", "a/2", "gloo/x", ""};
    uint8_t b = Byte();
    if (b < 240) return kKeys[b % 6];
    return std::string(static_cast<size_t>(U16()) % (coord::kMaxKeyBytes + 64), 'k');
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

std::string Payload(const std::string& frame) { return frame.substr(4); }

// A connection other than `conn` that is the member of process `pid`, or 0.
coord::ConnectionId HolderOf(const coord::ServiceState& state, const std::set<coord::ConnectionId>& conns, int pid,
                             coord::ConnectionId conn) {
  for (coord::ConnectionId c : conns) {
    if (c != conn && state.ProcessOf(c) == pid) return c;
  }
  return 0;
}

// The launcher reaped process `pid` (as jax_plugin/launcher.py does: first,
// if it starts it again, ExpectRejoin). Checks what the state promises then;
// the connection it let go is closed, as the service closes it.
void ProcessEnded(coord::ServiceState& state, std::set<coord::ConnectionId>& helloed, int pid, uint8_t how,
                  coord::Outbox& out) {
  const coord::ConnectionId held = HolderOf(state, helloed, pid, 0);
  const coord::ConnectionId conn = state.OnProcessEnded(pid, "with exit code " + std::to_string(how), out);
  Require(conn == 0 || conn == held, "process_ended let go of a connection that was not the process's");
  Require(HolderOf(state, helloed, pid, 0) == 0, "a connection still holds the id of a process that ended");
  if (conn != 0) {
    helloed.erase(conn);
    const int failed = state.failed_process();
    const uint64_t epoch = state.epoch();
    coord::Outbox late;
    Require(!state.OnFrame(conn, Payload(msg::Heartbeat().Encode()), late).ok() && late.frames.empty(),
            "the ended process's connection is still heard");
    state.OnDisconnect(conn, myplugin::Status(myplugin::Code::kUnavailable, "closed"), late);
    Require(late.frames.empty() && state.failed_process() == failed && state.epoch() == epoch,
            "the close of a connection the state let go of changed the job");
  }
  if (pid >= state.options().num_processes) return;
  // A new process claiming the id (on a copy: the script goes on without it)
  // may be refused for the job's state, never for the old connection.
  coord::ServiceState probe = state;
  coord::Outbox ignored;
  msg::Hello h;
  h.process_id = static_cast<uint32_t>(pid);
  h.token = "tok";
  const myplugin::Status st = probe.OnHello(1000, "new", Payload(h.Encode()), ignored);
  // (The job's failure may quote a reason of the script's, "(by fuzz)" in it:
  // the refusal for the old connection is told by its code and words.)
  Require(st.ok() || st.code() != myplugin::Code::kAlreadyExists ||
              st.message().rfind("process id " + std::to_string(pid) + " is already taken (by fuzz)", 0) != 0,
          "a new process was refused the id of a process that ended, for its old connection");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  coord::ServiceOptions options;
  options.num_processes = 3;
  options.token = "tok";
  options.heartbeat_timeout_s = 10;
  options.initialization_timeout_s = 30;
  coord::ServiceState state(options);
  const auto start = coord::ServiceState::Clock::now();
  // helloed: members now; ever: every connection that was ever accepted.
  std::set<coord::ConnectionId> helloed, ever;
  int failed = -1;
  uint64_t epoch = 0;
  for (int step = 0; step < 256 && !in.empty(); ++step) {
    coord::Outbox out;
    const uint8_t op = in.Byte();
    const coord::ConnectionId conn = 1 + (op >> 4) % 4;
    std::set<coord::ConnectionId> refused_now;
    switch (op % 8) {
      case 0: {  // Hello
        msg::Hello h;
        uint8_t b = in.Byte();
        h.process_id = b % 4;
        h.token = (b & 0x80) ? "wrong" : "tok";
        if (b & 0x40) h.version = static_cast<uint16_t>(in.U16());
        const bool duplicate = HolderOf(state, helloed, static_cast<int>(h.process_id), conn) != 0;
        bool ok = state.OnHello(conn, "fuzz", Payload(h.Encode()), out).ok();
        Require(!(ok && duplicate), "a Hello took the id another connection holds");
        if (ok) {
          helloed.insert(conn);
          ever.insert(conn);
        } else {
          refused_now.insert(conn);
        }
        break;
      }
      case 1: {  // raw bytes, as the first or a later frame
        std::string raw = in.Bytes(in.Byte());
        if (helloed.count(conn)) {
          state.OnFrame(conn, raw, out);
        } else if (!state.OnHello(conn, "fuzz", raw, out).ok()) {
          refused_now.insert(conn);
        } else {
          helloed.insert(conn);
          ever.insert(conn);
        }
        break;
      }
      case 2: {  // a well-formed request
        uint8_t kind = in.Byte();
        std::string frame;
        uint32_t rid = in.Byte();
        switch (kind % 12) {
          case 0: {
            msg::KeyValueSet m;
            m.key = in.Key();
            // Small values only: one over the 32 MiB limit cost 20 ms of
            // allocating and copying per script (36 scripts a second), and
            // its refusal is one comparison, tested straight against the
            // service (test_coordination_bad_input.py::
            // test_oversize_value_is_refused_and_the_member_goes_on). Keys
            // still reach past their limit (Key()).
            m.value = std::string(in.U16() % 4096, 'v');
            m.request_id = rid;
            frame = m.Encode();
            break;
          }
          case 1: {
            msg::KeyValueGet m;
            m.key = in.Key();
            m.timeout_ms = in.U16();
            m.request_id = rid;
            frame = m.Encode();
            break;
          }
          case 2: {
            msg::KeyValueTryGet m;
            m.key = in.Key();
            m.request_id = rid;
            frame = m.Encode();
            break;
          }
          case 3: {
            msg::KeyValueDelete m;
            m.key = in.Key();
            m.request_id = rid;
            frame = m.Encode();
            break;
          }
          case 4: {
            msg::KeyValueList m;
            m.prefix = in.Key();
            m.request_id = rid;
            frame = m.Encode();
            break;
          }
          case 5: {
            msg::Barrier m;
            m.name = in.Key();
            m.timeout_ms = in.U16();
            m.request_id = rid;
            frame = m.Encode();
            break;
          }
          case 6: {
            msg::Register m;
            m.num_processes = in.Byte() % 4;
            const uint8_t n = in.Byte();
            if (n & 0x80) {
              // A ProcessInfo, as real clients register, so that replies
              // carry table entries: lengths of hostname and address in n.
              coord::ProcessInfo info;
              info.hostname = in.Bytes(n & 7);
              info.num_devices = in.Byte() % 3;
              info.pid = in.U16();
              info.address = in.Bytes((n >> 3) & 7);
              info.host_id = in.Bytes(in.Byte() % 8);
              m.topology = coord::EncodeProcessInfo(info);
            } else {
              m.topology = in.Bytes(n);
            }
            m.request_id = rid;
            frame = m.Encode();
            break;
          }
          case 7: {
            msg::Shutdown m;
            m.timeout_ms = in.U16();
            m.request_id = rid;
            frame = m.Encode();
            break;
          }
          case 8: {
            msg::Agree m;
            m.timeout_ms = in.U16();
            m.request_id = rid;
            frame = m.Encode();
            break;
          }
          case 10: {
            msg::KeyValueInsert m;
            m.key = in.Key();
            m.value = std::string(in.U16() % 4096, 'v');
            m.request_id = rid;
            frame = m.Encode();
            break;
          }
          case 11: {
            msg::KeyValueIncrement m;
            m.key = in.Key();
            m.increment = static_cast<int64_t>(in.U16()) - 32768;
            m.request_id = rid;
            frame = m.Encode();
            break;
          }
          default: {
            msg::ReportError m;
            m.reason = in.Bytes(in.Byte());
            frame = m.Encode();
            break;
          }
        }
        if (helloed.count(conn)) state.OnFrame(conn, Payload(frame), out);
        break;
      }
      case 3:
        state.OnDisconnect(conn, myplugin::Status(myplugin::Code::kUnavailable, "closed"), out);
        helloed.erase(conn);
        break;
      case 4:
        state.OnStoppedReading(conn, "fuzz", out);
        helloed.erase(conn);
        break;
      case 5:
        state.Tick(start + std::chrono::milliseconds(100 * static_cast<int>(in.U16())), out);
        break;
      case 7: {  // the launcher: a process ended, or is (not) being started again
        const uint8_t b = in.Byte();
        const int pid = b % 4;  // 3: out of range
        if (b & 0x40) {
          state.ExpectRejoin(pid, (b & 0x20) != 0, out);
          break;
        }
        if (b & 0x80) state.ExpectRejoin(pid, true, out);
        ProcessEnded(state, helloed, pid, in.Byte(), out);
        break;
      }
      default: {
        msg::Heartbeat beat;
        if (helloed.count(conn)) state.OnFrame(conn, Payload(beat.Encode()), out);
        break;
      }
    }
    const std::string broken = state.CheckInvariants();
    if (!broken.empty()) {
      std::fprintf(stderr, "coordination_service_fuzzer: %s\n", broken.c_str());
      std::abort();
    }
    for (const coord::Outbox::Frame& f : out.frames) {
      Require(f.bytes && f.bytes->size() >= 9 && f.bytes->size() <= coord::kMaxFrameBytes + 4,
              "a frame outside the frame limits");
      Require(msg::DecodeAndEncodeAny(Payload(*f.bytes)).ok(), "the service sent a malformed frame");
      if (refused_now.count(f.to)) {
        Require(msg::Error::Decode(Payload(*f.bytes)).ok(), "a refused connection got more than an Error");
      } else {
        Require(ever.count(f.to) > 0, "a frame to a connection that never said Hello");
      }
    }
    for (coord::ConnectionId c : refused_now) {
      Require(state.ProcessOf(c) < 0 || helloed.count(c), "a refused connection became a member");
    }
    // Connections the state no longer knows (a failed member) get nothing more.
    for (auto it = helloed.begin(); it != helloed.end();) {
      it = state.ProcessOf(*it) < 0 ? helloed.erase(it) : std::next(it);
    }
    // The first failure stays the job's until an agreement ends it (a new epoch).
    if (failed >= 0 && state.epoch() == epoch) Require(state.failed_process() == failed, "the job's first failure changed");
    Require(state.epoch() >= epoch, "the epoch went back");
    failed = state.failed_process();
    epoch = state.epoch();
  }
  return 0;
}
