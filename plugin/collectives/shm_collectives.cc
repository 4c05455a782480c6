// The same-host backend's collectives: all-gather, all-reduce, broadcast, all-to-all
// and exchange, each moved through the segment's slots in chunks, a Step between.
#include "collectives/shm_communicator.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "collectives/defaults.h"
#include "collectives/streaming_copy.h"
#include "common/fault_delays.h"

namespace myplugin::collectives {

Status ShmCommunicator::DoAllGatherBytes(const void* send, void* recv, size_t bytes, uint32_t) {
  const int n = size(), me = rank();
  char* out = static_cast<char*>(recv);
  const char* in = static_cast<const char*>(send);
  for (size_t off = 0; off < bytes; off += slot_bytes_) {
    const size_t len = std::min(slot_bytes_, bytes - off);
    const int half = static_cast<int>(phase_++ & 1);
    std::memcpy(slot(half, me), in + off, len);
    if (off == 0) FaultDelay(FaultPoint::kSignatureSent);
    MYPLUGIN_RETURN_IF_ERROR(Step());
    for (int r = 0; r < n; ++r) {
      char* dst = out + r * bytes + off;
      const char* src = r == me ? in + off : slot(half, r);
      if (dst != src) std::memcpy(dst, src, len);
    }
  }
  return OkStatus();
}

Status ShmCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DataType type, ReduceFunction fn,
                                    uint32_t) {
  const int n = size(), me = rank();
  const size_t esize = ByteSize(type);
  const size_t per_chunk = slot_bytes_ / esize;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (n == 1) {
    if (out != in) std::memcpy(out, in, count * esize);
    return OkStatus();
  }
  // A result larger than the caches is written around them; the share this
  // rank reduces is then summed in its slot (in cache) and streamed out.
  const bool streaming = count * esize >= kStreamingCopyBytes;
  void (*copy_out)(void*, const void*, size_t) = [](void* d, const void* s, size_t n) { std::memcpy(d, s, n); };
  if (streaming) copy_out = StreamingCopy;
  for (size_t first = 0; first < count; first += per_chunk) {
    const size_t elems = std::min(per_chunk, count - first);
    const size_t base = first * esize;
    const int half = static_cast<int>(phase_++ & 1);
    // Rank r reduces share r of the chunk, in rank order: each element is
    // reduced once, so every rank gets identical bits. Only the shares the
    // others reduce go into this rank's slot; its own share is read where it
    // is, unless the result overwrites it before the sum reads it (in
    // place, from the third rank on).
    auto share = [&](int r) { return std::make_pair(elems * r / n * esize, elems * (r + 1) / n * esize); };
    auto [lo, hi] = share(me);
    const bool own_in_slot = !streaming && in == out && me >= 2;
    const char* chunk = in + base;
    std::memcpy(slot(half, me), chunk, own_in_slot ? hi : lo);
    std::memcpy(slot(half, me) + hi, chunk + hi, elems * esize - hi);
    MYPLUGIN_RETURN_IF_ERROR(Step());
    if (hi > lo) {
      auto input = [&](int r) -> const char* { return r == me && !own_in_slot ? chunk + lo : slot(half, r) + lo; };
      char* result = streaming ? slot(half, me) + lo : out + base + lo;
      const size_t k = (hi - lo) / esize;
      fn(result, input(0), input(1), k);
      for (int r = 2; r < n; ++r) fn(result, result, input(r), k);
      if (streaming) {
        StreamingCopy(out + base + lo, result, hi - lo);
      } else {
        std::memcpy(slot(half, me) + lo, result, hi - lo);  // where the others read it
      }
    }
    MYPLUGIN_RETURN_IF_ERROR(Step());
    for (int r = 0; r < n; ++r) {
      auto [a, b] = share(r);
      if (r != me && b > a) copy_out(out + base + a, slot(half, r) + a, b - a);
    }
  }
  return OkStatus();
}

Status ShmCommunicator::DoBroadcast(void* data, size_t bytes, int root) {
  char* buf = static_cast<char*>(data);
  // The whole segment carries the root's data: every slot of a half is its.
  const size_t chunk = slot_bytes_ * size();
  for (size_t off = 0; off < bytes; off += chunk) {
    const size_t len = std::min(chunk, bytes - off);
    const int half = static_cast<int>(phase_++ & 1);
    if (rank() == root) std::memcpy(slot(half, 0), buf + off, len);
    MYPLUGIN_RETURN_IF_ERROR(Step());
    if (rank() != root) std::memcpy(buf + off, slot(half, 0), len);
  }
  return OkStatus();
}

Status ShmCommunicator::DoAllToAllBytes(const void* send, void* recv, size_t bytes_per_rank, uint32_t) {
  const int n = size(), me = rank();
  const size_t sub = slot_bytes_ / n;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  for (size_t off = 0; off < bytes_per_rank; off += sub) {
    const size_t len = std::min(sub, bytes_per_rank - off);
    const int half = static_cast<int>(phase_++ & 1);
    for (int d = 0; d < n; ++d) {
      if (d != me) std::memcpy(slot(half, me) + d * sub, in + d * bytes_per_rank + off, len);
    }
    MYPLUGIN_RETURN_IF_ERROR(Step());
    for (int s = 0; s < n; ++s) {
      char* dst = out + s * bytes_per_rank + off;
      const char* src = s == me ? in + me * bytes_per_rank + off : slot(half, s) + me * sub;
      if (dst != src) std::memcpy(dst, src, len);
    }
  }
  return OkStatus();
}

Status ShmCommunicator::DoExchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                                   uint32_t) {
  const int n = size(), me = rank();
  const size_t sub = slot_bytes_ / n;
  // Every rank takes every step: first agree on the longest transfer.
  uint64_t longest = 0;
  for (const auto& b : sends) longest = std::max<uint64_t>(longest, b.bytes);
  for (const auto& b : recvs) longest = std::max<uint64_t>(longest, b.bytes);
  MYPLUGIN_RETURN_IF_ERROR(Step(longest));
  for (int r = 0; r < n; ++r) longest = std::max(longest, value_of(r));
  for (size_t off = 0; off < longest; off += sub) {
    const int half = static_cast<int>(phase_++ & 1);
    for (const auto& b : sends) {
      if (off < b.bytes) std::memcpy(slot(half, me) + b.peer * sub, static_cast<char*>(b.data) + off,
                                     std::min(sub, b.bytes - off));
    }
    MYPLUGIN_RETURN_IF_ERROR(Step());
    for (const auto& b : recvs) {
      if (off < b.bytes) std::memcpy(static_cast<char*>(b.data) + off, slot(half, b.peer) + me * sub,
                                     std::min(sub, b.bytes - off));
    }
  }
  return OkStatus();
}

}  // namespace myplugin::collectives
