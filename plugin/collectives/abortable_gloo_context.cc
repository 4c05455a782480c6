#include "collectives/abortable_gloo_context.h"

#include <gloo/transport/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>

namespace myplugin::collectives {

class AbortableGlooContext::Buffers {
 public:
  class Wrapper;

  void Add(Wrapper* b);
  void Remove(Wrapper* b) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(b);
  }
  void Abort(const std::string& why);
  // Throws once the context was aborted.
  void ThrowIfAborted() {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) throw std::runtime_error(why_);
  }

 private:
  std::mutex mu_;
  std::set<Wrapper*> live_;
  bool aborted_ = false;
  std::string why_;
};

// Forwards everything to the transport's own buffer (which the pairs know
// and write into); a wait that the abort ended throws instead of returning
// false, which Gloo's algorithms do not check.
class AbortableGlooContext::Buffers::Wrapper : public gloo::transport::UnboundBuffer {
 public:
  Wrapper(std::unique_ptr<gloo::transport::UnboundBuffer> inner, std::shared_ptr<Buffers> buffers)
      : UnboundBuffer(inner->ptr, inner->size), inner_(std::move(inner)), buffers_(std::move(buffers)) {
    buffers_->Add(this);
  }
  ~Wrapper() override { buffers_->Remove(this); }

  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override {
    buffers_->ThrowIfAborted();
    const bool done = inner_->waitRecv(rank, timeout);
    if (!done) buffers_->ThrowIfAborted();
    return done;
  }
  bool waitSend(int* rank, std::chrono::milliseconds timeout) override {
    buffers_->ThrowIfAborted();
    const bool done = inner_->waitSend(rank, timeout);
    if (!done) buffers_->ThrowIfAborted();
    return done;
  }
  void abortWaitRecv() override { inner_->abortWaitRecv(); }
  void abortWaitSend() override { inner_->abortWaitSend(); }
  void send(int dst, uint64_t slot, size_t offset, size_t nbytes) override { inner_->send(dst, slot, offset, nbytes); }
  void recv(int src, uint64_t slot, size_t offset, size_t nbytes) override { inner_->recv(src, slot, offset, nbytes); }
  void recv(std::vector<int> srcs, uint64_t slot, size_t offset, size_t nbytes) override {
    inner_->recv(std::move(srcs), slot, offset, nbytes);
  }

 private:
  const std::unique_ptr<gloo::transport::UnboundBuffer> inner_;
  const std::shared_ptr<Buffers> buffers_;
};

void AbortableGlooContext::Buffers::Add(Wrapper* b) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.insert(b);
  // Made after the abort: its first wait throws (ThrowIfAborted) anyway.
}

void AbortableGlooContext::Buffers::Abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return;
  aborted_ = true;
  why_ = why;
  // Under the lock, so no wrapper is destroyed meanwhile. An abort flag
  // stays set until a wait takes it: a buffer not waiting now throws at its
  // next wait (which checks aborted_ first).
  for (Wrapper* b : live_) {
    b->abortWaitRecv();
    b->abortWaitSend();
  }
}

namespace {

// The transport's context, with its buffers wrapped; the pairs stay the
// transport's own (they refer to its context, not this one).
class WrappingTransport : public gloo::transport::Context {
 public:
  WrappingTransport(std::shared_ptr<gloo::transport::Context> inner,
                    std::shared_ptr<AbortableGlooContext::Buffers> buffers)
      : Context(inner->rank, inner->size), inner_(std::move(inner)), buffers_(std::move(buffers)) {}

  std::unique_ptr<gloo::transport::Pair>& getPair(int rank) override { return inner_->getPair(rank); }
  std::unique_ptr<gloo::transport::Pair>& createPair(int rank) override { return inner_->createPair(rank); }
  std::unique_ptr<gloo::transport::UnboundBuffer> createUnboundBuffer(void* ptr, size_t size) override {
    return std::make_unique<AbortableGlooContext::Buffers::Wrapper>(inner_->createUnboundBuffer(ptr, size), buffers_);
  }

 private:
  const std::shared_ptr<gloo::transport::Context> inner_;
  const std::shared_ptr<AbortableGlooContext::Buffers> buffers_;
};

}  // namespace

AbortableGlooContext::AbortableGlooContext(int rank, int size)
    : gloo::rendezvous::Context(rank, size), buffers_(std::make_shared<Buffers>()) {}

AbortableGlooContext::~AbortableGlooContext() = default;

void AbortableGlooContext::Wrap() {
  if (!transportContext_ || dynamic_cast<WrappingTransport*>(transportContext_.get())) return;
  transportContext_ = std::make_shared<WrappingTransport>(transportContext_, buffers_);
}

void AbortableGlooContext::Abort(const std::string& why) { buffers_->Abort(why); }

}  // namespace myplugin::collectives
