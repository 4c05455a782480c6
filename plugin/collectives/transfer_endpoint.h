// Direct transfers of one array between two processes (jax.device_put onto
// another process's device: pjrt/cross_host_transfers.cc). The coordination
// service only introduces the two sides; the bytes go over a connection
// between them.
//
// Each process opens one endpoint (a listening TCP socket at the address its
// collectives use between hosts) on first use and publishes it once, with a
// random secret, in the key-value store under the membership epoch. A sender
// connects to the receiver (one connection per ordered pair of processes,
// kept for later transfers) and proves the secret. Between two processes of
// one host (their host identities agree) the connection is an abstract Unix
// socket instead, and the sender hands over a ring of a few pieces (a
// memfd, which the kernel frees with the last process that maps it): each
// piece is copied into a slot by the sender and out of it by the receiver,
// and only notices cross the socket. Per transfer, on that connection:
//   sender -> header: transfer key, source and destination device, element
//             type, dims and byte count
//   receiver -> reply: OK once a receive with that key and devices is
//             posted and its type and shape agree; else the reason (a
//             mismatch names both sides), and no data follows
//   sender -> the bytes, in pieces of at most kTransferPieceBytes, each
//             read from the source and handed to the sink as it comes (on
//             one host: a notice per piece put in the ring, and the
//             receiver's notice per slot freed), so memory stays at the ring
//             or a piece per side, whatever the size
//   receiver -> (only on a failure while the bytes move) a reply with the
//             reason; then it closes the connection. A sender whose source
//             fails says why in the same way.
// Sends are queued per destination and run on that destination's thread,
// so a send never blocks its caller, and two processes sending to each other
// at once do not wait on each other. A receive is matched by its key and
// devices, not by arrival order.
//
// Waits follow the collectives' bounds (call_clock.h): the arrival bound
// until the other side is there (the header for a receive, the reply for a
// send), then the stall bound between pieces. A closed connection ends the
// other side's wait at once, and the coordination service's failure notice
// ends every wait; both name the peer and the cause. Each transfer is a call
// in the flight recorder ("send"/"receive" of u8[bytes], with the peer).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collectives/call_clock.h"
#include "collectives/fd_passing.h"
#include "common/status.h"
#include "coordination/client.h"
#include "coordination/socket.h"

namespace myplugin::collectives {

// The largest piece of a transfer: what each side holds at once. Measured
// with bench/cross_host_transfers.py (docs/performance.md).
inline constexpr size_t kTransferPieceBytes = size_t{16} << 20;

// What one transfer carries, as both sides name it.
struct TransferSpec {
  int64_t key = 0;  // jax's transfer key
  int32_t src_device = 0, dst_device = 0;  // global device ids
  int32_t element_type = 0;  // PJRT_Buffer_Type
  std::vector<int64_t> dims;
  uint64_t bytes = 0;

  // "transfer 3 from device 0 to device 2"
  std::string Name() const;
  // "type 11 [8,8] (256 bytes)"
  std::string Shape() const;
};

// Fills `size` bytes of the array at `offset`: returns where they are (its
// own memory, or `scratch`, which holds kTransferPieceBytes, after filling).
using PieceSource = std::function<StatusOr<const char*>(uint64_t offset, size_t size, char* scratch)>;
// Takes the bytes at `offset` (they may go away when it returns); `last`
// for the final piece (the only one, of no bytes, for an empty array).
using PieceSink = std::function<Status(uint64_t offset, const char* data, size_t size, bool last)>;

class TransferEndpoint {
 public:
  // Listens and publishes this process's endpoint for `epoch` (process ids
  // are indexes among the epoch's members; `same_host[p]`: process p can
  // share memory with this one).
  static StatusOr<std::unique_ptr<TransferEndpoint>> Create(std::shared_ptr<coordination::CoordinationClient> client,
                                                            uint64_t epoch, int my_process, int num_processes,
                                                            const std::string& listen_host,
                                                            std::vector<bool> same_host, WaitLimits limits);
  // Ends every wait, closes every connection and joins the threads.
  ~TransferEndpoint();
  TransferEndpoint(const TransferEndpoint&) = delete;
  TransferEndpoint& operator=(const TransferEndpoint&) = delete;

  // Queues a send to `dst_process`; `done` runs once, on that process's
  // sender thread, when the last byte was handed to the connection or the
  // send failed. `source` is called on that thread.
  void Send(int dst_process, const TransferSpec& spec, PieceSource source, std::function<void(const Status&)> done);

  // A receive: posted, then waited for. `sink` runs on the connection's
  // thread; Wait returns once it will not run again. `landing`, when given,
  // is where the bytes may go directly (the expected byte count, the
  // receiver's until Wait returns): a piece that comes over a socket is
  // read into it, and the sink then gets a pointer into it, with nothing
  // left to copy (a piece through a ring still comes from the ring).
  class Receive;
  std::shared_ptr<Receive> Post(int src_process, const TransferSpec& expected, PieceSink sink,
                                char* landing = nullptr);
  Status Wait(const std::shared_ptr<Receive>& receive);

  // Ends every wait with `why` (a failure the coordination service reported).
  void Abort(const Status& why);

  int process() const { return me_; }
  uint64_t epoch() const { return epoch_; }

 private:
  struct Outgoing;
  struct Incoming;
  struct SendJob;
  TransferEndpoint(std::shared_ptr<coordination::CoordinationClient> client, uint64_t epoch, int me, int n,
                   WaitLimits limits, coordination::Socket listener, Fd unix_listener, std::string secret,
                   std::vector<bool> same_host);
  void AcceptLoop();
  void ReadLoop(Incoming* in);
  void SendLoop(Outgoing* out);
  Status RunSend(Outgoing* out, SendJob& job);
  // The bytes of a send whose receiver said yes: over the socket, or
  // through the ring (`what` and `lost` explain failures).
  Status StreamOverSocket(Outgoing* out, SendJob& job, const std::string& what,
                          const std::function<Status(const Status&)>& lost);
  Status StreamThroughRing(Outgoing* out, SendJob& job, const std::string& what,
                           const std::function<Status(const Status&)>& lost);
  Status Connect(Outgoing* out);
  // Serves one header on `in`: match, reply, take the bytes. An error that
  // leaves the connection out of step closes it (returns false).
  bool ServeTransfer(Incoming* in, const TransferSpec& spec);
  // What the coordination service knows of `process`'s failure, waiting a
  // moment for its notice; the transfer's own text if nothing.
  Status WithCause(const Status& st, int process);
  std::optional<Status> aborted();

  const std::shared_ptr<coordination::CoordinationClient> client_;
  const uint64_t epoch_;
  const int me_, n_;
  const WaitLimits limits_;
  coordination::Socket listener_;
  Fd unix_listener_;  // an abstract Unix socket, for processes of this host
  const std::string secret_;
  const std::vector<bool> same_host_;
  int failure_callback_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                // under mu_
  std::optional<Status> aborted_;       // under mu_
  // Posted receives not yet matched, by (source process, key, source device, destination device).
  using Key = std::tuple<int, int64_t, int32_t, int32_t>;
  std::map<Key, std::shared_ptr<Receive>> posted_;  // under mu_
  // Receives that gave up (their reason), for a header that comes after.
  std::map<Key, std::string> gave_up_;  // under mu_
  std::vector<std::unique_ptr<Outgoing>> outgoing_;  // one per destination, made at Create
  std::vector<std::unique_ptr<Incoming>> incoming_;  // under mu_
  std::thread acceptor_;
};

}  // namespace myplugin::collectives
