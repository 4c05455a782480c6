"""jax.profiler traces on myplugin: the plane of myplugin's own spans
(programs, compile steps, collectives split into waiting for peers and
moving data, barriers), read back with jaxlib's own XSpace reader
(jax.profiler.ProfileData) and jax's trace.json.gz, and checked against
what the programs did: jax's CPU backend's name for the same program, the
sizes sent, and a process that was made to arrive late."""
import glob
import gzip
import json
import os

import jax
import numpy as np

from job import Job

ENV = {"JAX_PLATFORMS": "myplugin", "MYPLUGIN_NUM_DEVICES": "2"}
LATE_S = 2.0  # how late the last process comes to the barrier and the second psum


def only(paths):
  assert len(paths) == 1, paths
  return paths[0]


def load(folder):
  """The profile jax wrote under `folder`: (ProfileData, trace.json)."""
  xplane = only(glob.glob(os.path.join(folder, "plugins", "profile", "*", "*.xplane.pb")))
  trace = only(glob.glob(os.path.join(folder, "plugins", "profile", "*", "*.trace.json.gz")))
  with gzip.open(trace) as f:
    return jax.profiler.ProfileData.from_file(xplane), json.load(f)


def plane(space, name):
  found = [p for p in space.planes if p.name == name]
  assert len(found) == 1, [p.name for p in space.planes]
  return found[0]


def spans(p):
  """Every event of plane `p`: name, start and end (ns), its line, its stats."""
  out = []
  for line in p.lines:
    for e in line.events:
      out.append({"name": e.name, "start": e.start_ns, "end": e.start_ns + e.duration_ns, "line": line.name,
                  "stats": dict(e.stats)})
  return out


def inside(child, parent):
  return child["line"] == parent["line"] and parent["start"] <= child["start"] <= child["end"] <= parent["end"]


def profile_start_ns(space):
  """The Unix time jax's session started at: its planes' times count from it."""
  return dict(plane(space, "Task Environment").stats)["profile_start_time"]


def test_a_program_and_its_compile_show_under_jax_cpu_backends_name(tmp_path):
  f = jax.jit(lambda a: (a * 2.0).sum() + 1.0)  # new here: compiled inside the trace
  data = np.arange(1000, dtype=np.float32)
  mine = jax.device_put(data, jax.devices("myplugin")[0])
  cpu = jax.device_put(data, jax.devices("cpu")[0])
  with jax.profiler.trace(str(tmp_path)):
    got = f(mine).block_until_ready()
    want = f(cpu).block_until_ready()
  assert float(got) == float(want)
  space, trace = load(tmp_path)
  # jax's CPU backend names the program in its HLO ops' events.
  cpu_modules = {s["stats"]["hlo_module"] for s in spans(plane(space, "/host:CPU")) if "hlo_module" in s["stats"]}
  assert len(cpu_modules) == 1, cpu_modules
  (module,) = cpu_modules

  ours = plane(space, "/device:CUSTOM:myplugin process 0")
  stats = dict(ours.stats)
  assert stats["process_index"] == 0 and stats["num_processes"] == 1 and stats["pid"] == os.getpid(), stats
  events = spans(ours)
  programs = [s for s in events if s["name"] == module]
  assert len(programs) == 1, events
  assert programs[0]["stats"]["devices"] == 1, programs
  compiles = [s for s in events if s["name"] == "compile"]
  assert len(compiles) == 1 and compiles[0]["stats"]["devices"] == 1, events
  assert compiles[0]["stats"]["across_processes"] == 0, compiles
  assert compiles[0]["end"] <= programs[0]["start"], events  # compiled, then launched

  # jax's trace.json (what TensorBoard's trace viewer and Perfetto show) has the plane and its events.
  pids = {e["pid"] for e in trace["traceEvents"]
          if e.get("name") == "process_name" and e["args"]["name"] == "/device:CUSTOM:myplugin process 0"}
  assert len(pids) == 1, [e for e in trace["traceEvents"] if e.get("name") == "process_name"]
  names = {e["name"] for e in trace["traceEvents"] if e.get("pid") in pids and e.get("ph") == "X"}
  assert {module, "compile"} <= names, names


def test_no_spans_outside_a_profile(tmp_path):
  f = jax.jit(lambda a: a - 3.0)
  x = jax.device_put(np.ones(8, np.float32), jax.devices("myplugin")[0])
  f(x).block_until_ready()  # compiled and run before the trace: not in it
  with jax.profiler.trace(str(tmp_path)):
    jax.jit(lambda a: a * 5.0)(x).block_until_ready()
  space, _ = load(tmp_path)
  names = [s["name"] for s in spans(plane(space, "/device:CUSTOM:myplugin process 0"))]
  assert names.count("compile") == 1, names  # the second program's only


def collective_parts(events):
  """Each all-reduce span with its wait-for-peers and move-data spans."""
  out = []
  for c in (s for s in events if s["stats"].get("kind") == "all-reduce"):
    waits = [s for s in events if s["name"] == "wait for peers" and inside(s, c)]
    moves = [s for s in events if s["name"] == "move data" and inside(s, c)]
    assert len(waits) == 1 and len(moves) == 1, (c, waits, moves)
    out.append((c, waits[0], moves[0]))
  return out


def test_two_processes_profiles_show_who_waited_for_whom(tmp_path):
  with Job(2, [str(tmp_path), str(LATE_S)], program="profile_worker.py", env=ENV) as job:
    codes = job.wait(timeout=150)
    assert codes == {0: 0, 1: 0}, job.all_output()
    done = {r: job.event(r, "done") for r in range(2)}
  for r in range(2):
    assert done[r]["values"] == [done[r]["expected"]] * 2, done
  local = done[0]["local"]

  seen = {}
  for r in range(2):
    space, trace = load(tmp_path / f"process-{r}")
    ours = plane(space, f"/device:CUSTOM:myplugin process {r}")
    stats = dict(ours.stats)
    assert stats["process_index"] == r and stats["num_processes"] == 2, stats
    events = spans(ours)
    start = profile_start_ns(space)
    calls = collective_parts(events)
    assert len(calls) == 2, events
    for c, wait, move in calls:
      s = c["stats"]
      # Every process sends its local devices' sum: 1000 float32s.
      assert (s["reduction"], s["dtype"], s["elements"], s["bytes"]) == ("sum", "f32", 1000, 4000), s
      assert s["group"] == "[0, 1]" and s["num_processes"] == 2 and s["state"] == "done", s
      assert c["name"] == "all-reduce sum f32[1000]", c
      # Waiting, then moving: the two parts tile the call.
      assert wait["start"] == c["start"] and wait["end"] == move["start"] and move["end"] == c["end"], (c, wait, move)
    (first, second) = sorted(calls, key=lambda t: t[0]["start"])
    assert second[0]["stats"]["call"] == first[0]["stats"]["call"] + 1, calls
    barriers = [s for s in events if s["stats"].get("barrier", "").endswith("profiled")]
    assert len(barriers) == 1, events
    assert barriers[0]["stats"]["kind"] == "barrier" and barriers[0]["stats"]["group"] == "all", barriers
    compiles = [s for s in events if s["name"] == "compile" and s["stats"]["across_processes"] == 1]
    assert len(compiles) == 1 and compiles[0]["stats"]["devices"] == 2 * local, events
    for step in ("partition", "rewrite collectives", "compile the local part"):
      assert any(s["name"] == step and inside(s, compiles[0]) for s in events), (step, events)
    programs = [s for s in events if s["name"] == done[r]["program"]]
    assert len(programs) == 2 and all(p["stats"]["devices"] == local for p in programs), events
    seen[r] = {"barrier": barriers[0], "second": second, "start": start, "call": second[0]["stats"]["call"]}

  assert seen[0]["call"] == seen[1]["call"], seen  # the same call, as each process numbered it
  late_ns = LATE_S * 1e9
  # Process 0 waited for process 1 at the barrier and at the second psum;
  # process 1, arriving last, hardly waited.
  for what in ("barrier", "wait"):
    span = {r: seen[r]["barrier"] if what == "barrier" else seen[r]["second"][1] for r in range(2)}
    wait = {r: span[r]["end"] - span[r]["start"] for r in range(2)}
    assert wait[0] > 0.75 * late_ns, (what, wait)
    assert wait[1] < wait[0] - 0.5 * late_ns, (what, wait)
    # Side by side (Unix times): both stopped waiting at the same moment, when process 1 came.
    ends = [seen[r]["start"] + span[r]["end"] for r in range(2)]
    assert abs(ends[0] - ends[1]) < 0.25 * late_ns, (what, ends)
