// Delays that tests inject where the error path races: where one process
// can see the effect of a failure (a closed connection) before its cause (a
// failure notice, a mismatch report). Unset, each point costs one relaxed
// atomic load. Set only through the Python module's
// set_fault_delay (tests/test_collectives.py), never from the environment.
#pragma once

namespace myplugin {

enum class FaultPoint : int {
  // The coordination client's receiver, before it applies a failure notice
  // (a starved or slow receiving thread).
  kFailureNotice = 0,
  // A communicator, after its signature left for its peers and before it
  // reads theirs (a process late to read while its peers already moved on).
  // On shared memory, where signatures travel as an all-gather, it is the
  // first chunk of every all-gather, before this process says it is there.
  kSignatureSent = 1,
  // A communicator's wait for a peer that left (entered shutdown), after
  // the grace and before it gives up: a process slower to give up than
  // another that waits for the same peer.
  kPeerExitGrace = 2,
  // An NCCL call, after its guard passed and before NCCL's call is made (a
  // thread preempted there while another aborts the communicator).
  kNcclEnqueue = 3,
  kCount = 4,
};

// Every later pass through `point` in this process sleeps `seconds` (0: none).
void SetFaultDelay(FaultPoint point, double seconds);
// Sleeps for `point`'s delay, if one is set.
void FaultDelay(FaultPoint point);

}  // namespace myplugin
