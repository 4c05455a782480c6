"""The collectives across hosts: 2 "hosts" (network namespaces on a bridge,
tests/cluster/hosts.py) x 2 processes each, on the hierarchical transport
(shared memory within each host, Gloo between the hosts' leaders), checked
against numpy by tests/programs/collectives_worker.py: every op, dtype and
reduction; a mismatch; a killed and a stopped peer. The host identity each
process publishes includes its network namespace, so "auto" must choose
hierarchical for these jobs and Gloo where each host holds one process.

Needs root (CI runs as root): namespaces and veths."""
from __future__ import annotations

import os
import re
import signal
import time

import pytest

from cluster.hosts import module_hosts
from cluster.job import ClusterJob
from test_collectives import MISMATCHES, assert_mismatch_named, mapped_anywhere

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "programs", "collectives_worker.py")
HEARTBEAT = 4.0
_ports = iter(range(29610, 29700))


def next_port() -> int:
  """A coordinator port no earlier job of this module used."""
  return next(_ports)


@pytest.fixture(scope="module")
def net():
  yield from module_hosts(2)


def placed(net, layout):
  """Hosts for the ranks: "aabb" puts ranks 0, 1 on the first host."""
  return [net.hosts["ab".index(h)] for h in layout]


def assert_hierarchical(job, layout, event):
  """Each process maps its host's segment, and only its host's: the hosts'
  processes share memory among themselves, never across."""
  by_host = {h: set() for h in set(layout)}
  for rank, h in enumerate(layout):
    segments = set(job.event(rank, event)["segments"])
    assert segments, (rank, job.event(rank, event))
    by_host[h] |= segments
  assert not by_host["a"] & by_host["b"], by_host


def job_env(transport, **env):
  return dict(env, MYPLUGIN_TRANSPORT=transport)


@pytest.mark.parametrize("layout,devices", [("abab", 1), ("aabb", 2)])
@pytest.mark.parametrize("transport", ["auto", "hierarchical"])
def test_matrix_against_numpy(net, tmp_path, layout, devices, transport):
  """Every op x dtype x reduction, ranks of one host contiguous or not."""
  with ClusterJob(net, placed(net, layout), [WORKER, "matrix"], tmp_path, devices=devices, port=next_port(),
                  env=job_env(transport, TEST_LARGE="1" if devices == 1 else "0")) as job:
    job.wait(600)
    assert job.returncodes() == [0] * 4, job.all_output()
    for r in range(4):
      m = job.event(r, "matrix")
      assert m["failures"] == [], m["failures"]
      assert m["checked"] > 300
    assert_hierarchical(job, layout, "matrix")


def test_every_op_on_64_megabytes(net, tmp_path):
  with ClusterJob(net, placed(net, "aabb"), [WORKER, "big_ops"], tmp_path, port=next_port(),
                  env=job_env("auto")) as job:
    job.wait(300)
    assert job.returncodes() == [0] * 4, job.all_output()
    for r in range(4):
      assert job.event(r, "big_ops")["failures"] == [], job.event(r, "big_ops")
    assert_hierarchical(job, "aabb", "big_ops")


def test_one_process_per_host_takes_gloo(net, tmp_path):
  """Shared memory within a host pays only where a host holds several."""
  with ClusterJob(net, net.hosts, [WORKER, "big"], tmp_path, port=next_port(), env=job_env("auto")) as job:
    job.wait(120)
    assert job.returncodes() == [0, 0], job.all_output()
    for r in range(2):
      e = job.event(r, "big")
      assert (e["ok"], e["segments"]) == (True, []), e


def test_shm_across_hosts_is_a_clear_error(net, tmp_path):
  with ClusterJob(net, placed(net, "aabb"), [WORKER, "big"], tmp_path, port=next_port(), env=job_env("shm")) as job:
    job.wait(120)
    for r in range(4):
      assert job.returncodes()[r] != 0, job.all_output()
      assert "MYPLUGIN_TRANSPORT=shm, but processes [0, 1, 2, 3] do not share one host" in job.output(r)


@pytest.mark.parametrize("scenario,deviant,others", MISMATCHES)
def test_mismatch_fails_everyone_with_both_sides_named(net, tmp_path, scenario, deviant, others):
  with ClusterJob(net, placed(net, "abab"), [WORKER, scenario], tmp_path, port=next_port(), env=job_env("auto")) as job:
    job.wait(120)
    assert_mismatch_named(job, 4, deviant, others)
    assert_hierarchical(job, "abab", "error")


@pytest.mark.parametrize("victim", [2, 3])
def test_sigkill_during_64mb_all_reduces(net, tmp_path, victim):
  """Process 2 leads host b (it exchanges with host a over Gloo); process 3
  only shares memory with it. Either way every survivor, on both hosts,
  names the dead process, and no segment outlives the job."""
  with ClusterJob(net, placed(net, "aabb"), [WORKER, "loop_big"], tmp_path, port=next_port(),
                  heartbeat=HEARTBEAT, env=job_env("auto")) as job:
    try:
      job.wait_event("looping", timeout=120)
      segments = {s for r in range(4) for s in job.event(r, "looping")["segments"]}
      assert len(segments) == 2, job.all_output()
      time.sleep(1.0)
      job.procs[victim].send_signal(signal.SIGKILL)
      t0 = time.monotonic()
      survivors = [r for r in range(4) if r != victim]
      ends = job.wait(HEARTBEAT + 60)
      for r in survivors:
        assert job.returncodes()[r] != 0
        assert ends[r] - t0 < HEARTBEAT + 5, job.all_output()
        assert f"process {victim} failed: lost its connection" in job.output(r), job.all_output()
        e = job.event(r, "error")
        if e:
          assert "all-reduce sum f32[16777216]" in e["error"] and f"process {victim} failed" in e["error"], e
    finally:
      net.kill_processes()
    for segment in segments:
      assert mapped_anywhere(segment) == [], segment


def test_sigstop_names_the_stalled_process(net, tmp_path):
  """A frozen non-leader on host b: the collective layer names it."""
  with ClusterJob(net, placed(net, "aabb"), [WORKER, "loop_big"], tmp_path, port=next_port(), heartbeat=120,
                  env=job_env("auto", MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS="3",
                              MYPLUGIN_COLLECTIVE_STALL_SECONDS="3")) as job:
    try:
      job.wait_event("looping", timeout=120)
      time.sleep(1.0)
      job.procs[3].send_signal(signal.SIGSTOP)
      job.wait_event("error", ranks=[0, 1, 2], timeout=60)
      for r in (0, 1, 2):
        e = job.event(r, "error")["error"]
        # Stopped before a call, or while its data moved.
        m = re.search(r"timed out after 3 s waiting for processes \[([0-9, ]+)\]|"
                      r"made no progress for 3 s: processes \[([0-9, ]+)\] stopped moving data", e)
        assert m, e
        waiting = {int(p) for p in (m.group(1) or m.group(2)).split(",")}
        assert 3 in waiting and r not in waiting, e
    finally:
      job.procs[3].send_signal(signal.SIGCONT)
      net.kill_processes()


def test_last_batch_problem_names_the_process_that_left(net, tmp_path):
  """Process 1 (host b) leaves its loop early and exits normally; the
  others, on both hosts, fail promptly, naming it."""
  with ClusterJob(net, placed(net, "abab"), [WORKER, "last_batch"], tmp_path, port=next_port(),
                  env=job_env("auto", MYPLUGIN_PEER_EXIT_GRACE_SECONDS="2")) as job:
    job.wait(60)
    assert job.event(1, "finished")["batches"] == 3, job.all_output()
    for r in (0, 2, 3):
      assert job.returncodes()[r] != 0, job.all_output()
      out = job.output(r)
      assert "process 1" in out and "finished (entered shutdown)" in out, job.all_output()
      assert "all-reduce sum f32[1000] (call #3)" in out, job.all_output()
