"""The flight recorder and myplugin-trace: after a mismatch, an early exit
or a bystander's SIGKILL, each surviving process has written its last calls,
and myplugin-trace names the process and the call where the job diverged
(checked against what each worker was written to do)."""
import json
import os
import sys
import time

from job import Job
from proc import child_env, run

ENV = {"JAX_PLATFORMS": "myplugin", "MYPLUGIN_NUM_DEVICES": "2", "MYPLUGIN_HEARTBEAT_TIMEOUT": "5"}


def trace(folder, *args):
  r = run([sys.executable, "-m", "jax_plugin.trace_cli", str(folder), *args], child_env(), timeout=60)
  return r.returncode, r.output


def load(folder, process):
  with open(os.path.join(folder, f"process-{process}.json")) as f:
    return json.load(f)


def failing_job(tmp_path, n, mode, env=None, devices="2", args=()):
  e = dict(ENV, MYPLUGIN_TRACE_DIR=str(tmp_path), MYPLUGIN_NUM_DEVICES=devices)
  e.update(env or {})
  with Job(n, [mode, *args], program="straggler_worker.py", env=e) as job:
    codes = job.wait(timeout=60)
    return codes, job.all_output(), job


def test_mismatch_names_the_call_and_both_signatures(tmp_path):
  codes, out, job = failing_job(tmp_path, 2, "mismatch")
  assert codes[0] != 0 and codes[1] != 0, out
  for rank in range(2):
    error = job.event(rank, "error")["error"]
    assert "collective mismatch" in error and f"[flight recorders: {tmp_path};" in error, out
  rc, text = trace(tmp_path)
  assert rc == 0, text
  assert "flight recorders of processes [0, 1] of 2" in text, text
  names = job.event(0, "programs")  # jax's own names for the two programs
  assert (f"DIVERGED at call #2 on processes [0, 1]: process 0 issued all-reduce sum f32[4] in {names['psum']}; "
          f"process 1 issued all-gather f32[8] in {names['gather']}") in text, text
  for p in range(2):
    calls = load(tmp_path, p)["calls"]
    assert [c["call"] for c in calls] == [0, 1, 2], calls
    assert [c["state"] for c in calls] == ["done", "done", "failed"], calls
    assert calls[2]["op"] == ("all-reduce" if p == 0 else "all-gather"), calls
    assert calls[2]["function"] == (names["psum"] if p == 0 else names["gather"]), calls


def test_early_exit_names_the_process_that_left(tmp_path):
  codes, out, job = failing_job(tmp_path, 2, "early_exit")
  assert codes[0] != 0 and codes[1] != 0, out
  rc, text = trace(tmp_path)
  assert rc == 0, text
  function = job.event(0, "programs")["psum"]
  assert f"process 1 NEVER REACHED call #3 (all-reduce sum f32[4] in {function}) on processes [0, 1]" in text, text
  assert "its last call there was #2" in text and "LEFT EARLY" in text, text
  assert load(tmp_path, 1)["calls"][-1]["name"] == "the shutdown barrier", text


def test_dumps_survive_a_bystander_sigkill(tmp_path):
  """Process 2 kills itself with SIGKILL before call #2: it leaves no file,
  the other two still write theirs, and the merge works on what is there."""
  codes, out, job = failing_job(tmp_path, 3, "sigkill", devices="1")
  assert codes[2] == -9 and codes[0] != 0 and codes[1] != 0, out
  assert sorted(os.listdir(tmp_path)) == ["process-0.json", "process-1.json"], out
  rc, text = trace(tmp_path)
  assert rc == 0, text
  assert "flight recorders of processes [0, 1] of 3; missing: processes [2]" in text, text
  function = job.event(0, "programs")["psum"]
  assert (f"process 2 left no flight recorder; call #2 (all-reduce sum f32[4] in {function}) on processes "
          "[0, 1, 2] never completed on processes [0, 1]") in text, text
  for p in range(2):
    calls = load(tmp_path, p)["calls"]
    assert [c["call"] for c in calls] == [0, 1, 2] and calls[2]["state"] != "done", calls


def test_ring_keeps_the_last_n_and_program_can_dump(tmp_path):
  """MYPLUGIN_TRACE_BUFFER=16 after 40 psums: the last 16 calls, in order;
  the merge finds no divergence and shows the last 8 of each process."""
  e = dict(ENV, MYPLUGIN_TRACE_DIR=str(tmp_path), MYPLUGIN_TRACE_BUFFER="16")
  with Job(2, ["many"], program="straggler_worker.py", env=e) as job:
    codes = job.wait(timeout=60)
    out = job.all_output()
  assert codes == {0: 0, 1: 0}, out
  assert job.event(0, "dumped")["folder"] == str(tmp_path), out
  for p in range(2):
    d = load(tmp_path, p)
    assert d["capacity"] == 16 and d["recorded"] == 40, d
    assert [c["call"] for c in d["calls"]] == list(range(24, 40)), d
    assert all(c["state"] == "done" and c["start"] <= c["match"] <= c["end"] for c in d["calls"]), d
    assert d["reason"] == "requested by the program", d
  rc, text = trace(tmp_path)
  assert rc == 0 and "no divergence" in text and "40 calls recorded, the last 8 shown" in text, text
  rc, text = trace(tmp_path, "--all")
  assert rc == 0 and text.count("(call #") == 32, text


def test_every_record_names_its_jitted_function(tmp_path):
  """A psum in a pmap, then one in a jitted function (train_step, through
  shard_map): each record carries the name jax gave its program, and so do
  the lines of myplugin-trace."""
  e = dict(ENV, MYPLUGIN_TRACE_DIR=str(tmp_path))
  with Job(2, ["named"], program="straggler_worker.py", env=e) as job:
    codes = job.wait(timeout=90)
    out = job.all_output()
  assert codes == {0: 0, 1: 0}, out
  names = job.event(0, "names")
  assert names["jit"] == "jit_train_step", names
  for p in range(2):
    calls = [c for c in load(tmp_path, p)["calls"] if c["op"] != "barrier"]
    assert [(c["op"], c["function"], c["state"]) for c in calls] == [
        ("all-reduce", names["pmap"], "done"), ("all-reduce", "jit_train_step", "done")], calls
    assert calls[1]["describe"].endswith(" in jit_train_step"), calls
  rc, text = trace(tmp_path)
  assert rc == 0 and "no divergence" in text, text
  assert text.count(f"on processes [0, 1] in {names['pmap']}  done") == 2, text
  assert text.count("on processes [0, 1] in jit_train_step  done") == 2, text


def test_a_barrier_of_some_processes_that_times_out_is_traced(tmp_path):
  """Process 2 is 30 s late for the barrier of processes [0, 2] that jax's
  client runs (timeout 4 s): process 0 fails with the timeout and writes its
  recorder, the job's failure makes the others write theirs, and
  myplugin-trace names the barrier and process 2 as the one that never
  reached it (process 1, no member, is not blamed)."""
  codes, out, job = failing_job(tmp_path, 3, "barrier", env={"MYPLUGIN_STRAGGLER_SECONDS": "0"}, devices="1",
                                args=["30", "2", "4"])
  assert codes[0] != 0 and codes[1] != 0 and codes[2] != 0, out
  error = job.event(0, "error")["error"]
  assert "Barrier timed out: barrier 'pair' of processes [0, 2] waited 4 s; processes [2] did not arrive" in error, out
  calls = load(tmp_path, 0)["calls"]
  pair = calls[-1]
  assert (pair["name"], pair["processes"], pair["call"], pair["state"]) == ("jax/pair", [0, 2], 0, "failed"), calls
  assert [(c["name"], c["call"]) for c in calls if c["op"] == "barrier"][:2] == [("jax/all", 0), ("jax/all", 1)]
  rc, text = trace(tmp_path)
  assert rc == 0, text
  assert "flight recorders of processes [0, 1, 2] of 3" in text, text
  assert "process 0 waited in barrier 'jax/pair' of processes [0, 2] from +" in text, text
  assert ("process 2 NEVER REACHED barrier 'jax/pair' of processes [0, 2]; its last call was barrier 'jax/all' "
          "(use #1) (done, at +") in text, text
  assert "process 1 NEVER REACHED" not in text, text


def test_sigusr1_writes_the_recorder_while_waiting(tmp_path):
  """SIGUSR1 to a process stuck in a psum (reports off): its file shows the
  call in flight; the job then finishes normally."""
  e = dict(ENV, MYPLUGIN_TRACE_DIR=str(tmp_path), MYPLUGIN_STRAGGLER_SECONDS="0")
  with Job(2, ["sleep", "5"], program="straggler_worker.py", env=e) as job:
    job.wait_event("waiting", ranks=[0], timeout=60)
    time.sleep(0.5)
    job.signal(0, 10)  # SIGUSR1
    path = os.path.join(tmp_path, "process-0.json")
    deadline = time.monotonic() + 5
    while not os.path.exists(path) and time.monotonic() < deadline:
      time.sleep(0.05)
    assert os.path.exists(path), job.all_output()
    d = load(tmp_path, 0)
    codes = job.wait(timeout=60)
    out = job.all_output()
  assert codes == {0: 0, 1: 0}, out
  assert d["reason"] == "SIGUSR1" and d["calls"][-1]["call"] == 1 and d["calls"][-1]["state"] == "issued", d
  assert "flight recorder written to" in job.output(0), out


def test_default_folder_is_per_job_and_named_in_the_error(tmp_path):
  codes, out, job = failing_job(tmp_path, 2, "mismatch", env={"MYPLUGIN_TRACE_DIR": "", "TMPDIR": str(tmp_path)})
  assert codes[0] != 0 and codes[1] != 0, out
  folders = os.listdir(tmp_path)
  assert len(folders) == 1 and folders[0].startswith("myplugin-trace-"), (folders, out)
  folder = os.path.join(tmp_path, folders[0])
  assert sorted(os.listdir(folder)) == ["process-0.json", "process-1.json"], out
  for rank in range(2):
    assert f"myplugin-trace {folder}]" in job.event(rank, "error")["error"], out


def _record(call, op, processes, state, start, end=None):
  return {"id": call, "op": op, "reduction": "", "dtype": "u8", "count": 1024, "processes": processes,
          "num_processes": 2, "group_hash": "7", "call": call, "extra": "0", "name": "", "function": "",
          "describe": f"{op} u8[1024] (call #{call}) on processes {processes}", "state": state, "start": start,
          "match": start, "end": end}


def test_trace_cli_reads_a_transfer_as_one_call_and_names_one_that_stuck(tmp_path):
  """Two processes' files as the recorder writes them: transfer #0 done,
  #1 matched on both sides but open. The two sides of a transfer (a send,
  a receive) are one call, not a divergence; the open one is named."""
  sides = {0: [_record(0, "send", [0, 1], "done", 1.0, 1.5), _record(1, "receive", [1, 0], "matched", 2.0)],
           1: [_record(0, "receive", [0, 1], "done", 1.0, 1.5), _record(1, "send", [1, 0], "matched", 2.0)]}
  for p, calls in sides.items():
    (tmp_path / f"process-{p}.json").write_text(json.dumps(
        {"format": "myplugin-flight-recorder-1", "process": p, "num_processes": 2, "pid": 100 + p, "host": "h",
         "reason": "a straggler report", "written_at": 12.0, "capacity": 8, "recorded": 2, "calls": calls}))
  rc, text = trace(tmp_path)
  assert rc == 0, text
  assert "DIVERGED" not in text, text
  assert ("STUCK IN call #1 on processes [0, 1]: every process reached it, yet it had not completed "
          "(process 0: receive u8[1024], matched, still waiting 10.00 s when written; "
          "process 1: send u8[1024], matched, still waiting 10.00 s when written)") in text, text
  # A send against a receive of another size is still a divergence.
  calls = sides[1]
  calls[1] = dict(calls[1], count=2048, describe="send u8[2048] (call #1) on processes [1, 0]")
  (tmp_path / "process-1.json").write_text(json.dumps(
      {"format": "myplugin-flight-recorder-1", "process": 1, "num_processes": 2, "pid": 101, "host": "h",
       "reason": "a straggler report", "written_at": 12.0, "capacity": 8, "recorded": 2, "calls": calls}))
  rc, text = trace(tmp_path)
  assert "DIVERGED at call #1 on processes [0, 1]: process 0 issued receive u8[1024]; process 1 issued send u8[2048]" in text, text


def test_trace_cli_refuses_bad_input_clearly(tmp_path):
  rc, text = trace(tmp_path / "absent")
  assert rc == 2 and "is not a folder" in text, text
  rc, text = trace(tmp_path)
  assert rc == 2 and "no flight recorder files (process-*.json)" in text, text
  (tmp_path / "process-0.json").write_text("{not json")
  rc, text = trace(tmp_path)
  assert rc == 2 and "process-0.json is not a flight recorder file" in text, text
  (tmp_path / "process-0.json").write_text('{"format": "other"}')
  rc, text = trace(tmp_path)
  assert rc == 2 and "not a myplugin flight recorder file" in text, text


def test_console_script_is_installed():
  script = os.path.join(os.path.dirname(sys.executable), "myplugin-trace")
  assert os.path.exists(script), script
  r = run([script, "--help"], child_env(), timeout=60)
  assert r.returncode == 0 and "diverged" in r.stdout, r.output
