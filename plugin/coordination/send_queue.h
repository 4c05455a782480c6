// The frames waiting to be sent to one connection, bounded in bytes. The
// service's state lock is held only to push; a writer thread per member
// pops and does the (possibly slow) sending, so a peer that stops reading
// holds up nobody but itself.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

namespace myplugin::coordination {

class SendQueue {
 public:
  explicit SendQueue(size_t max_bytes) : max_bytes_(max_bytes) {}

  // False when the frame would take the queue over its bound: the queue is
  // then closed (overflowed() is true) and the frame dropped.
  bool Push(std::shared_ptr<const std::string> frame);
  // The next frame, waiting for one; null once the queue is closed.
  std::shared_ptr<const std::string> Pop();
  // The next frame if there is one, without waiting.
  std::shared_ptr<const std::string> TryPop();
  // After Pop(): that frame is on the wire (or never will be).
  void Sent(size_t bytes);
  // Stops the writer now; queued frames are dropped.
  void Abort();

  bool overflowed() const;
  // Bytes queued or being sent.
  size_t bytes() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<const std::string>> frames_;
  const size_t max_bytes_;
  size_t bytes_ = 0;
  bool closed_ = false;
  bool overflowed_ = false;
};

}  // namespace myplugin::coordination
