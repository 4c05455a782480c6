"""myplugin-trace DIR: merges the flight recorders of a job's processes and
says in plain words where they diverged.

Each process writes DIR/process-<id>.json (plugin/collectives/flight_recorder.cc)
when a collective fails or times out, when the job fails, on SIGUSR1, and on
the first straggler report. A process killed with SIGKILL leaves none: the
analysis then covers the files there are and says which are missing.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

# The records of each process the timelines show, unless --all.
_TIMELINE_DEFAULT = 8
_SHUTDOWN = "the shutdown barrier"


class TraceError(Exception):
  pass


def load(folder: str) -> dict[int, dict]:
  if not os.path.isdir(folder):
    raise TraceError(f"{folder} is not a folder")
  dumps = {}
  for path in sorted(glob.glob(os.path.join(folder, "process-*.json"))):
    try:
      with open(path) as f:
        d = json.load(f)
    except (OSError, ValueError) as e:
      raise TraceError(f"{path} is not a flight recorder file: {e}") from None
    if not isinstance(d, dict) or d.get("format") != "myplugin-flight-recorder-1":
      raise TraceError(f"{path} is not a myplugin flight recorder file (format {d.get('format')!r})")
    dumps[int(d["process"])] = d
  if not dumps:
    raise TraceError(f"no flight recorder files (process-*.json) in {folder}")
  return dumps


# A transfer between two processes is one call, recorded as a send on one
# and a receive on the other: the two sides agree.
_TRANSFER_SIDES = ("send", "receive")


def _signature(c: dict) -> tuple:
  op = "transfer" if c["op"] in _TRANSFER_SIDES else c["op"]
  return (op, c["reduction"], c["dtype"], c["count"], c["extra"])


def _what(c: dict) -> str:
  """The call without its number and process group, with the jitted function that
  issued it where known: 'all-reduce sum f32[4] in jit_train_step'."""
  what = c["describe"].split(" (call #")[0]
  return f"{what} in {c['function']}" if c.get("function") else what


def _plist(ids) -> str:
  return "[" + ", ".join(str(i) for i in sorted(ids)) + "]"


def analyze(dumps: dict[int, dict], timeline: int | None = _TIMELINE_DEFAULT) -> list[str]:
  out = []
  n = max(int(d.get("num_processes", 0)) for d in dumps.values())
  n = max(n, max(dumps) + 1)
  present = sorted(dumps)
  missing = [p for p in range(n) if p not in dumps]
  out.append(f"flight recorders of processes {_plist(present)} of {n}" +
             (f"; missing: processes {_plist(missing)} (killed with SIGKILL, or never wrote one)" if missing else ""))
  t0 = min((c["start"] for d in dumps.values() for c in d["calls"] if c["start"] is not None), default=0.0)
  findings = []

  # Collectives, process group by process group: the call numbers are per group.
  groups: dict[str, dict] = {}
  for p, d in dumps.items():
    for c in d["calls"]:
      if c["name"]:
        continue  # a named barrier of the coordination service
      entry = groups.setdefault(c["group_hash"], {"members": c["processes"], "calls": {}})
      entry["calls"].setdefault(p, {})[c["call"]] = c
  for h, entry in groups.items():
    members = entry["members"]
    calls = entry["calls"]
    have = [p for p in members if p in dumps]
    # A ring keeps the last N calls: compare only the numbers every file still holds.
    lowest = max(min(calls.get(p, {0: None})) if calls.get(p) else 0 for p in have)
    highest = {p: max(calls[p]) if calls.get(p) else -1 for p in have}
    top = max(highest.values())
    divergence = None
    for k in range(lowest, top + 1):
      issued = {p: calls[p][k] for p in have if k in calls.get(p, {})}
      kinds: dict[tuple, list[int]] = {}
      for p, c in issued.items():
        kinds.setdefault(_signature(c), []).append(p)
      if len(kinds) > 1:
        parts = "; ".join(f"process{'es' if len(ps) > 1 else ''} {', '.join(map(str, sorted(ps)))} issued "
                          f"{_what(issued[ps[0]])}" for ps in sorted(kinds.values()))
        divergence = k
        findings.append(f"DIVERGED at call #{k} on processes {_plist(members)}: {parts} "
                        "(the processes issued different collectives)")
        break
    if divergence is not None:
      continue
    # Who stopped short of the last call that another process issued.
    ahead = [p for p in have if highest[p] == top]
    for p in have:
      if highest[p] >= top:
        continue
      k = highest[p] + 1
      c = calls[ahead[0]][k]
      sentence = (f"process {p} NEVER REACHED call #{k} ({_what(c)}) on processes {_plist(members)}, which "
                  f"{_who(ahead)} issued at {_at(c, t0)} "
                  f"({_fate(c, dumps[ahead[0]])})")
      last = dumps[p]["calls"][-1] if dumps[p]["calls"] else None
      mine = calls[p].get(k - 1)
      if mine is not None:
        sentence += f"; its last call there was #{k - 1}, {mine['state']} at {_at(mine, t0, 'end')}"
      if last is not None and last["name"] == _SHUTDOWN:
        sentence += (f"; it then LEFT EARLY: it entered the shutdown barrier at {_at(last, t0)} "
                     "(did it leave its loop early?)")
      elif last is not None and last is not mine:
        sentence += f"; its last call of all was {last['describe']} ({last['state']}, at {_at(last, t0)})"
      findings.append(sentence)
    # Every process reached the last call, yet it stayed open on some: the
    # call itself stuck (a dead link, a stuck device, a process stopped in it).
    if all(highest[p] == top for p in have) and top >= 0:
      open_on = sorted(p for p in have if calls[p][top]["state"] in ("issued", "matched"))
      if open_on and len(have) == len(members):
        states = "; ".join(f"process {p}: {_what(calls[p][top])}, {_duration(calls[p][top], dumps[p])}"
                           for p in open_on)
        findings.append(f"STUCK IN call #{top} on processes {_plist(members)}: every process reached it, yet it "
                        f"had not completed ({states})")
    for p in members:
      if p in dumps:
        continue
      pending = [calls[q][top] for q in ahead if calls[q][top]["state"] in ("issued", "failed")]
      if pending:
        findings.append(f"process {p} left no flight recorder; call #{top} ({_what(pending[0])}) on processes "
                        f"{_plist(members)} never completed on {_who(ahead)}: process {p} never "
                        f"reached it or never finished it")
  # Barriers of the coordination service still open at the dump, and the
  # members whose files show they never reached that use of the barrier.
  never: set[tuple] = set()
  for p, d in sorted(dumps.items()):
    for c in d["calls"]:
      if c["name"] and c["state"] in ("issued", "failed") and c["name"] != _SHUTDOWN:
        findings.append(f"process {p} was waiting in {c['describe']} since {_at(c, t0)}" if c["state"] ==
                        "issued" else f"process {p} waited in {c['describe']} from {_at(c, t0)} until it "
                        f"failed at {_at(c, t0, 'end')}")
        members = c["processes"] or list(range(n))
        for q in members:
          if q == p or q not in dumps or (q, c["group_hash"], c["call"]) in never:
            continue
          uses = [e["call"] for e in dumps[q]["calls"] if e["name"] and e["group_hash"] == c["group_hash"]]
          if not uses or max(uses) < c["call"]:
            never.add((q, c["group_hash"], c["call"]))
            last = dumps[q]["calls"][-1] if dumps[q]["calls"] else None
            findings.append(f"process {q} NEVER REACHED {c['describe']}" +
                            (f"; its last call was {last['describe']} ({last['state']}, at {_at(last, t0)})"
                             if last else ""))
  if findings:
    out += findings
  else:
    out.append("no divergence: every process issued the same calls")

  for p, d in sorted(dumps.items()):
    calls = d["calls"] if timeline is None else d["calls"][-timeline:]
    left = len(d["calls"]) - len(calls)
    out.append(f"process {p} (pid {d['pid']} on {d['host']}; written {_rel(d['written_at'], t0)} because: "
               f"{d['reason']}): {d['recorded']} call{'' if d['recorded'] == 1 else 's'} recorded" +
               (f", the last {len(calls)} shown" if left else ""))
    for c in calls:
      out.append(f"  {_rel(c['start'], t0):>10}  {c['describe']}  {_duration(c, d)}")
  return out


def _who(ids) -> str:
  return f"process {ids[0]}" if len(ids) == 1 else f"processes {_plist(ids)}"


def _rel(t, t0) -> str:
  return "?" if t is None else f"+{t - t0:.3f} s"


def _at(c: dict, t0: float, field: str = "start") -> str:
  return _rel(c[field], t0)


def _duration(c: dict, d: dict) -> str:
  if c["state"] in ("done", "failed") and c["end"] is not None:
    ms = (c["end"] - c["start"]) * 1000
    return f"{c['state']} after {ms:.1f} ms" if ms < 1000 else f"{c['state']} after {ms / 1000:.2f} s"
  return f"{c['state']}, still waiting {d['written_at'] - c['start']:.2f} s when written"


def _fate(c: dict, d: dict) -> str:
  if c["state"] == "failed":
    return "it failed"
  if c["state"] == "done":
    return "it completed"
  return f"still waiting {d['written_at'] - c['start']:.1f} s later"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog="myplugin-trace",
      description="Merges the flight recorders (process-*.json) of a myplugin job and says where the processes "
                  "diverged: the first call whose signatures differ, the process that never reached a call, "
                  "the process that left early; then each process's last calls.")
  parser.add_argument("folder", help="the trace folder named in the error or the straggler report")
  parser.add_argument("--all", action="store_true", help="show every recorded call, not only the last few")
  args = parser.parse_args(argv)
  try:
    lines = analyze(load(args.folder), None if args.all else _TIMELINE_DEFAULT)
  except TraceError as e:
    print(f"myplugin-trace: {e}", file=sys.stderr)
    return 2
  print("\n".join(lines))
  return 0


if __name__ == "__main__":
  sys.exit(main())
