// Call signatures (collectives/signature.h): the 40-byte record every
// participant exchanges round-trips, and a mismatch names who issued what.
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "collectives/signature.h"

namespace {

using namespace myplugin::collectives;

bool Has(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

Signature AllReduce(uint64_t count, uint64_t sequence) {
  Signature s;
  s.op = CollectiveOp::kAllReduce;
  s.reduction = Reduction::kSum;
  s.dtype = DataType::kF32;
  s.count = count;
  s.group_hash = 0x1122334455667788ULL;
  s.sequence = sequence;
  s.extra = 9;
  return s;
}

void TestEncoding() {
  Signature s = AllReduce(1000, 5);
  char bytes[Signature::kEncodedSize];
  s.Encode(bytes);
  // The layout: op, reduction, dtype in the first bytes, then the 64-bit fields at 8, 16, 24, 32.
  CHECK(bytes[0] == static_cast<char>(CollectiveOp::kAllReduce) && bytes[1] == static_cast<char>(Reduction::kSum));
  uint64_t hash;
  std::memcpy(&hash, bytes + 16, 8);
  CHECK(hash == 0x1122334455667788ULL);
  CHECK(Signature::Decode(bytes) == s);
  Signature other = s;
  other.extra = 10;
  CHECK(!(other == s));
}

void TestDescribe() {
  CHECK(AllReduce(1000, 5).Describe() == "all-reduce sum f32[1000] (call #5)");
  Signature gather = AllReduce(8, 0);
  gather.op = CollectiveOp::kAllGather;  // no reduction shown
  CHECK(gather.Describe() == "all-gather f32[8] (call #0)");
  Signature barrier;
  barrier.sequence = 2;
  CHECK(barrier.Describe() == "barrier (call #2)");
}

void TestCompare() {
  CHECK(CompareSignatures({AllReduce(4, 1), AllReduce(4, 1), AllReduce(4, 1)}, {0, 1, 2}).empty());
  // Rank 1 (process 7) issued a different count: both groups are named.
  std::string msg = CompareSignatures({AllReduce(4, 1), AllReduce(5, 1), AllReduce(4, 1)}, {3, 7, 5});
  CHECK(Has(msg, "processes 3, 5 issued all-reduce sum f32[4] (call #1)"));
  CHECK(Has(msg, "process 7 issued all-reduce sum f32[5] (call #1)"));
  CHECK(!Has(msg, "participants"));
  Signature elsewhere = AllReduce(4, 1);
  elsewhere.group_hash = 1;
  CHECK(Has(CompareSignatures({AllReduce(4, 1), elsewhere}, {0, 1}), "disagree on the participants"));
}

void TestHash() {
  // FNV-1a over little-endian bytes: the empty list is the offset basis.
  CHECK(HashInts({}) == 1469598103934665603ULL);
  CHECK(HashInts({0, 1}) != HashInts({1, 0}));  // order matters: ranks are positions
  CHECK(HashInts({0, 2}) == HashInts({0, 2}));
}

}  // namespace

void RunSignatureTests() {
  TestEncoding();
  TestDescribe();
  TestCompare();
  TestHash();
}
