// One file (~370 lines) for the Communicator base class: the signature
// exchange, timeouts and arrival checks every backend shares, and the
// collectives written over the backend's exchange primitives.
#include "collectives/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

#include "collectives/defaults.h"
#include "collectives/flight_recorder.h"
#include "collectives/process_runtime.h"
#include "collectives/straggler_watch.h"
#include "common/deadline.h"
#include "common/fault_delays.h"
#include "common/tcp_links.h"

namespace myplugin::collectives {
namespace {

// How long processes that timed out wait for each other to record arrival.
constexpr double kArrivalWaitS = 1.0;

// A give-up record's value when the process waited its whole bound (then
// the bound follows); "closed" when it only saw a connection close.
constexpr char kTimeoutMark[] = "timeout after ";

// The processes that recorded giving up on a call (the records under
// `prefix`), and the first of them other than `self` that waited its whole
// bound, with that bound.
struct GiveUps {
  std::set<int> present;
  int timed_out_peer = -1;
  std::string peer_bound;
  // The processes of `group` with no record.
  std::vector<int> MissingOf(const std::vector<int>& group) const {
    std::vector<int> missing;
    for (int p : group) {
      if (!present.count(p)) missing.push_back(p);
    }
    return missing;
  }
};
GiveUps ReadGiveUps(const std::vector<std::pair<std::string, std::string>>& records, const std::string& prefix,
                    int self) {
  GiveUps g;
  const std::string mark = kTimeoutMark;
  for (const auto& [key, value] : records) {
    const int p = std::atoi(key.c_str() + prefix.size());
    g.present.insert(p);
    if (g.timed_out_peer < 0 && p != self && value.rfind(mark, 0) == 0) {
      g.timed_out_peer = p;
      g.peer_bound = value.substr(mark.size());
    }
  }
  return g;
}

// `all` less `those`, in order.
std::vector<int> Excluding(const std::vector<int>& all, const std::vector<int>& those) {
  std::vector<int> left;
  for (int p : all) {
    if (std::find(those.begin(), those.end(), p) == those.end()) left.push_back(p);
  }
  return left;
}

// The peers whose links a stall's error describes at most: a stall of
// thousands names them all, their links' state the first few.
constexpr size_t kLinkNotesMax = 4;

// What this process's TCP connections to `processes` say of their links
// (common/tcp_links.h): whether a peer stopped, or its link. On the error
// path only.
std::string LinkNotes(const std::vector<int>& processes, int self) {
  const std::vector<coordination::ProcessInfo> topology = ProcessRuntime::Get().distributed().processes();
  std::string notes;
  size_t described = 0;
  for (int p : processes) {
    if (described == kLinkNotesMax) break;
    if (p == self || p < 0 || static_cast<size_t>(p) >= topology.size() || topology[p].address.empty()) continue;
    StatusOr<std::vector<TcpConnectionState>> connections = TcpConnectionsTo(topology[p].address);
    if (!connections.ok()) continue;
    const std::string note = DescribeTcpLink("process " + std::to_string(p), topology[p].address, connections.value());
    if (note.empty()) continue;
    notes += "; " + note;
    ++described;
  }
  return notes;
}

// Where the first process to see a call's signatures differ publishes them:
// per membership epoch, so that a group rebuilt after recovery, whose
// sequence starts again, never reads an old one.
std::string MismatchKey(uint64_t epoch, uint64_t group_hash, uint64_t sequence) {
  return "myplugin/collectives/mismatch/" + std::to_string(epoch) + "/" + std::to_string(group_hash) + "/" +
         std::to_string(sequence);
}

// Beside it: which call each rank issued, as the index of the first rank
// that issued the same ("0,1,0"), so that a reader finds who differs from it.
std::string MismatchCallsKey(const std::string& mismatch_key) { return mismatch_key + "/calls"; }

std::string CallClasses(const std::vector<Signature>& sigs) {
  std::string out;
  for (size_t r = 0; r < sigs.size(); ++r) {
    size_t first = 0;
    while (!(sigs[first] == sigs[r])) ++first;
    out += (r ? "," : "") + std::to_string(first);
  }
  return out;
}

// The processes of `process_group` whose call (CallClasses) differs from rank `rank`'s.
std::vector<int> Differing(const std::string& classes, const std::vector<int>& process_group, int rank) {
  std::vector<int> of_rank;
  for (size_t at = 0; at <= classes.size();) {
    size_t end = classes.find(',', at);
    if (end == std::string::npos) end = classes.size();
    of_rank.push_back(std::atoi(classes.substr(at, end - at).c_str()));
    at = end + 1;
  }
  std::vector<int> out;
  if (of_rank.size() != process_group.size()) return out;
  for (size_t r = 0; r < of_rank.size(); ++r) {
    if (of_rank[r] != of_rank[rank]) out.push_back(process_group[r]);
  }
  return out;
}

// `st`, its failure (if it reports one and names no call: a process that
// failed, say) placed in the call `sig` that it ended.
Status OfCall(const Status& st, const Signature& sig) {
  if (st.failure() == nullptr || !st.failure()->collective.empty()) return st;
  FailureDetail d = *st.failure();
  d.collective = sig.Operation();
  d.call = static_cast<int64_t>(sig.sequence);
  return st.WithFailure(std::move(d));
}

Status Failed(Code code, std::string message, FailureKind kind, std::vector<int> processes, const Signature& sig) {
  return Status(code, std::move(message))
      .WithFailure({kind, std::move(processes), sig.Operation(), static_cast<int64_t>(sig.sequence)});
}

}  // namespace

std::string IdList(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

Communicator::Communicator(std::vector<int> process_group, int rank, WaitLimits limits,
                           std::shared_ptr<coordination::CoordinationClient> coordination)
    : process_group_(std::move(process_group)),
      rank_(rank),
      coordination_(std::move(coordination)),
      clock_(std::make_shared<CallClock>(limits)),
      group_hash_(HashInts(std::vector<int64_t>(process_group_.begin(), process_group_.end()))),
      inline_bytes_(process_group_.size() <= 4 ? 16384 : process_group_.size() <= 8 ? 4096 : 0) {}

void Communicator::SetDeviceGroup(const std::vector<int>& devices) {
  std::vector<int64_t> ids(process_group_.begin(), process_group_.end());
  ids.push_back(-1);
  ids.insert(ids.end(), devices.begin(), devices.end());
  group_hash_ = HashInts(ids);
}

void Communicator::Abort(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_) return;
    aborted_ = why;
  }
  DoAbort();
}

void Communicator::PeerFinished(int process, double grace_s) {
  int64_t call;
  std::string what, collective;
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (std::find(process_group_.begin(), process_group_.end(), process) == process_group_.end()) return;
    finished_peers_.push_back(process);
    call = in_flight_;
    what = in_flight_what_;
    collective = in_flight_collective_;
  }
  if (call < 0) return;
  // The peer may have just finished this very call while its last bytes are
  // on the way: give it `grace_s` before calling the call stuck.
  std::weak_ptr<Communicator> weak = weak_from_this();
  int me = process_group_[rank_];
  std::thread([weak, call, what, collective, process, me, grace_s] {
    std::this_thread::sleep_for(Millis(grace_s));
    FaultDelay(FaultPoint::kPeerExitGrace);
    auto self = weak.lock();
    if (!self) return;
    {
      std::lock_guard<std::mutex> lock(self->abort_mu_);
      if (self->in_flight_ != call) return;
    }
    std::string why = "process " + std::to_string(me) + " waits in " + what + " for process " +
                      std::to_string(process) + ", which finished (entered shutdown) without issuing it: every "
                      "process must issue the same collectives (did one leave its loop early?)";
    const std::string trace = WithTrace(why);  // before the exit that FailThisProcess brings
    if (self->coordination_) self->coordination_->FailThisProcess(why + trace, {process});
    self->Abort(Status(Code::kFailedPrecondition, why + trace)
                    .WithFailure({FailureKind::kPeerFailure, {process}, collective, call}));
  }).detach();
}

StatusOr<uint32_t> Communicator::Begin(Signature& sig, const void* payload, size_t payload_bytes,
                                       std::vector<char>* records, const void* staged, size_t staged_bytes,
                                       char* staged_out, bool copy_own) {
  sig.group_hash = group_hash_;
  std::optional<Status> aborted;
  std::string cannot_complete;
  int finished_peer = -1;
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_) {
      aborted = aborted_;  // explained below: Explain takes abort_mu_ itself
    } else if (!finished_peers_.empty()) {
      sig.sequence = sequence_;
      finished_peer = finished_peers_[0];
      cannot_complete = sig.Describe() + " on processes " + IdList(process_group_) + " cannot complete: process " +
                        std::to_string(finished_peers_[0]) +
                        " has finished (entered shutdown) and issues no more collectives: every process must "
                        "issue the same collectives (did one leave its loop early?)";
    } else {
      sig.sequence = sequence_++;
      clock_->Start();
      in_flight_ = static_cast<int64_t>(sig.sequence);
      in_flight_what_ = sig.Describe() + " on processes " + IdList(process_group_);
      in_flight_collective_ = sig.Operation();
    }
  }
  if (aborted) return Explain(sig, *aborted);
  if (!cannot_complete.empty()) {
    ProcessRuntime::Get().flight_recorder().End(ProcessRuntime::Get().flight_recorder().Begin(sig, process_group_, nullptr, FunctionScope::Current()), false);
    return Failed(Code::kFailedPrecondition, cannot_complete + WithTrace(cannot_complete), FailureKind::kPeerFailure,
                  {finished_peer}, sig);
  }
  record_ = ProcessRuntime::Get().flight_recorder().Begin(sig, process_group_, nullptr, FunctionScope::Current());
  const uint32_t tag = static_cast<uint32_t>(sig.sequence * 2);
  const size_t record = record_size();
  std::vector<char> mine(record, 0);
  sig.Encode(mine.data());
  if (payload != nullptr && payload_bytes > 0 && payload_bytes <= inline_bytes_) {
    std::memcpy(mine.data() + Signature::kEncodedSize, payload, payload_bytes);
  }
  std::vector<char> all(record * process_group_.size());
  std::string mismatch;
  std::vector<int> differing;
  auto check = [&](const char* received) {
    std::vector<Signature> sigs;
    for (size_t r = 0; r < process_group_.size(); ++r) sigs.push_back(Signature::Decode(received + r * record));
    mismatch = CompareSignatures(sigs, process_group_);
    if (mismatch.empty()) {
      clock_->Agreed();
      return OkStatus();
    }
    const std::string classes = CallClasses(sigs);
    differing = Differing(classes, process_group_, rank_);
    // Published before anything is aborted: a peer whose exchange breaks
    // because this process closes its connections reads the mismatch here
    // (Explain) instead of reporting a lost connection. Who issued what
    // goes first: whoever reads the mismatch finds it there.
    if (coordination_) {
      const std::string key = MismatchKey(coordination_->epoch(), group_hash_, sig.sequence);
      (void)coordination_->KeyValueSet(MismatchCallsKey(key), classes);
      (void)coordination_->KeyValueSet(key, mismatch);
    }
    return Status(Code::kFailedPrecondition, mismatch);
  };
  // Every call, whatever its size, starts with the same exchange of
  // same-size records, so calls that took different paths still compare.
  Status st = DoSignedExchange(mine.data(), record, all.data(), staged, staged_bytes, staged_out, check, tag,
                               copy_own);
  if (st.code() == Code::kUnimplemented) {
    st = DoAllGatherBytes(mine.data(), all.data(), record, tag);
    if (st.ok()) st = check(all.data());
    if (st.ok() && staged_bytes > 0) st = DoAllGatherBytes(staged, staged_out, staged_bytes, tag + 1);
  }
  if (!mismatch.empty()) {
    // Nothing of the peers' data was read. The backend may have been
    // aborted (a signed exchange's payload was already on its way): every
    // later call on this communicator fails with the same error.
    ProcessRuntime::Get().flight_recorder().End(record_, false);  // before the dump, which should show it failed
    record_ = 0;
    Status why = Failed(Code::kFailedPrecondition, mismatch + WithTrace(mismatch), FailureKind::kMismatch,
                        differing, sig);
    std::lock_guard<std::mutex> lock(abort_mu_);
    aborted_ = why;
    return why;
  }
  if (!st.ok()) return Explain(sig, st);
  ProcessRuntime::Get().flight_recorder().Matched(record_);
  if (records != nullptr) records->swap(all);
  return tag + 1;
}

size_t Communicator::signed_bytes_limit() const {
  // Bytes on the wire per rank: (n - 1) * size here, against 2 (n - 1) / n *
  // size for a ring; for two ranks they are equal, and one round trip beats
  // the ring's two up to a few MB (bench/collectives.py).
  return process_group_.size() <= 2 ? (4u << 20) : process_group_.size() <= 4 ? (256u << 10) : 0;
}

Status Communicator::RunSigned(Signature sig, const void* payload, size_t bytes, char* payloads, bool copy_own) {
  StatusOr<uint32_t> tag = Begin(sig, nullptr, 0, nullptr, payload, bytes, payloads, copy_own);
  EndCall(tag.ok());
  return tag.status();
}

template <typename Body>
Status Communicator::Run(Signature sig, size_t bytes, Body&& body) {
  StatusOr<uint32_t> tag = Begin(sig);
  Status st = tag.status();
  if (st.ok() && bytes > 0) {
    st = body(tag.value());
    if (!st.ok()) st = Explain(sig, st);
  }
  EndCall(st.ok());
  return st;
}

void Communicator::EndCall(bool ok) {
  ProcessRuntime::Get().flight_recorder().End(record_, ok);
  record_ = 0;
  std::lock_guard<std::mutex> lock(abort_mu_);
  in_flight_ = -1;
}

std::string Communicator::WithTrace(const std::string& why) {
  const std::string dir = DumpFlightRecorder(why);
  return dir.empty() ? "" : " [flight recorders: " + dir + "; compare them with: myplugin-trace " + dir + "]";
}

Status Communicator::Explain(const Signature& sig, const Status& backend_error) {
  const std::string what = sig.Describe() + " on processes " + IdList(process_group_);
  if (std::optional<Status> aborted = Aborted()) {
    return OfCall(Status(Code::kAborted, what + " was aborted: " + aborted->message()).WithFailureOf(*aborted), sig);
  }
  if (coordination_) {
    // This process reached this call, so it finished the one before: a peer
    // still in that one, giving up on a stall, must not name it (only the
    // error path pays for the record).
    (void)coordination_->KeyValueSet(ReachedPrefix(sig.sequence) + std::to_string(process_group_[rank_]), "");
    // A broken connection usually means a peer died, or saw this call's
    // signatures differ and broke off: the service names either within moments.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(kFailureNoticeWaitS * 1000));
    while (true) {
      if (std::optional<Status> cause = KnownCause(sig, what)) return *cause;
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Every process had arrived: data was moving (call_clock.h).
    const bool moving = clock_->agreed();
    // A timeout is one only when the call has waited its bound: a backend
    // that says "timed out" sooner (a pair closed under it) is a failed
    // connection, named with the time it actually took.
    const double waited = clock_->ElapsedSeconds();
    const double bound = std::min(moving ? limits().stall_s : limits().arrival_s, limits().cap_s);
    const bool timed_out = backend_error.code() == Code::kDeadlineExceeded && waited >= bound * 0.99;
    if (timed_out && clock_->CapReached()) {
      ProcessRuntime::Get().flight_recorder().End(record_, false);
      record_ = 0;
      const std::string why = what + " reached its cap of " + SecondsText(limits().cap_s) +
                              " (MYPLUGIN_COLLECTIVE_CAP_SECONDS) " +
                              (moving ? "while its data still moved" : "while its processes were still arriving");
      return Failed(Code::kDeadlineExceeded, why + WithTrace(why), FailureKind::kTimeout, {}, sig);
    }
    // No process failed: someone is late or stuck. Everyone who timed out
    // records it; whoever is missing from the record never came (or, once
    // all had come, stopped moving data).
    auto records_of = [&](bool stalled_records, uint64_t sequence) {
      return std::string("myplugin/collectives/") + (stalled_records ? "stalled/" : "arrived/") +
             std::to_string(group_hash_) + "/" + std::to_string(sequence) + "/";
    };
    const std::string prefix = records_of(moving, sig.sequence);
    // The value says whether this process waited its whole bound (and which)
    // or only saw a connection close: a peer's timeout closes the others'
    // connections, and the timeout, not the closed connection, is then what
    // each names.
    const std::string own_bound = SecondsText(moving ? limits().stall_s : limits().arrival_s);
    // Every process recorded giving up: none is missing, so none stopped.
    bool all_gave_up = false;
    if (coordination_->KeyValueSet(prefix + std::to_string(process_group_[rank_]),
                                   timed_out ? kTimeoutMark + own_bound : "closed")
            .ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(kArrivalWaitS * 1000)));
      // A cause that came while this process waited still wins.
      if (std::optional<Status> cause = KnownCause(sig, what)) return *cause;
      auto arrived = coordination_->KeyValueList(prefix);
      if (arrived.ok()) {
        const GiveUps records = ReadGiveUps(arrived.value(), prefix, process_group_[rank_]);
        const int timed_out_peer = records.timed_out_peer;
        const std::string& peer_bound = records.peer_bound;
        std::vector<int> missing = records.MissingOf(process_group_);
        all_gave_up = missing.empty();
        if (moving) missing = WithoutThoseInTheNextCall(missing, sig.sequence);
        if (!moving && timed_out && !missing.empty()) {
          // A peer that waits in the next call reached this one and finished
          // it: what this process still waited for (the signatures' last
          // exchange) never came from it.
          const std::vector<int> ahead = InTheNextCall(missing, sig.sequence);
          if (ahead.size() == missing.size()) {
            ProcessRuntime::Get().flight_recorder().End(record_, false);
            record_ = 0;
            const std::string why = what + " timed out after " + own_bound + ": processes " + IdList(ahead) +
                                    " finished call #" + std::to_string(sig.sequence) + " and wait in the next, but " +
                                    "what this process waited for from them never came (is a link between them "
                                    "down?)" + LinkNotes(ahead, process_group_[rank_]);
            return Failed(Code::kDeadlineExceeded, why + WithTrace(why), FailureKind::kTimeout, ahead, sig);
          }
          missing = Excluding(missing, ahead);
        }
        if (!moving && !timed_out && timed_out_peer < 0 && sig.sequence > 0) {
          if (std::optional<Status> earlier =
                  GaveUpOnTheCallBefore(sig, what, records_of(true, sig.sequence - 1), waited, backend_error)) {
            return *earlier;
          }
        }
        if (!missing.empty()) {
          ProcessRuntime::Get().flight_recorder().End(record_, false);
          record_ = 0;
          const bool stalled = timed_out || timed_out_peer >= 0;
          // Only a timeout waited the whole bound, here or on a peer whose
          // giving up closed this process's connection (named after it); any
          // other error came sooner and is named as it is.
          std::string how;
          if (stalled) {
            const std::string& bound_text = timed_out ? own_bound : peer_bound;
            how = (moving ? " made no progress for " : " timed out after ") + bound_text;
            if (!timed_out) {
              how += " on process " + std::to_string(timed_out_peer) + " (here its giving up closed a connection after " +
                     SecondsText(waited) + ": " + backend_error.message() + ")";
            }
          } else {
            how = " failed after " + SecondsText(waited) + " (" + backend_error.message() + ")";
          }
          const std::string why =
              what + how +
              (moving ? ": processes " + IdList(missing) + " stopped moving data in call #" +
                            std::to_string(sig.sequence) + " (stopped, stuck, or their link is down)" +
                            LinkNotes(missing, process_group_[rank_])
                      : " waiting for processes " + IdList(missing) + ", which never reached call #" +
                            std::to_string(sig.sequence) + " (stopped, stuck, or running other code)" +
                            (stalled ? LinkNotes(missing, process_group_[rank_]) : ""));
          // A connection that closed without a failure notice is still a
          // process that did not take part: named as one.
          return Failed(stalled ? Code::kDeadlineExceeded : Code::kAborted, why + WithTrace(why),
                        stalled ? FailureKind::kTimeout : FailureKind::kPeerFailure, missing, sig);
        }
      }
    }
    if (timed_out && (moving || all_gave_up)) {
      // Before the data moves, the processes exchange the call's signatures
      // over the same links: every one reached the call, none could finish.
      const std::string how =
          moving ? " made no progress for " + SecondsText(limits().stall_s) + " on any of its processes"
                 : " timed out after " + SecondsText(limits().arrival_s) + ", though every process reached call #" +
                       std::to_string(sig.sequence) + ": none could exchange the call's signature with all the others";
      return Failed(Code::kDeadlineExceeded,
                    what + how + " (is a link between them down?): " + backend_error.message() +
                        LinkNotes(process_group_, process_group_[rank_]),
                    FailureKind::kTimeout, {}, sig);
    }
  }
  return Status(backend_error.code() == Code::kOk ? Code::kInternal : backend_error.code(),
                what + " failed: " + backend_error.message());
}

std::string Communicator::ReachedPrefix(uint64_t sequence) const {
  return "myplugin/collectives/reached/" + std::to_string(group_hash_) + "/" + std::to_string(sequence) + "/";
}

std::vector<int> Communicator::WithoutThoseInTheNextCall(const std::vector<int>& missing, uint64_t sequence) {
  // A peer that finished this call and waits in the next one learns of this
  // process's giving up from the connection it closes, and records that it
  // reached the next call at once: by now (kArrivalWaitS later) it has.
  const std::vector<int> left = Excluding(missing, InTheNextCall(missing, sequence));
  // The process that stopped never reached the next call: someone is left.
  return left.empty() ? missing : left;
}

std::vector<int> Communicator::InTheNextCall(const std::vector<int>& processes, uint64_t sequence) {
  const std::string prefix = ReachedPrefix(sequence + 1);
  auto reached = coordination_->KeyValueList(prefix);
  if (!reached.ok() || reached.value().empty()) return {};
  const GiveUps next = ReadGiveUps(reached.value(), prefix, process_group_[rank_]);
  std::vector<int> in;
  for (int p : processes) {
    if (next.present.count(p)) in.push_back(p);
  }
  return in;
}

std::optional<Status> Communicator::GaveUpOnTheCallBefore(const Signature& sig, const std::string& what,
                                                          const std::string& prefix, double waited,
                                                          const Status& backend_error) {
  // A peer still in the call before this one, which this process finished,
  // can be there only while its data moves: if it gave up on a stall, its
  // giving up closed this process's connection, and the stall is the cause.
  // (Each arrival at call k follows the end of call k - 1 on that process, so
  // no call earlier than the one before can hold a peer.)
  auto listed = coordination_->KeyValueList(prefix);
  if (!listed.ok()) return std::nullopt;
  GiveUps records = ReadGiveUps(listed.value(), prefix, process_group_[rank_]);
  const int peer = records.timed_out_peer;
  if (peer < 0) return std::nullopt;
  // This process finished that call: it is not among those who stopped.
  records.present.insert(process_group_[rank_]);
  const std::vector<int> missing = records.MissingOf(process_group_);
  if (missing.empty()) return std::nullopt;
  ProcessRuntime::Get().flight_recorder().End(record_, false);
  record_ = 0;
  const std::string before = std::to_string(sig.sequence - 1);
  const std::string why = what + " made no progress for " + records.peer_bound + " on process " + std::to_string(peer) +
                          ", in call #" + before + " (here its giving up closed a connection after " +
                          SecondsText(waited) + ": " + backend_error.message() + "): processes " + IdList(missing) +
                          " stopped moving data in call #" + before + " (stopped, stuck, or their link is down)" +
                          LinkNotes(missing, process_group_[rank_]);
  return Failed(Code::kDeadlineExceeded, why + WithTrace(why), FailureKind::kTimeout, missing, sig);
}

std::optional<Status> Communicator::Aborted() {
  std::lock_guard<std::mutex> lock(abort_mu_);
  return aborted_;
}

std::optional<Status> Communicator::KnownCause(const Signature& sig, const std::string& what) {
  // The round trip comes first: the client applies the service's frames in
  // order, so once the answer is back, every notice the service sent before
  // it (a peer's failure) is applied too, however slow this process's
  // receiving thread. A cause the service knew when it answered is never
  // missed (test_a_death_wins_over_the_connections_its_news_closes).
  const std::string key = MismatchKey(coordination_->epoch(), group_hash_, sig.sequence);
  StatusOr<std::string> mismatch = coordination_->KeyValueTryGet(key, /*during_failure=*/true);
  if (!mismatch.ok()) {
    // This communicator's own abort knows most (a peer that left, with the
    // call it left in): it wins over the job's failure it reported.
    std::optional<Status> failure = Aborted();
    if (!failure) failure = coordination_->failure();
    if (!failure) return std::nullopt;
    return OfCall(Status(Code::kAborted, what + " was aborted: " + failure->message()).WithFailureOf(*failure), sig);
  }
  // This call's own mismatch wins over a failure it led to (a peer that
  // reported it and left).
  StatusOr<std::string> classes = coordination_->KeyValueTryGet(MismatchCallsKey(key), /*during_failure=*/true);
  Status why = Failed(Code::kFailedPrecondition, mismatch.value() + WithTrace(mismatch.value()), FailureKind::kMismatch,
                      classes.ok() ? Differing(classes.value(), process_group_, rank_) : std::vector<int>{}, sig);
  std::lock_guard<std::mutex> lock(abort_mu_);
  aborted_ = why;
  return why;
}

template <typename Finish>
Status Communicator::RunInline(Signature sig, const void* payload, size_t bytes, Finish&& finish) {
  std::vector<char> records;
  StatusOr<uint32_t> tag = Begin(sig, payload, bytes, &records);
  if (tag.ok() && bytes > 0) finish(records.data(), record_size());
  EndCall(tag.ok());
  return tag.status();
}

Status Communicator::AllReduce(const void* send, void* recv, size_t count, DataType type, Reduction reduction,
                               uint64_t extra) {
  std::lock_guard<std::mutex> lock(call_mu_);
  Signature sig{CollectiveOp::kAllReduce, reduction, type, count};
  sig.extra = extra;
  StatusOr<ReduceFunction> fn = ReduceFunctionFor(type, reduction);
  if (!fn.ok()) return fn.status();
  const size_t bytes = count * ByteSize(type);
  if (bytes <= inline_bytes_) {
    // Every rank reduces the same records in rank order: identical results.
    return RunInline(sig, send, bytes,
                     [&](const char* records, size_t record) {
                       const size_t off = Signature::kEncodedSize;
                       std::memcpy(recv, records + off, bytes);
                       for (size_t r = 1; r < process_group_.size(); ++r) fn.value()(recv, recv, records + r * record + off, count);
                     });
  }
  if (bytes <= signed_bytes_limit()) {
    // Kept between calls (calls on a communicator are serialized): a fresh
    // buffer of megabytes costs page faults on every call.
    if (scratch_.size() < bytes * process_group_.size()) scratch_.resize(bytes * process_group_.size());
    char* all = scratch_.data();
    // This rank's own data is read where it is, unless the result overwrites it.
    const bool own_in_place = send != recv;
    Status st = RunSigned(sig, send, bytes, all, !own_in_place);
    if (!st.ok()) return st;
    // Every rank reduces in rank order: identical results everywhere.
    auto data = [&](size_t r) -> const void* {
      return static_cast<int>(r) == rank_ && own_in_place ? send : all + r * bytes;
    };
    if (process_group_.size() == 1) {
      if (recv != send) std::memcpy(recv, send, bytes);
      return OkStatus();
    }
    fn.value()(recv, data(0), data(1), count);
    for (size_t r = 2; r < process_group_.size(); ++r) fn.value()(recv, recv, data(r), count);
    return OkStatus();
  }
  return Run(sig, count, [&](uint32_t tag) {
    return DoAllReduce(send, recv, count, type, fn.value(), tag);
  });
}

Status Communicator::AllGather(const void* send, void* recv, size_t count, DataType type, uint64_t extra) {
  std::lock_guard<std::mutex> lock(call_mu_);
  Signature sig{CollectiveOp::kAllGather, Reduction::kNone, type, count};
  sig.extra = extra;
  const size_t bytes = count * ByteSize(type);
  if (bytes <= inline_bytes_) {
    return RunInline(sig, send, bytes,
                     [&](const char* records, size_t record) {
                       for (size_t r = 0; r < process_group_.size(); ++r) {
                         std::memcpy(static_cast<char*>(recv) + r * bytes, records + r * record + Signature::kEncodedSize,
                                     bytes);
                       }
                     });
  }
  if (bytes <= signed_bytes_limit()) {
    return RunSigned(sig, send, bytes, static_cast<char*>(recv));
  }
  return Run(sig, count, [&](uint32_t tag) {
    return DoAllGatherBytes(send, recv, count * ByteSize(type), tag);
  });
}

Status Communicator::ReduceScatter(const void* send, void* recv, size_t count, DataType type, Reduction reduction,
                                   uint64_t extra) {
  std::lock_guard<std::mutex> lock(call_mu_);
  Signature sig{CollectiveOp::kReduceScatter, reduction, type, count};
  sig.extra = extra;
  if (count % process_group_.size() != 0) {
    return InvalidArgument("reduce-scatter of " + std::to_string(count) + " elements over " +
                           std::to_string(process_group_.size()) + " processes: the count must divide evenly");
  }
  StatusOr<ReduceFunction> fn = ReduceFunctionFor(type, reduction);
  if (!fn.ok()) return fn.status();
  return Run(sig, count, [&](uint32_t tag) { return DoReduceScatter(send, recv, count, type, fn.value(), tag); });
}

Status Communicator::DoReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceFunction fn,
                                     uint32_t tag) {
  // The whole sum lands in the scratch kept between calls (under the call
  // lock, as for the one-round-trip all-reduce): a fresh buffer of the whole
  // array each call cost more than the all-reduce itself (page faults and
  // zeroing: 16 MB, 2 processes, shared memory: 15 ms against the
  // all-reduce's 4).
  const size_t bytes = count * ByteSize(type);
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  Status st = DoAllReduce(send, scratch_.data(), count, type, fn, tag);
  const size_t block = count / process_group_.size() * ByteSize(type);
  if (st.ok() && block) std::memcpy(recv, scratch_.data() + rank_ * block, block);
  return st;
}

Status Communicator::AllToAll(const void* send, void* recv, size_t count, DataType type) {
  std::lock_guard<std::mutex> lock(call_mu_);
  if (count % process_group_.size() != 0) {
    return InvalidArgument("all-to-all of " + std::to_string(count) + " elements over " +
                           std::to_string(process_group_.size()) + " processes: the count must divide evenly");
  }
  return Run({CollectiveOp::kAllToAll, Reduction::kNone, type, count}, count, [&](uint32_t tag) {
    return DoAllToAllBytes(send, recv, count / process_group_.size() * ByteSize(type), tag);
  });
}

Status Communicator::Exchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                              DataType type, size_t count, uint64_t pairs_hash) {
  std::lock_guard<std::mutex> lock(call_mu_);
  for (const auto& b : sends) {
    if (b.peer < 0 || b.peer >= size()) return InvalidArgument("exchange with a rank outside the process group");
  }
  for (const auto& b : recvs) {
    if (b.peer < 0 || b.peer >= size()) return InvalidArgument("exchange with a rank outside the process group");
  }
  Signature sig{CollectiveOp::kCollectivePermute, Reduction::kNone, type, count};
  sig.extra = pairs_hash;
  // Every rank takes part, even one that moves nothing: a backend whose
  // transfers are collective steps (shared memory) needs every rank there.
  return Run(sig, count, [&](uint32_t tag) { return DoExchange(sends, recvs, tag); });
}

Status Communicator::Agree(CollectiveOp op, Reduction reduction, DataType type, size_t count, uint64_t extra) {
  std::lock_guard<std::mutex> lock(call_mu_);
  Signature sig{op, reduction, type, count};
  sig.extra = extra;
  return Run(sig, 0, [](uint32_t) { return OkStatus(); });
}

// The signature exchange is itself a barrier.
Status Communicator::Barrier() { return Agree(CollectiveOp::kBarrier, Reduction::kNone, DataType::kU8, 0); }

}  // namespace myplugin::collectives
