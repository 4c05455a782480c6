// Combined collectives (collectives/combined_operands.h): for each kind, the
// packed runs of two ranks, put through the kind's collective as one
// buffer, unpack to what each operand's own collective gives.
#include <cstring>
#include <vector>

#include "check.h"
#include "collectives/combined_operands.h"

namespace {

using namespace myplugin::collectives;

constexpr int kRanks = 2;

// Rank r's operands: f32[4], s32[2], f32[6] (two runs, types interleaved).
struct RankData {
  std::vector<float> a, c;
  std::vector<int32_t> b;
  std::vector<float> ya, yc;
  std::vector<int32_t> yb;
};

RankData Make(int rank, size_t out_factor_num, size_t out_factor_den) {
  RankData d;
  for (int i = 0; i < 4; ++i) d.a.push_back(rank * 100 + i);
  for (int i = 0; i < 2; ++i) d.b.push_back(rank * 1000 + 10 * i);
  for (int i = 0; i < 6; ++i) d.c.push_back(rank * 100 + 50 + i);
  d.ya.resize(4 * out_factor_num / out_factor_den);
  d.yb.resize(2 * out_factor_num / out_factor_den);
  d.yc.resize(6 * out_factor_num / out_factor_den);
  return d;
}

std::vector<CombinedOperand> Operands(RankData& d) {
  return {{DataType::kF32, 4, d.a.data(), d.ya.data()},
          {DataType::kS32, 2, d.b.data(), d.yb.data()},
          {DataType::kF32, 6, d.c.data(), d.yc.data()}};
}

// Runs `kind` over the ranks' packed runs the way a process-level
// collective would, elementwise on floats and ints by the run's type.
void Exchange(CollectiveOp kind, std::vector<CombinedOperands>& plans, std::vector<std::vector<char>>& send,
              std::vector<std::vector<char>>& recv) {
  for (size_t run = 0; run < plans[0].runs().size(); ++run) {
    const CombinedOperands::Run& r = plans[0].runs()[run];
    const size_t size = ByteSize(r.type), bytes = r.count * size;
    for (int me = 0; me < kRanks; ++me) {
      char* out = recv[me].data() + r.recv_offset;
      if (kind == CollectiveOp::kAllGather) {
        for (int k = 0; k < kRanks; ++k) std::memcpy(out + k * bytes, send[k].data() + r.send_offset, bytes);
        continue;
      }
      const size_t first = kind == CollectiveOp::kReduceScatter ? me * r.count / kRanks : 0;
      const size_t n = kind == CollectiveOp::kReduceScatter ? r.count / kRanks : r.count;
      for (size_t e = 0; e < n; ++e) {
        if (r.type == DataType::kF32) {
          float sum = 0;
          for (int k = 0; k < kRanks; ++k) sum += reinterpret_cast<const float*>(send[k].data() + r.send_offset)[first + e];
          reinterpret_cast<float*>(out)[e] = sum;
        } else {
          int32_t sum = 0;
          for (int k = 0; k < kRanks; ++k) sum += reinterpret_cast<const int32_t*>(send[k].data() + r.send_offset)[first + e];
          reinterpret_cast<int32_t*>(out)[e] = sum;
        }
      }
    }
  }
}

template <typename T>
std::vector<T> Reference(CollectiveOp kind, const std::vector<T>& r0, const std::vector<T>& r1, int me) {
  std::vector<T> out;
  if (kind == CollectiveOp::kAllGather) {
    out = r0;
    out.insert(out.end(), r1.begin(), r1.end());
    return out;
  }
  for (size_t i = 0; i < r0.size(); ++i) out.push_back(r0[i] + r1[i]);
  if (kind == CollectiveOp::kReduceScatter) {
    const size_t block = out.size() / kRanks;
    out = std::vector<T>(out.begin() + me * block, out.begin() + (me + 1) * block);
  }
  return out;
}

void TestKind(CollectiveOp kind) {
  const size_t num = kind == CollectiveOp::kAllGather ? kRanks : 1;
  const size_t den = kind == CollectiveOp::kReduceScatter ? kRanks : 1;
  std::vector<RankData> data = {Make(0, num, den), Make(1, num, den)};
  std::vector<CombinedOperands> plans;
  std::vector<std::vector<char>> send, recv;
  for (int r = 0; r < kRanks; ++r) {
    auto plan = CombinedOperands::Make(kind, Operands(data[r]), kRanks);
    CHECK(plan.ok());
    plans.push_back(plan.take());
    send.emplace_back(plans[r].send_bytes());
    recv.emplace_back(plans[r].recv_bytes());
    plans[r].Pack(send[r].data());
  }
  // One run per element type, in order of first appearance; f32 holds a and c.
  CHECK(plans[0].runs().size() == 2 && plans[0].runs()[0].type == DataType::kF32 &&
        plans[0].runs()[0].count == 10 && plans[0].runs()[1].count == 2);
  CHECK(plans[0].runs()[1].send_offset % 64 == 0);
  Exchange(kind, plans, send, recv);
  for (int r = 0; r < kRanks; ++r) {
    plans[r].Unpack(recv[r].data());
    CHECK(data[r].ya == Reference(kind, data[0].a, data[1].a, r));
    CHECK(data[r].yb == Reference(kind, data[0].b, data[1].b, r));
    CHECK(data[r].yc == Reference(kind, data[0].c, data[1].c, r));
  }
}

void TestRefusals() {
  float x[3];
  CHECK(!CombinedOperands::Make(CollectiveOp::kReduceScatter, {{DataType::kF32, 3, x, x}}, 2).ok());
  CHECK(!CombinedOperands::Make(CollectiveOp::kAllToAll, {{DataType::kF32, 2, x, x}}, 2).ok());
  // The hash tells apart operand lists of the same total size and type.
  CHECK(HashOperands({{DataType::kF32, 3, x, x}, {DataType::kF32, 5, x, x}}) !=
        HashOperands({{DataType::kF32, 8, x, x}}));
  CHECK(HashOperands({{DataType::kF32, 3, x, x}, {DataType::kF32, 5, x, x}}) !=
        HashOperands({{DataType::kF32, 5, x, x}, {DataType::kF32, 3, x, x}}));
}

}  // namespace

void RunCombinedOperandsTests() {
  TestKind(CollectiveOp::kAllReduce);
  TestKind(CollectiveOp::kAllGather);
  TestKind(CollectiveOp::kReduceScatter);
  TestRefusals();
}
