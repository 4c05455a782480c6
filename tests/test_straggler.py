"""The live straggler report: a process that is alive but never reaches a
psum (asleep, spinning in Python, or in a C call that holds the GIL) is named
within MYPLUGIN_STRAGGLER_SECONDS + 2 s, with its own Python stack fetched
from it while it is stuck; the report comes from process 0 alone, once per
interval, and the psum still completes with the right sum once it arrives."""
import os
import re

import pytest

from job import Job

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "programs", "straggler_worker.py")
STRAGGLER_S = 2
# Report latency allowed on top of MYPLUGIN_STRAGGLER_SECONDS (the bound).
SLACK_S = 2


def marker_line(marker: str) -> int:
  with open(PROGRAM) as f:
    for number, line in enumerate(f, 1):
      if marker in line and "#" in line and not line.lstrip().startswith(("\"", "#")):
        return number
  raise AssertionError(f"no {marker} in {PROGRAM}")


def job_env(tmp_path, **extra):
  env = {"JAX_PLATFORMS": "myplugin", "MYPLUGIN_NUM_DEVICES": "2", "MYPLUGIN_HEARTBEAT_TIMEOUT": "10",
         "MYPLUGIN_STRAGGLER_SECONDS": str(STRAGGLER_S), "MYPLUGIN_TRACE_DIR": str(tmp_path)}
  env.update(extra)
  return env


def line_time(job, rank, needle):
  return next((t for t, line, _ in list(job.lines[rank]) if needle in line), None)


def reports(job, rank):
  return [(t, line) for t, line, _ in list(job.lines[rank]) if "myplugin: straggler report #" in line]


def first_report_on_time(job, out):
  """Process 0's reports, the first of them within the bound of its wait."""
  waiting = line_time(job, 0, '"event": "waiting"')
  first = reports(job, 0)
  assert waiting is not None and first, out
  assert first[0][0] - waiting <= STRAGGLER_S + SLACK_S, (first[0][0] - waiting, out)
  return first


def check_sum(job, n):
  for rank in range(n):
    done = job.event(rank, "done")
    assert done is not None and done["value"] == done["expected"], job.all_output()


@pytest.mark.parametrize("mode,marker,frame", [
    ("sleep", "SLEEP_LINE", "<module>"),
    ("busy", "BUSY_LINE", "spin"),
    ("gil", "GIL_LINE", "<module>"),
])
def test_report_names_the_laggard_with_its_stack(tmp_path, mode, marker, frame):
  with Job(2, [mode, "6"], program="straggler_worker.py", env=job_env(tmp_path)) as job:
    codes = job.wait(timeout=90)
    out = job.all_output()
    assert codes == {0: 0, 1: 0}, out
    check_sum(job, 2)
    first = first_report_on_time(job, out)
    assert first[0][1].endswith("straggler report #1"), out
    text = job.output(0)
    # The call, named with the jitted function it belongs to (jax's own name for the program).
    function = job.event(1, "warm")["function"]
    assert function, out  # jax 0.10 names a pmap program jit__fun
    assert f"all-reduce sum f32[4] (call #1) on processes [0, 1] in {function} has waited" in text, out
    assert "arrived: processes [0]; not arrived: processes [1]" in text, out
    # The laggard's state and its own stack, read from it while it was stuck.
    assert "process 1 (pid" in text, out
    assert f"last issued all-reduce sum f32[4] (call #0) on processes [0, 1] in {function}" in text, out
    assert "it runs Python code" in text, out
    lines = {marker_line(marker)}
    if mode == "busy":  # the loop's test or its body, wherever the sample lands
      lines.add(marker_line(marker) + 1)
    assert any(f'straggler_worker.py", line {n} in {frame}' in text for n in lines), out
    assert f'straggler_worker.py", line {marker_line("LOADER_LINE")} in loader' in text, out  # every thread
    # Nothing from the laggard itself: one report, from process 0.
    assert not reports(job, 1), out


def test_report_says_the_laggard_is_inside_a_compile(tmp_path):
  """Every process compiles a new program before its psum; the laggard's
  compile takes 6 s longer (a sleep in the multi-process compile's Python
  step, installed by the worker through the compile hooks). The report says
  it is inside a compile, for how long, and its stack shows the compile."""
  laggard_s = 6
  with Job(2, ["compile", str(laggard_s)], program="straggler_worker.py", env=job_env(tmp_path)) as job:
    codes = job.wait(timeout=90)
    out = job.all_output()
    assert codes == {0: 0, 1: 0}, out
    check_sum(job, 2)
    first_report_on_time(job, out)
    text = job.output(0)
    function = job.event(0, "warm")["function"]
    assert f"all-reduce sum f32[4] (call #1) on processes [0, 1] in {function} has waited" in text, out
    assert "arrived: processes [0]; not arrived: processes [1]" in text, out
    m = re.search(r"process 1 \(pid [^)]*\) last issued all-reduce sum f32\[4\] \(call #0\)[^;]*; now it is "
                  r"inside a compile, for ([0-9.]+) s", text)
    assert m, out
    # The compile began before process 0 started waiting, and the hook ends it after laggard_s.
    assert STRAGGLER_S * 0.9 <= float(m.group(1)) <= laggard_s, out
    assert f'straggler_worker.py", line {marker_line("COMPILE_HOOK_LINE")} in slow_local_program' in text, out
    assert f'straggler_worker.py", line {marker_line("COMPILE_LINE")} in <module>' in text, out
    assert not reports(job, 1), out


def test_report_covers_a_barrier_of_some_processes(tmp_path):
  """jax's client runs a barrier of processes [0, 2] alone (process_ids=...),
  which process 2 reaches 5 s late: the report names that barrier, its
  members, who arrived, and process 2's stack; process 1, no member, is not
  named. The barrier then completes."""
  with Job(3, ["barrier", "5"], program="straggler_worker.py", env=job_env(tmp_path, MYPLUGIN_NUM_DEVICES="1")) as job:
    codes = job.wait(timeout=90)
    out = job.all_output()
    assert codes == {0: 0, 1: 0, 2: 0}, out
    first_report_on_time(job, out)
    text = job.output(0)
    assert "barrier 'jax/pair' of processes [0, 2] has waited" in text, out
    assert "arrived: processes [0]; not arrived: processes [2]" in text, out
    assert "process 2 (pid" in text and "process 1 (pid" not in text, out
    assert "last issued barrier 'jax/all' (use #1) " in text, out
    assert f'straggler_worker.py", line {marker_line("BARRIER_SLEEP_LINE")} in <module>' in text, out
  with open(os.path.join(tmp_path, "process-2.json")) as f:  # written on the report's request
    calls = __import__("json").load(f)["calls"]
  uses = [(c["name"], c["call"], c["processes"]) for c in calls if c["op"] == "barrier"]
  assert uses[:2] == [("jax/all", 0, []), ("jax/all", 1, [])], calls


def test_report_once_per_interval_not_once_per_process(tmp_path):
  """Two processes wait for a third for about 7 s: process 0 alone reports,
  at most once per MYPLUGIN_STRAGGLER_SECONDS, and a repeat says what changed
  (here: nothing)."""
  laggard_s = 7
  with Job(3, ["sleep", str(laggard_s)], program="straggler_worker.py", env=job_env(tmp_path)) as job:
    codes = job.wait(timeout=90)
    out = job.all_output()
    assert codes == {0: 0, 1: 0, 2: 0}, out
    check_sum(job, 3)
    got = reports(job, 0)
    assert not reports(job, 1) and not reports(job, 2), out
    numbers = [int(re.search(r"report #(\d+)", line).group(1)) for _, line in got]
    assert numbers == list(range(1, len(numbers) + 1)), out
    assert 2 <= len(numbers) <= laggard_s // STRAGGLER_S + 1, out
    gaps = [b[0] - a[0] for a, b in zip(got, got[1:])]
    assert all(g >= STRAGGLER_S * 0.9 for g in gaps), (gaps, out)
    text = job.output(0)
    assert "arrived: processes [0, 1]; not arrived: processes [2]" in text, out
    sleep_line = f'straggler_worker.py", line {marker_line("SLEEP_LINE")} in <module>'
    assert text.count(sleep_line) == text.count("Python stack, every thread") >= 1, out
    assert "process 2: unchanged since the last report" in text, out


def test_zero_turns_the_report_off(tmp_path):
  with Job(2, ["sleep", "4"], program="straggler_worker.py",
           env=job_env(tmp_path, MYPLUGIN_STRAGGLER_SECONDS="0")) as job:
    codes = job.wait(timeout=90)
    out = job.all_output()
    assert codes == {0: 0, 1: 0}, out
    check_sum(job, 2)
    assert "straggler" not in out, out
    assert not os.listdir(tmp_path), out


def test_process_0_reports_itself_as_the_laggard(tmp_path):
  """Process 0's Python sleeps; its C++ threads still report, with its own stack."""
  with Job(2, ["sleep", "5", "0"], program="straggler_worker.py", env=job_env(tmp_path)) as job:
    codes = job.wait(timeout=90)
    out = job.all_output()
    assert codes == {0: 0, 1: 0}, out
    check_sum(job, 2)
    text = job.output(0)
    assert "arrived: processes [1]; not arrived: processes [0]" in text, out
    assert f'straggler_worker.py", line {marker_line("SLEEP_LINE")} in <module>' in text, out
    waiting = line_time(job, 1, '"event": "waiting"')
    first = reports(job, 0)
    assert first and first[0][0] - waiting <= STRAGGLER_S + SLACK_S, out
    assert not reports(job, 1), out


def test_timeout_names_the_laggard_and_writes_the_recorders(tmp_path):
  """Past MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS the waiting process fails,
  naming the process that never came and the folder of the recorders."""
  env = job_env(tmp_path, MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS="3", MYPLUGIN_STRAGGLER_SECONDS="0")
  with Job(2, ["sleep", "30"], program="straggler_worker.py", env=env) as job:
    job.wait_event("error", ranks=[0], timeout=60)
    out = job.all_output()
    error = job.event(0, "error")["error"]
  assert "timed out after 3 s waiting for processes [1], which never reached call #1" in error, out
  assert f"[flight recorders: {tmp_path};" in error, out
  with open(os.path.join(tmp_path, "process-0.json")) as f:
    calls = __import__("json").load(f)["calls"]
  assert calls[-1]["call"] == 1 and calls[-1]["state"] == "failed", calls


def test_bad_settings_fail_initialization_clearly():
  """A malformed setting is refused before the process joins: a clear error,
  no half-joined job, and the process exits normally."""
  from job import free_port
  from proc import child_env, run_python
  code = ("from jax_plugin import distributed\n"
          "try:\n"
          "  distributed.initialize('127.0.0.1:%d', 1, 0)\n"
          "except Exception as e:\n"
          "  print('ERROR', type(e).__name__, e)\n"
          "print('initialized', distributed.is_initialized())\n")
  for name, value, words in [("MYPLUGIN_STRAGGLER_SECONDS", "soon", "is not a number of seconds"),
                             ("MYPLUGIN_STRAGGLER_SECONDS", "-1", "is not a number of seconds"),
                             ("MYPLUGIN_TRACE_BUFFER", "8", "is not a whole number from 16 to 16777216")]:
    r = run_python(["-c", code % free_port()], child_env(**{name: value}), timeout=120)
    assert r.returncode == 0, r.output
    assert f"ERROR MypluginError INVALID_ARGUMENT: {name}='{value}' {words}" in r.stdout, r.output
    assert "initialized False" in r.stdout, r.output
