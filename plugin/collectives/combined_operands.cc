#include "collectives/combined_operands.h"

#include <cstring>
#include <string>

namespace myplugin::collectives {
namespace {

// Runs start on cache lines: the reduce functions then never straddle a
// line between two runs' elements.
constexpr size_t kRunAlignment = 64;

size_t Aligned(size_t bytes) { return (bytes + kRunAlignment - 1) / kRunAlignment * kRunAlignment; }

void Copy(void* to, const void* from, size_t bytes) {
  if (bytes) std::memcpy(to, from, bytes);
}

}  // namespace

uint64_t HashOperands(const std::vector<CombinedOperand>& operands) {
  std::vector<int64_t> described;
  for (const CombinedOperand& o : operands) {
    described.push_back(static_cast<int64_t>(o.type));
    described.push_back(static_cast<int64_t>(o.count));
  }
  return HashInts(described);
}

StatusOr<CombinedOperands> CombinedOperands::Make(CollectiveOp op, std::vector<CombinedOperand> operands,
                                                  int group_size) {
  if (op != CollectiveOp::kAllReduce && op != CollectiveOp::kAllGather && op != CollectiveOp::kReduceScatter) {
    return InvalidArgument(std::string("a ") + Name(op) + " cannot take several operands");
  }
  if (group_size <= 0) return InvalidArgument("a device group of no devices");
  CombinedOperands c;
  c.op_ = op;
  c.group_size_ = group_size;
  c.hash_ = HashOperands(operands);
  for (size_t i = 0; i < operands.size(); ++i) {
    if (op == CollectiveOp::kReduceScatter && operands[i].count % group_size != 0) {
      return InvalidArgument("reduce-scatter operand " + std::to_string(i) + " of " +
                             std::to_string(operands[i].count) + " elements over " + std::to_string(group_size) +
                             " devices: the count must divide evenly");
    }
    Run* run = nullptr;
    for (Run& r : c.runs_) {
      if (r.type == operands[i].type) run = &r;
    }
    if (run == nullptr) {
      c.runs_.push_back(Run{operands[i].type, {}, 0, 0, 0});
      run = &c.runs_.back();
    }
    run->operands.push_back(i);
    run->count += operands[i].count;
  }
  for (Run& r : c.runs_) {
    const size_t bytes = r.count * ByteSize(r.type);
    r.send_offset = c.send_bytes_;
    r.recv_offset = c.recv_bytes_;
    c.send_bytes_ += Aligned(bytes);
    c.recv_bytes_ += Aligned(op == CollectiveOp::kAllGather ? bytes * group_size
                             : op == CollectiveOp::kReduceScatter ? bytes / group_size
                                                                  : bytes);
  }
  c.operands_ = std::move(operands);
  return c;
}

void CombinedOperands::Pack(char* send) const {
  for (const Run& r : runs_) {
    const size_t size = ByteSize(r.type);
    char* out = send + r.send_offset;
    if (op_ == CollectiveOp::kReduceScatter) {
      for (int k = 0; k < group_size_; ++k) {
        for (size_t i : r.operands) {
          const size_t block = operands_[i].count / group_size_ * size;
          Copy(out, static_cast<const char*>(operands_[i].send) + k * block, block);
          out += block;
        }
      }
      continue;
    }
    for (size_t i : r.operands) {
      Copy(out, operands_[i].send, operands_[i].count * size);
      out += operands_[i].count * size;
    }
  }
}

void CombinedOperands::Unpack(const char* recv) const {
  for (const Run& r : runs_) {
    const size_t size = ByteSize(r.type);
    const char* in = recv + r.recv_offset;
    size_t offset = 0;  // bytes of this operand's slice into the run's (or a rank's) block
    for (size_t i : r.operands) {
      const CombinedOperand& o = operands_[i];
      const size_t bytes = o.count * size;
      if (op_ == CollectiveOp::kAllGather) {
        for (int k = 0; k < group_size_; ++k) {
          Copy(static_cast<char*>(o.recv) + k * bytes, in + k * r.count * size + offset, bytes);
        }
        offset += bytes;
      } else if (op_ == CollectiveOp::kReduceScatter) {
        Copy(o.recv, in + offset, bytes / group_size_);
        offset += bytes / group_size_;
      } else {
        Copy(o.recv, in + offset, bytes);
        offset += bytes;
      }
    }
  }
}

}  // namespace myplugin::collectives
