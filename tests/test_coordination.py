"""The coordination service end to end: real processes, real sockets.
Every job has deadlines and is killed on the way out (job.py)."""
import os
import re
import signal
import socket
import time

import pytest

from jax_plugin import _myplugin
from job import Job

FATE = 42  # the fate-sharing exit code
HEARTBEAT = 3.0


def test_eight_processes_register_share_kv_and_barriers_and_shut_down():
  with Job(8, ["kv_barrier"]) as job:
    codes = job.wait(timeout=120)
    assert codes == {r: 0 for r in range(8)}, job.all_output()
    topologies = [job.event(r, "registered")["topology"] for r in range(8)]
    assert all(t == topologies[0] for t in topologies)  # everyone agrees
    assert [p["num_devices"] for p in topologies[0]] == [1] * 8
    assert len({p["pid"] for p in topologies[0]}) == 8
    # One host: one identity, a hash of the kernel's boot id, this host's
    # name and the network namespace (FNV-1a, 64 bits, computed here).
    boot_id = open("/proc/sys/kernel/random/boot_id").read().strip()
    described = f"{boot_id}/{socket.gethostname()}/net:{os.stat('/proc/self/ns/net').st_ino}"
    h = 0xcbf29ce484222325
    for byte in described.encode():
      h = ((h ^ byte) * 0x100000001b3) % 2**64
    assert [p["host_id"] for p in topologies[0]] == [f"{h:016x}"] * 8
    for r in range(8):
      done = job.event(r, "done")
      assert done["got"] == f"value-{(r + 1) % 8}"
      assert done["listed"] == sorted(f"proc/{i}" for i in range(8))
      assert done["binary_ok"] is True
      assert done["missing"] is None
      assert "DEADLINE_EXCEEDED" in done["timeout_error"] and "never/set" in done["timeout_error"]
      assert done["after_delete"] is None
      assert job.event(r, "shutdown")
    assert "failed" not in job.all_output()


def _inject(job, rank, sig):
  """Once every process loops, sends `sig` to `rank`; returns when it did."""
  job.wait_event("looping")
  time.sleep(0.5)
  job.signal(rank, sig)
  return time.monotonic()


def _surviving_exits(job, victim, injected_at, budget):
  survivors = [r for r in range(job.n) if r != victim]
  codes = job.wait(survivors, timeout=budget + 30)
  for r in survivors:
    assert codes[r] != 0, job.all_output()
    assert job.exit_times[r] - injected_at < budget, (
        f"rank {r} took {job.exit_times[r] - injected_at:.1f} s (budget {budget} s)\n{job.all_output()}")
  return survivors


@pytest.mark.parametrize("victim", [1, 0])  # a worker, and the process that hosts the service
def test_sigkill_is_detected_and_shared(victim):
  with Job(4, ["loop"], env={"TEST_HEARTBEAT_TIMEOUT": str(HEARTBEAT)}) as job:
    injected = _inject(job, victim, signal.SIGKILL)
    survivors = _surviving_exits(job, victim, injected, HEARTBEAT + 5)
    for r in survivors:
      out = job.output(r)
      if victim == 0:
        assert "lost the connection to the myplugin coordinator" in out, out
      else:
        assert f"process {victim} failed: lost its connection without an orderly shutdown" in out, out
      assert job.procs[r].returncode == FATE or "error" in out
      err = job.event(r, "error")
      if err:  # raised before the fate-sharing exit: typed by what failed
        if victim == 0:
          assert (err["class"], err["processes"]) == ("CoordinationError", []), err
        else:
          assert (err["class"], err["processes"], err["jax_error"]) == ("PeerFailure", [victim], True), err


def test_sigstop_is_detected_by_heartbeat():
  with Job(3, ["loop"], env={"TEST_HEARTBEAT_TIMEOUT": str(HEARTBEAT)}) as job:
    injected = _inject(job, 2, signal.SIGSTOP)
    survivors = _surviving_exits(job, 2, injected, HEARTBEAT + 5)
    for r in survivors:
      assert "process 2 failed: stopped responding: no heartbeat for 3 s" in job.output(r), job.all_output()
      # Its host still acknowledges the service's heartbeats: the process,
      # not the link, stopped (common/tcp_links.h).
      assert re.search(r"no heartbeat for 3 s \(the process is frozen, stopped or overloaded\); nothing the "
                       r"coordinator sent to \S+ \(process 2\) is unacknowledged", job.output(r)), job.all_output()
      err = job.event(r, "error")
      assert err and "process 2 failed" in err["error"]
      assert (err["class"], err["processes"], err["code"], err["jax_error"]) == ("PeerFailure", [2], "ABORTED", True)


def test_sigstop_of_the_service_host_is_detected_by_clients():
  with Job(3, ["loop"], env={"TEST_HEARTBEAT_TIMEOUT": str(HEARTBEAT)}) as job:
    injected = _inject(job, 0, signal.SIGSTOP)
    survivors = _surviving_exits(job, 0, injected, HEARTBEAT + 5)
    for r in survivors:
      assert "stopped responding" in job.output(r) and "coordinator" in job.output(r), job.all_output()
      assert re.search(r"stopped responding: nothing heard for 3 s \(it is frozen, stopped or unreachable\); nothing "
                       r"this process sent to \S+ \(the coordinator\) is unacknowledged", job.output(r)), job.all_output()


def test_exit_without_shutdown_is_a_failure():
  with Job(3, ["exit_early", "1"], env={"TEST_HEARTBEAT_TIMEOUT": str(HEARTBEAT)}) as job:
    codes = job.wait(timeout=HEARTBEAT + 30)
    assert codes[1] == 0
    for r in (0, 2):
      assert codes[r] != 0
      assert "process 1 failed: lost its connection without an orderly shutdown" in job.output(r), job.all_output()


def test_barrier_timeout_names_the_missing_process():
  with Job(3, ["barrier_missing", "2"]) as job:
    codes = job.wait(timeout=90)
    assert codes == {0: 0, 1: 0, 2: 0}, job.all_output()
    for r in (0, 1):
      e = job.event(r, "barrier_error")
      err = e["error"]
      assert "Barrier timed out: barrier 'b' waited 2 s; processes [2] did not arrive (arrived: [0, 1])" in err, err
      assert (e["class"], e["processes"], e["collective"], e["call"], e["code"], e["jax_error"]) == \
          ("CollectiveTimeout", [2], "barrier 'b'", None, "DEADLINE_EXCEEDED", True), e


def test_barrier_fails_at_once_when_a_process_finished():
  with Job(3, ["finish_early", "0"]) as job:
    codes = job.wait(timeout=90)
    for r in (1, 2):
      err = job.event(r, "barrier_error")
      assert err, job.all_output()
      assert "process 0 is shutting down (it finished its work)" in err["error"]
      assert codes[r] == 5


def test_initialization_timeout_names_the_process_that_never_started():
  with Job(3, ["never_start", "1"], env={"TEST_INIT_TIMEOUT": "3"}) as job:
    codes = job.wait([0, 2], timeout=60)
    for r in (0, 2):
      err = job.event(r, "init_error")
      assert err, job.all_output()
      assert "initialization timed out after 3 s: processes [1] never registered" in err["error"]
      assert codes[r] == 3
    # While it waited, the service said who had joined and who not.
    # (Process 2 may still be starting at the first report.)
    assert re.search(r"still waiting for processes \[1(, 2)?\] to register \(registered: \[0(, 2)?\]; \d+ s left",
                     job.all_output()), job.all_output()


def test_initialization_ignores_unreachable_proxies():
  proxy = "http://127.0.0.1:9"  # nothing listens there; the service speaks plain TCP and never uses it
  env = {"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "GRPC_PROXY": proxy, "http_proxy": proxy,
         "https_proxy": proxy, "grpc_proxy": proxy}
  with Job(2, ["kv_barrier"], env=env) as job:
    assert job.wait(timeout=90) == {0: 0, 1: 0}, job.all_output()


def test_a_stopped_reader_stalls_nobody_and_is_declared_failed(tmp_path):
  # Process 2 waits for 90 MiB of values and is stopped; the service cannot
  # hand them over. The others' calls must not wait for it (the state
  # lock is never held while sending), and process 2 is declared failed for
  # not reading, before its heartbeats would have run out.
  heartbeat = 6.0
  progress = _myplugin.coordination_send_progress_timeout(heartbeat)
  assert progress < heartbeat
  flag = tmp_path / "stopped"
  with Job(3, ["slow_reader", str(flag)], env={"TEST_HEARTBEAT_TIMEOUT": str(heartbeat)}) as job:
    job.wait_event("waiting", ranks=[2])
    time.sleep(0.3)
    job.signal(2, signal.SIGSTOP)
    flag.write_text("1")
    job.wait_event("latencies", ranks=[0, 1], timeout=60)
    for r in (0, 1):
      ev = job.event(r, "latencies")
      assert ev["count"] >= 20, job.all_output()
      # Calls went on for the whole time the service held the values (from
      # the flag until the failure, at least the progress timeout).
      assert ev["seconds"] >= progress, ev
      assert ev["max"] < 1.0, (r, ev)
      assert "process 2 failed: stopped reading from the coordination service (" in ev["error"], ev
      assert f"bytes queued, no progress for {progress:g} s)" in ev["error"], ev
    job.signal(2, signal.SIGCONT)
