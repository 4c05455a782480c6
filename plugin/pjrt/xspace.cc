// Field numbers from tsl/profiler/protobuf/xplane.proto (openxla/xla,
// third_party/tsl): XSpace {planes 1, warnings 3, hostnames 4}; XPlane {id 1,
// name 2, lines 3, event_metadata 4 (map), stat_metadata 5 (map), stats 6};
// XLine {id 1, name 2, timestamp_ns 3, events 4, duration_ps 9,
// display_id 10, display_name 11}; XEvent {metadata_id 1, offset_ps 2,
// duration_ps 3, stats 4}; XStat {metadata_id 1, double_value 2,
// uint64_value 3, int64_value 4, str_value 5}; XEventMetadata and
// XStatMetadata {id 1, name 2}. A map entry is a message {key 1, value 2}.
#include "pjrt/xspace.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace myplugin {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2 };

class Writer {
 public:
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void Tag(uint32_t field, WireType type) { Varint(uint64_t{field} << 3 | type); }
  // proto3 leaves zero scalars out; so do we.
  void Int(uint32_t field, int64_t v) {
    if (v == 0) return;
    Tag(field, kVarint);
    Varint(static_cast<uint64_t>(v));
  }
  void Uint(uint32_t field, uint64_t v) {
    if (v == 0) return;
    Tag(field, kVarint);
    Varint(v);
  }
  void Double(uint32_t field, double v) {
    Tag(field, kFixed64);
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>(bits >> (8 * i)));
  }
  void Bytes(uint32_t field, const std::string& v) {
    Tag(field, kLength);
    Varint(v.size());
    out_ += v;
  }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

// Names to ids, 1 on (XPlane's metadata maps).
class Ids {
 public:
  int64_t Of(const std::string& name) {
    auto it = ids_.emplace(name, static_cast<int64_t>(ids_.size()) + 1).first;
    return it->second;
  }
  const std::map<std::string, int64_t>& all() const { return ids_; }

 private:
  std::map<std::string, int64_t> ids_;
};

std::string EncodeStat(const profile::Stat& stat, Ids& stat_ids) {
  Writer w;
  w.Int(1, stat_ids.Of(stat.name));
  switch (stat.kind) {
    // A oneof's member is written even when zero: its presence is the value's kind.
    case profile::Stat::Kind::kDouble: w.Double(2, stat.double_value); break;
    case profile::Stat::Kind::kUint: w.Tag(3, kVarint); w.Varint(stat.uint_value); break;
    case profile::Stat::Kind::kInt: w.Tag(4, kVarint); w.Varint(static_cast<uint64_t>(stat.int_value)); break;
    case profile::Stat::Kind::kText: w.Bytes(5, stat.text); break;
  }
  return w.str();
}

std::string EncodeMetadata(int64_t id, const std::string& name) {
  Writer w;
  w.Int(1, id);
  w.Bytes(2, name);
  return w.str();
}

std::string MapEntry(int64_t key, const std::string& value) {
  Writer w;
  w.Int(1, key);
  w.Bytes(2, value);
  return w.str();
}

}  // namespace

std::string EncodeXSpace(const PlaneDescription& description, const profile::Collected& collected,
                         int64_t wall_minus_monotonic_ns, const std::vector<std::string>& warnings) {
  Ids event_ids, stat_ids;
  // Per thread, its spans by start, the longer first at equal starts: a
  // parent before the children it holds, as trace viewers nest them.
  std::map<int64_t, std::vector<const profile::SpanRecord*>> by_thread;
  for (const profile::SpanRecord& s : collected.spans) by_thread[s.thread].push_back(&s);

  Writer plane;
  plane.Int(1, description.id);
  plane.Bytes(2, description.name);
  for (auto& [thread, spans] : by_thread) {
    std::sort(spans.begin(), spans.end(), [](const profile::SpanRecord* a, const profile::SpanRecord* b) {
      return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
    });
    const int64_t first = spans.front()->start_ns;
    int64_t last = first;
    Writer line;
    line.Int(1, thread);
    line.Int(10, thread);
    auto name = collected.thread_names.find(thread);
    line.Bytes(2, name != collected.thread_names.end() ? name->second : "thread " + std::to_string(thread));
    line.Int(3, first + wall_minus_monotonic_ns);
    for (const profile::SpanRecord* s : spans) {
      Writer event;
      event.Int(1, event_ids.Of(s->name));
      event.Tag(2, kVarint);  // offset_ps: a oneof member, written even when 0
      event.Varint(static_cast<uint64_t>((s->start_ns - first) * 1000));
      event.Int(3, std::max<int64_t>(s->end_ns - s->start_ns, 0) * 1000);
      for (const profile::Stat& stat : s->stats) event.Bytes(4, EncodeStat(stat, stat_ids));
      line.Bytes(4, event.str());
      last = std::max(last, s->end_ns);
    }
    line.Int(9, (last - first) * 1000);
    plane.Bytes(3, line.str());
  }
  std::string plane_stats;
  for (const profile::Stat& stat : description.stats) {
    Writer w;
    w.Bytes(6, EncodeStat(stat, stat_ids));
    plane_stats += w.str();
  }
  for (const auto& [name, id] : event_ids.all()) plane.Bytes(4, MapEntry(id, EncodeMetadata(id, name)));
  for (const auto& [name, id] : stat_ids.all()) plane.Bytes(5, MapEntry(id, EncodeMetadata(id, name)));
  plane.str() += plane_stats;

  Writer space;
  space.Bytes(1, plane.str());
  for (const std::string& warning : warnings) space.Bytes(3, warning);
  return space.str();
}

}  // namespace myplugin
