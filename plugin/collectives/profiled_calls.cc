#include "collectives/profiled_calls.h"

#include <cstring>
#include <string>

#include "common/profile_spans.h"

namespace myplugin::collectives {
namespace {

std::string Text(const char* field) { return std::string(field, strnlen(field, CallRecord::kNameBytes)); }

std::string ProcessList(const CallRecord& call) {
  std::string list = "[";
  const std::vector<int> listed = call.Processes();
  for (size_t i = 0; i < listed.size(); ++i) list += (i ? ", " : "") + std::to_string(listed[i]);
  if (call.num_processes > CallRecord::kListedProcesses) list += ", …";
  return list + "]";
}

profile::SpanRecord Part(const char* name, int64_t start_ns, int64_t end_ns) {
  profile::SpanRecord s;
  s.name = name;
  s.start_ns = start_ns;
  s.end_ns = end_ns;
  return s;
}

}  // namespace

void ProfileCall(const CallRecord& call) {
  if (call.start_ns == 0 || call.end_ns == 0) return;
  const bool barrier = call.name[0] != '\0';
  profile::SpanRecord whole;
  whole.start_ns = call.start_ns;
  whole.end_ns = call.end_ns;
  // A barrier of every process lists none.
  whole.stats.push_back(profile::Stat::Text("group", barrier && call.num_processes == 0 ? "all" : ProcessList(call)));
  whole.stats.push_back(profile::Stat::Int("num_processes", call.num_processes));
  whole.stats.push_back(profile::Stat::Uint("call", call.signature.sequence));
  whole.stats.push_back(profile::Stat::Text("state", Name(call.state)));
  if (barrier) {
    whole.name = "barrier " + Text(call.name);
    whole.stats.push_back(profile::Stat::Text("kind", "barrier"));
    whole.stats.push_back(profile::Stat::Text("barrier", Text(call.name)));
    profile::Record(std::move(whole));
    return;
  }
  const Signature& sig = call.signature;
  whole.name = sig.Operation();
  whole.stats.push_back(profile::Stat::Text("kind", Name(sig.op)));
  if (sig.op == CollectiveOp::kAllReduce || sig.op == CollectiveOp::kReduceScatter) {
    whole.stats.push_back(profile::Stat::Text("reduction", Name(sig.reduction)));
  }
  if (sig.op != CollectiveOp::kBarrier) {
    whole.stats.push_back(profile::Stat::Text("dtype", Name(sig.dtype)));
    whole.stats.push_back(profile::Stat::Uint("elements", sig.count));
    whole.stats.push_back(profile::Stat::Uint("bytes", sig.count * ByteSize(sig.dtype)));
  }
  if (call.function[0] != '\0') whole.stats.push_back(profile::Stat::Text("function", Text(call.function)));
  whole.stats.push_back(profile::Stat::Uint("flight_record", call.id));
  // A call that failed before every process arrived only waited.
  const int64_t matched = call.match_ns != 0 ? call.match_ns : call.end_ns;
  profile::Record(std::move(whole));
  profile::Record(Part("wait for peers", call.start_ns, matched));
  if (call.match_ns != 0) profile::Record(Part("move data", call.match_ns, call.end_ns));
}

}  // namespace myplugin::collectives
