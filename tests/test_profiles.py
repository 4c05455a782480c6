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
import shutil

import jax
import numpy as np
import pytest

from job import HERE, Job
from proc import child_env, run, run_python

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
  runs = [s for s in events if s["name"] == module + " (run)"]  # jax asks for the run's completion event
  assert len(runs) == 1 and runs[0]["stats"]["device"] == 0 and runs[0]["stats"]["state"] == "done", events
  # From the launch until done: a cheap program may be done before its launch returns.
  assert programs[0]["start"] <= runs[0]["start"] <= programs[0]["end"] and runs[0]["end"] > runs[0]["start"], events

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
    # Each launch's run on each local device, until the engine said it was done: the collectives ran inside.
    runs = [s for s in events if s["name"] == done[r]["program"] + " (run)"]
    assert sorted(s["stats"]["device"] for s in runs) == sorted(list(range(local)) * 2), runs
    for c, _, _ in calls:
      assert any(run["start"] <= c["start"] and c["end"] <= run["end"] for run in runs), (c, runs)
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


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_the_engines_own_profiler_joins_the_profile(tmp_path):
  """An engine with a profiler (tests/programs/profiling_engine.cc: the CPU
  engine behind one that names the calls it got): myplugin starts, stops
  and collects it with its own, and its plane is in jax's profile."""
  import importlib.util

  import jax_plugin

  include = os.path.join(importlib.util.find_spec("xla_plugins.xla_cpu_pjrt").submodule_search_locations[0], "include")
  engine = tmp_path / "profiling_engine.so"
  built = run(["c++", "-std=c++17", "-shared", "-fPIC", "-O1", "-isystem", include, "-o", str(engine),
               os.path.join(HERE, "programs", "profiling_engine.cc")], child_env(), timeout=300)
  assert built.returncode == 0, built.output
  program = ("import sys, jax, numpy as np\n"
             "x = jax.device_put(np.ones(4, np.float32), jax.devices()[0])\n"
             "with jax.profiler.trace(sys.argv[1]):\n"
             "  print(float(jax.jit(lambda a: a + 1)(x).block_until_ready()[0]))\n")
  r = run_python(["-c", program, str(tmp_path / "trace")],
                 child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_ENGINE=str(engine),
                           MYPLUGIN_TEST_REAL_ENGINE=jax_plugin.engine_path()), timeout=180)
  assert r.returncode == 0 and r.stdout.strip() == "2.0", r.output
  space, trace = load(tmp_path / "trace")
  names = [p.name for p in space.planes]
  # Started and stopped once; collected in two calls (size, then data), the
  # older contract of collect_data, which myplugin also speaks.
  assert "/device:CUSTOM:test engine started=1 stopped=1 collected=2" in names, names
  assert "/device:CUSTOM:myplugin process 0" in names, names
  shown = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
  assert "/device:CUSTOM:test engine started=1 stopped=1 collected=2" in shown, shown
