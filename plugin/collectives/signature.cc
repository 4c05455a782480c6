#include "collectives/signature.h"

#include <cstring>
#include <map>

namespace myplugin::collectives {

const char* Name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "all-reduce";
    case CollectiveOp::kAllGather: return "all-gather";
    case CollectiveOp::kReduceScatter: return "reduce-scatter";
    case CollectiveOp::kAllToAll: return "all-to-all";
    case CollectiveOp::kCollectivePermute: return "collective-permute";
    case CollectiveOp::kBarrier: return "barrier";
    case CollectiveOp::kSend: return "send";
    case CollectiveOp::kReceive: return "receive";
    case CollectiveOp::kRaggedAllToAll: return "ragged-all-to-all";
  }
  return "?";
}

void Signature::Encode(char out[kEncodedSize]) const {
  std::memset(out, 0, kEncodedSize);
  out[0] = static_cast<char>(op);
  out[1] = static_cast<char>(reduction);
  out[2] = static_cast<char>(dtype);
  std::memcpy(out + 8, &count, 8);
  std::memcpy(out + 16, &group_hash, 8);
  std::memcpy(out + 24, &sequence, 8);
  std::memcpy(out + 32, &extra, 8);
}

Signature Signature::Decode(const char in[kEncodedSize]) {
  Signature s;
  s.op = static_cast<CollectiveOp>(in[0]);
  s.reduction = static_cast<Reduction>(in[1]);
  s.dtype = static_cast<DataType>(in[2]);
  std::memcpy(&s.count, in + 8, 8);
  std::memcpy(&s.group_hash, in + 16, 8);
  std::memcpy(&s.sequence, in + 24, 8);
  std::memcpy(&s.extra, in + 32, 8);
  return s;
}

bool Signature::operator==(const Signature& o) const {
  return op == o.op && reduction == o.reduction && dtype == o.dtype && count == o.count &&
         group_hash == o.group_hash && sequence == o.sequence && extra == o.extra;
}

std::string Signature::Operation() const {
  std::string s = Name(op);
  if (op == CollectiveOp::kAllReduce || op == CollectiveOp::kReduceScatter) s += std::string(" ") + Name(reduction);
  if (op != CollectiveOp::kBarrier) s += std::string(" ") + Name(dtype) + "[" + std::to_string(count) + "]";
  return s;
}

std::string Signature::Describe() const { return Operation() + " (call #" + std::to_string(sequence) + ")"; }

std::string CompareSignatures(const std::vector<Signature>& all, const std::vector<int>& process_of_rank) {
  bool same = true;
  for (const Signature& s : all) same = same && s == all[0];
  if (same) return "";
  // Group the ranks by what they issued.
  std::vector<std::pair<Signature, std::vector<int>>> groups;
  for (size_t r = 0; r < all.size(); ++r) {
    bool placed = false;
    for (auto& g : groups) {
      if (g.first == all[r]) {
        g.second.push_back(process_of_rank[r]);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({all[r], {process_of_rank[r]}});
  }
  std::string msg = "collective mismatch: the processes issued different collectives:";
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& [sig, procs] = groups[g];
    msg += g ? "; " : " ";
    msg += procs.size() == 1 ? "process " : "processes ";
    for (size_t i = 0; i < procs.size(); ++i) msg += (i ? ", " : "") + std::to_string(procs[i]);
    msg += " issued " + sig.Describe();
  }
  if (groups[0].first.group_hash != groups[1].first.group_hash) msg += " (they disagree on the participants)";
  return msg;
}

uint64_t HashInts(const std::vector<int64_t>& values) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the little-endian bytes
  for (int64_t v : values) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
      h *= 1099511628211ull;
    }
  }
  return h;
}

}  // namespace myplugin::collectives
