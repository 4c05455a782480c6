#include "collectives/gloo_communicator.h"

#include <dlfcn.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <algorithm>
#include <cstring>
#include <exception>

#include "collectives/abortable_gloo_context.h"
#include "common/deadline.h"
#include "common/fault_delays.h"

namespace myplugin::collectives {
namespace {

// A c128 element for Gloo: Gloo splits buffers on element boundaries, so a
// complex number must be one element, never two halves.
struct alignas(16) Complex128Bits {
  uint64_t re, im;
};


// Gloo's rendezvous store on our key-value store. Gloo reports a failed
// store call by exception; the messages name the key.
class KeyValueStore : public gloo::rendezvous::Store {
 public:
  KeyValueStore(std::shared_ptr<coordination::CoordinationClient> client, std::string prefix, double timeout_s)
      : client_(std::move(client)), prefix_(std::move(prefix)), timeout_s_(timeout_s) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Status st = client_->KeyValueSet(prefix_ + key, std::string(data.begin(), data.end()));
    if (!st.ok()) throw std::runtime_error("gloo rendezvous: " + st.message());
  }

  std::vector<char> get(const std::string& key) override {
    StatusOr<std::string> v = client_->KeyValueGet(prefix_ + key, timeout_s_);
    if (!v.ok()) throw std::runtime_error("gloo rendezvous: " + v.status().message());
    return std::vector<char>(v.value().begin(), v.value().end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, Millis(timeout_s_)); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) {
      StatusOr<std::string> v = client_->KeyValueGet(prefix_ + key, timeout.count() / 1000.0);
      if (!v.ok()) throw std::runtime_error("gloo rendezvous: " + v.status().message());
    }
  }

 private:
  std::shared_ptr<coordination::CoordinationClient> client_;
  std::string prefix_;
  double timeout_s_;
};

// The unit of progress of a point-to-point transfer (DoExchange).
constexpr size_t kProgressPieceBytes = size_t{4} << 20;

// Runs a Gloo call, turning its exceptions into a Status.
template <typename F>
Status Guarded(F&& f) {
  try {
    f();
    return OkStatus();
  } catch (const std::exception& e) {
    std::string what = e.what();
    Code code = what.find("imed out") != std::string::npos ? Code::kDeadlineExceeded : Code::kUnavailable;
    return Status(code, what);
  }
}

}  // namespace

StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    std::vector<int> process_group, int my_process, WaitLimits limits, const std::string& local_host,
    std::shared_ptr<coordination::CoordinationClient> coordination, const std::string& key_prefix) {
  const double timeout_s = limits.arrival_s;
  int rank = -1;
  for (size_t r = 0; r < process_group.size(); ++r) {
    if (process_group[r] == my_process) rank = static_cast<int>(r);
  }
  if (rank < 0) {
    return InvalidArgument("process " + std::to_string(my_process) + " is not in the process group " + IdList(process_group));
  }
  auto context = std::make_shared<AbortableGlooContext>(rank, static_cast<int>(process_group.size()));
  Status st = Guarded([&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = local_host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    KeyValueStore store(coordination, key_prefix, timeout_s);
    context->setTimeout(Millis(timeout_s));
    context->connectFullMesh(store, device);
    context->Wrap();
  });
  if (!st.ok()) {
    return Status(st.code(), "connecting the Gloo communicator of processes " + IdList(process_group) + " failed: " +
                                 st.message());
  }
  return std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(std::move(process_group), rank, limits, std::move(coordination), std::move(context)));
}

GlooCommunicator::GlooCommunicator(std::vector<int> process_group, int rank, WaitLimits limits,
                                   std::shared_ptr<coordination::CoordinationClient> coordination,
                                   std::shared_ptr<AbortableGlooContext> context)
    : Communicator(std::move(process_group), rank, limits, std::move(coordination)), context_(std::move(context)) {}

GlooCommunicator::~GlooCommunicator() = default;

Status GlooCommunicator::DoAllGatherBytes(const void* send, void* recv, size_t bytes, uint32_t tag) {
  return Guarded([&] {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(const_cast<char*>(static_cast<const char*>(send)), bytes);
    opts.setOutput(static_cast<char*>(recv), bytes * context_->size);
    opts.setTag(tag);
    opts.setTimeout(Millis(WaitSeconds()));
    gloo::allgather(opts);
  });
}

Status GlooCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DataType type, ReduceFunction fn,
                                     uint32_t tag) {
  const size_t bytes = count * ByteSize(type);
  if (recv != send) std::memcpy(recv, send, bytes);
  return Guarded([&] {
    gloo::AllreduceOptions opts(context_);
    // Gloo reduces in place over a byte buffer; the element type is ours.
    switch (ByteSize(type)) {
      case 1: opts.setOutput(static_cast<uint8_t*>(recv), count); break;
      case 2: opts.setOutput(static_cast<uint16_t*>(recv), count); break;
      case 4: opts.setOutput(static_cast<uint32_t*>(recv), count); break;
      case 8: opts.setOutput(static_cast<uint64_t*>(recv), count); break;
      default: opts.setOutput(static_cast<Complex128Bits*>(recv), count);
    }
    opts.setReduceFunction([fn](void* c, const void* a, const void* b, size_t n) { fn(c, a, b, n); });
    opts.setTag(tag);
    opts.setTimeout(Millis(WaitSeconds()));
    gloo::allreduce(opts);
  });
}

Status GlooCommunicator::DoAllToAllBytes(const void* send, void* recv, size_t bytes_per_rank, uint32_t tag) {
  return Guarded([&] {
    gloo::AlltoallOptions opts(context_);
    opts.setInput(const_cast<char*>(static_cast<const char*>(send)), bytes_per_rank * context_->size);
    opts.setOutput(static_cast<char*>(recv), bytes_per_rank * context_->size);
    opts.setTag(tag);
    opts.setTimeout(Millis(WaitSeconds()));
    gloo::alltoall(opts);
  });
}

Status GlooCommunicator::DoExchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                                    uint32_t tag) {
  return Guarded([&] {
    // In pieces, so that each wait is bounded by the time since the last
    // piece (progress), not the time a whole buffer takes on a slow link.
    // Pieces of one buffer, slot and peer match in the order they are posted.
    struct Posted {
      std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
      size_t pieces;
    };
    auto pieces = [](size_t bytes) { return (bytes + kProgressPieceBytes - 1) / kProgressPieceBytes; };
    std::vector<Posted> in, out;
    for (const auto& r : recvs) {
      if (r.bytes == 0) continue;
      in.push_back({context_->createUnboundBuffer(r.data, r.bytes), pieces(r.bytes)});
      for (size_t off = 0; off < r.bytes; off += kProgressPieceBytes) {
        in.back().buffer->recv(r.peer, tag, off, std::min(kProgressPieceBytes, r.bytes - off));
      }
    }
    for (const auto& s : sends) {
      if (s.bytes == 0) continue;
      out.push_back({context_->createUnboundBuffer(s.data, s.bytes), pieces(s.bytes)});
      for (size_t off = 0; off < s.bytes; off += kProgressPieceBytes) {
        out.back().buffer->send(s.peer, tag, off, std::min(kProgressPieceBytes, s.bytes - off));
      }
    }
    // The cap bounds the whole call, also one whose pieces never wait long.
    // Pieces still posted must not outlive their buffers: the pairs are
    // failed first, as a timed-out wait of Gloo's own does.
    auto capped = [this] {
      if (!CapReached()) return;
      DoAbort();
      throw std::runtime_error("Timed out: the call reached its cap");
    };
    for (auto& b : out) {
      for (size_t i = 0; i < b.pieces; ++i) {
        capped();
        if (!b.buffer->waitSend(Millis(WaitSeconds()))) throw std::runtime_error("send aborted");
      }
    }
    for (auto& b : in) {
      for (size_t i = 0; i < b.pieces; ++i) {
        capped();
        if (!b.buffer->waitRecv(Millis(WaitSeconds()))) throw std::runtime_error("receive aborted");
      }
    }
  });
}

Status GlooCommunicator::DoReduceScatter(const void* send, void* recv, size_t count, DataType type,
                                         ReduceFunction fn, uint32_t tag) {
  const int n = context_->size, me = context_->rank;
  const size_t elem = ByteSize(type), block = count / n * elem;
  if (n == 1) {
    if (block) std::memcpy(recv, send, block);
    return OkStatus();
  }
  // At step s this rank passes on its partial sum of block (me - s - 1)
  // mod n (at step 0, its own data) and adds its own data of block
  // (me - s - 2) mod n to the previous rank's partial of it, which it passes
  // on at the next step; after n - 1 steps that is block `me`, whole, written
  // into `recv`. Two blocks of scratch, kept between calls (calls on a
  // communicator run one at a time).
  const char* own = static_cast<const char*>(send);
  if (ring_blocks_.size() < 2 * block) ring_blocks_.resize(2 * block);
  char* partial = ring_blocks_.data();
  char* incoming = ring_blocks_.data() + block;
  const int next = (me + 1) % n, prev = (me - 1 + n) % n;
  return Guarded([&] {
    for (int s = 0; s < n - 1; ++s) {
      // Above the payload (bit 32) and record-round (bit 40) slots, below Gloo's own (bits 56 and up).
      const uint64_t slot = (uint64_t{1} << 48) | (uint64_t{tag} << 16) | static_cast<uint64_t>(s);
      const int out_block = ((me - s - 1) % n + n) % n, in_block = ((me - s - 2) % n + n) % n;
      auto out = context_->createUnboundBuffer(s == 0 ? const_cast<char*>(own + out_block * block) : partial, block);
      auto in = context_->createUnboundBuffer(incoming, block);
      out->send(next, slot);
      in->recv(prev, slot);
      if (!in->waitRecv(Millis(WaitSeconds()))) throw std::runtime_error("receive aborted");
      if (!out->waitSend(Millis(WaitSeconds()))) throw std::runtime_error("send aborted");
      char* sum = s == n - 2 ? static_cast<char*>(recv) : partial;
      fn(sum, own + in_block * block, incoming, count / n);
    }
  });
}

// The records alone, from groups of kLogExchangeFrom processes on: Bruck's
// all-gather, ceil(log2 n) rounds, in round k each rank sending what it holds
// (its own record and those it received, up to 2^k of them) to the rank 2^k
// below it and receiving as many from the rank 2^k above. A direct exchange
// sends n - 1 records and waits on n - 1 peers each call: measured linear in
// n (bench/agreement.py: ~30 us a peer over TCP), 32 ms a call at 1,024
// processes, where this takes about log2 n round trips.
Status GlooCommunicator::GatherRecords(const char* record, size_t record_bytes, char* records,
                                       const std::function<Status(const char*)>& check, uint32_t tag) {
  const int n = context_->size, me = context_->rank;
  // held[i]: the record of rank (me + i) % n.
  std::vector<char> held(static_cast<size_t>(n) * record_bytes);
  std::memcpy(held.data(), record, record_bytes);
  Status check_status;
  Status st = Guarded([&] {
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends;
    for (int k = 0, have = 1; have < n; ++k) {
      const int dist = have;  // 2^k: the records held so far
      const int count = std::min(dist, n - dist);
      // Each round's slot lies above the payload slots (bit 32) and below
      // the prefixed slots of Gloo's own algorithms (bits 56 and up).
      const uint64_t slot = (uint64_t{1} << 40) | (uint64_t{tag} << 6) | static_cast<uint64_t>(k);
      sends.push_back(context_->createUnboundBuffer(held.data(), count * record_bytes));
      sends.back()->send((me - dist + n) % n, slot);
      if (k == 0) FaultDelay(FaultPoint::kSignatureSent);
      auto in = context_->createUnboundBuffer(held.data() + dist * record_bytes, count * record_bytes);
      in->recv((me + dist) % n, slot);
      if (!in->waitRecv(Millis(WaitSeconds()))) throw std::runtime_error("receive aborted");
      have += count;
    }
    for (int i = 0; i < n; ++i) {
      std::memcpy(records + ((me + i) % n) * record_bytes, held.data() + i * record_bytes, record_bytes);
    }
    check_status = check(records);
    if (!check_status.ok()) {
      DoAbort();
      return;
    }
    for (auto& b : sends) {
      if (!b->waitSend(Millis(WaitSeconds()))) throw std::runtime_error("send aborted");
    }
  });
  if (!check_status.ok()) return check_status;
  return st;
}

Status GlooCommunicator::DoSignedExchange(const char* record, size_t record_bytes, char* records, const void* payload,
                                          size_t bytes, char* payloads,
                                          const std::function<Status(const char*)>& check, uint32_t tag,
                                          bool copy_own) {
  // The payload's slot lies above every 32-bit tag of ours and below the
  // prefixed slots of Gloo's own algorithms.
  const uint64_t payload_slot = (uint64_t{1} << 32) | tag;
  const int n = context_->size, me = context_->rank;
  if (n >= kLogExchangeFrom) {
    // Every call of a group this size starts with the same rounds, whatever
    // path its size takes, so calls of different paths still compare; a
    // payload (none at this size in practice: signed_bytes_limit) follows
    // once the records agree, gathered under the call's next tag as on a
    // backend without a signed exchange (Communicator::Begin).
    MYPLUGIN_RETURN_IF_ERROR(GatherRecords(record, record_bytes, records, check, tag));
    return bytes == 0 ? OkStatus() : DoAllGatherBytes(payload, payloads, bytes, tag + 1);
  }
  std::memcpy(records + me * record_bytes, record, record_bytes);
  if (bytes && copy_own) std::memcpy(payloads + me * bytes, payload, bytes);
  Status check_status;
  Status st = Guarded([&] {
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> record_in, record_out, data_in, data_out;
    for (int peer = 0; peer < n; ++peer) {
      if (peer == me) continue;
      record_in.push_back(context_->createUnboundBuffer(records + peer * record_bytes, record_bytes));
      record_in.back()->recv(peer, tag);
      record_out.push_back(context_->createUnboundBuffer(const_cast<char*>(record), record_bytes));
      record_out.back()->send(peer, tag);
      if (bytes) {
        data_out.push_back(context_->createUnboundBuffer(const_cast<void*>(payload), bytes));
        data_out.back()->send(peer, payload_slot);
      }
    }
    FaultDelay(FaultPoint::kSignatureSent);
    for (auto& b : record_in) {
      if (!b->waitRecv(Millis(WaitSeconds()))) throw std::runtime_error("receive aborted");
    }
    check_status = check(records);
    if (!check_status.ok()) {
      // Our payload may be on its way to a peer that will never take it.
      DoAbort();
      return;
    }
    if (bytes) {
      for (int peer = 0; peer < n; ++peer) {
        if (peer == me) continue;
        data_in.push_back(context_->createUnboundBuffer(payloads + peer * bytes, bytes));
        data_in.back()->recv(peer, payload_slot);
      }
    }
    for (auto& b : record_out) {
      if (!b->waitSend(Millis(WaitSeconds()))) throw std::runtime_error("send aborted");
    }
    for (auto& b : data_out) {
      if (!b->waitSend(Millis(WaitSeconds()))) throw std::runtime_error("send aborted");
    }
    for (auto& b : data_in) {
      if (!b->waitRecv(Millis(WaitSeconds()))) throw std::runtime_error("receive aborted");
    }
  });
  if (!check_status.ok()) return check_status;
  return st;
}

namespace {

// Gloo's TCP pair can fail every pending send and receive on it
// (tcp::Pair::signalExceptionExternal, what Gloo does itself when a wait
// times out), but Debian's libgloo-dev ships tcp/pair.h without a header it
// includes, so the method is found by its symbol. Itanium C++ ABI: a
// non-virtual member function returning a class by value takes the result
// slot first, then `this`, exactly like this free function.
using SignalPairFn = std::exception_ptr (*)(void* pair, const std::string& message);

SignalPairFn SignalPair() {
  static SignalPairFn fn = reinterpret_cast<SignalPairFn>(dlsym(
      RTLD_DEFAULT,
      "_ZN4gloo9transport3tcp4Pair23signalExceptionExternalERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"));
  return fn;
}

}  // namespace

// Gloo's closeConnections() only sets SO_LINGER on the sockets: a wait in
// progress stays asleep (the survivors of a dead peer then left only through
// the fate-sharing exit). Failing every pair ends its transfers and fails
// its queued operations; the context then wakes every wait left (a receive
// whose data had begun), so the call returns our error, which names the
// failed process.
void GlooCommunicator::DoAbort() {
  if (SignalPairFn signal = SignalPair()) {
    for (int i = 0; i < context_->size; ++i) {
      if (i == context_->rank) continue;
      try {
        if (gloo::transport::Pair* pair = context_->getPair(i).get()) signal(pair, "myplugin aborted the collective");
      } catch (const std::exception&) {
        // A pair that never connected has nothing to wake.
      }
    }
    // Only now no transfer writes into a buffer whose wait ends.
    context_->Abort("myplugin aborted the collective");
  }
  context_->closeConnections();
}

}  // namespace myplugin::collectives
