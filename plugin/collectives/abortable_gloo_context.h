// A Gloo context whose every wait ends when it is aborted. Failing a Gloo
// TCP pair fails the operations queued on it, but not the receive whose
// data had begun to arrive (tcp::Pair::signalException skips the operation
// being read), so a wait on that receive slept on until its timeout: the
// stall bound, a minute by default, after a peer's death was known. Here
// every unbound buffer the context makes, for Gloo's algorithms and for
// ours, is a thin wrapper the context can wake: once aborted, every wait,
// in progress or later, throws.
#pragma once

#include <gloo/rendezvous/context.h>

#include <memory>
#include <string>

namespace myplugin::collectives {

class AbortableGlooContext : public gloo::rendezvous::Context {
 public:
  AbortableGlooContext(int rank, int size);
  ~AbortableGlooContext() override;

  // Routes buffer creation through the wrappers; once, after
  // connectFullMesh made the transport's context.
  void Wrap();
  // Ends every wait on this context's buffers with an exception that says
  // `why`, and every later one. Call it after failing the pairs, so that no
  // transfer still writes into a buffer whose wait has ended.
  void Abort(const std::string& why);

  class Buffers;  // the live wrappers, and whether the context was aborted

 private:
  std::shared_ptr<Buffers> buffers_;
};

}  // namespace myplugin::collectives
