"""Jobs across hosts whose link is poor, as a cluster's network can be:
packets lost at random on the way into each host, and each host's sending
held to a bandwidth by a token bucket (tests/cluster/hosts.py, degrade();
real kernel packet drops and queueing, with TCP's own retransmissions).
Results must still equal numpy's, with no false failure (the job runs with
a 3 s heartbeat timeout, far below the default); and a process that dies
or freezes there must still be named on the survivor within the heartbeat
timeout + 5 s. Each test also checks that the link really lost packets and
that TCP really sent segments again, so that it cannot pass on a clean
link.

Needs root (CI runs as root): namespaces, veths, iptables and tc."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from cluster.hosts import Cluster, skip_or_fail_without_namespaces, wait_all
from cluster.job import ClusterJob
from proc import child_env, kill_group

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "programs", "degraded_link_worker.py")
FAULT_WORKER = os.path.join(HERE, "cluster", "fault_worker.py")
HEARTBEAT = 3.0
FAULT_DEADLINE = HEARTBEAT + 5.0
# 2 % of the packets into each host lost, each host's sending held to
# 200 Mbit/s: TCP retransmits often (hundreds of times a job here) yet
# keeps most of the bandwidth, so a job still ends in CI's time.
LOSS = 0.02
RATE = "200mbit"
CHECKS = {"sum_0", "sum_1", "sum_2", "all_gather", "psum_scatter", "all_to_all", "ppermute",
          "device_put_both_ways", "broadcast_one_to_all", "sync_global_devices"}


@pytest.fixture
def poor_link():
  skip_or_fail_without_namespaces()
  with Cluster(2) as c:
    for host in c.hosts:
      c.degrade(host, loss=LOSS, rate=RATE)
    yield c


def _link_was_poor(c: Cluster) -> tuple[list[int], list[int]]:
  dropped = [c.dropped(h) for h in c.hosts]
  resent = [c.tcp_retransmits(h) for h in c.hosts]
  assert all(d > 0 for d in dropped), f"the link lost nothing: dropped {dropped}"
  assert sum(resent) > 0, f"TCP sent nothing again: {resent}"
  return dropped, resent


def test_every_kind_of_traffic_is_right_on_a_lossy_slow_link(poor_link, tmp_path):
  """Sums, shard_map collectives, device_put both ways and multihost_utils
  over 2 hosts x 2 devices, each result equal to numpy's."""
  c = poor_link
  with ClusterJob(c, c.hosts, [WORKER], tmp_path, devices=2, port=29580, heartbeat=HEARTBEAT) as job:
    job.wait(300)
    assert job.returncodes() == [0, 0], job.all_output()
    for rank in range(2):
      got = job.results(rank)
      assert len(got) == 1 and got[0]["rank"] == rank, job.all_output()
      assert set(got[0]["checks"]) == CHECKS, got[0]
      assert all(got[0]["checks"].values()), got[0]
    dropped, resent = _link_was_poor(c)
    print(f"packets dropped {dropped}, TCP segments sent again {resent}; "
          f"seconds {[job.results(r)[0]['seconds'] for r in range(2)]}")
    assert not c.leftover_processes(), c.leftover_processes()


@pytest.mark.parametrize("fault", ["killed", "frozen"])
def test_a_dead_or_frozen_process_is_named_on_a_lossy_slow_link(poor_link, tmp_path, fault):
  """Two ranks all-reduce in a loop (each step checked) across the poor
  link; then rank 1 is killed (its connections close) or frozen (SIGSTOP:
  only its silence tells). Rank 0 must end within the heartbeat timeout
  + 5 s naming process 1, with no wrong step and no false failure before."""
  c = poor_link
  with ClusterJob(c, c.hosts, [FAULT_WORKER], tmp_path, port=29585, heartbeat=HEARTBEAT) as job:
    job.wait_event("ready", timeout=90)
    time.sleep(2)  # steps across the poor link before the fault
    assert job.returncodes() == [None, None], job.all_output()
    struck = time.monotonic()
    os.killpg(job.procs[1].pid, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
    ended = wait_all(job.procs[:1], struck + FAULT_DEADLINE + 10)[0]
    out = job.output(0)
    assert ended is not None, f"rank 0 still running {FAULT_DEADLINE + 10} s after the fault\n{job.all_output()}"
    print(f"{fault}: rank 0 ended {ended - struck:.2f} s after the fault")
    assert ended - struck <= FAULT_DEADLINE, f"rank 0 took {ended - struck:.2f} s\n{job.all_output()}"
    assert job.returncodes()[0] not in (0, None), job.all_output()
    assert job.event(0, "wrong") is None, job.all_output()
    assert "process 1 failed" in out, out
    _link_was_poor(c)


def test_a_stall_on_a_link_that_lost_everything_says_so(tmp_path):
  """The link between two workers loses every packet both ways while each
  still reaches the coordinator on a third host: no heartbeat sees it, the
  collective's stall bound ends it, and each error must say what TCP saw:
  its segments to the other unacknowledged, sent again and again."""
  skip_or_fail_without_namespaces()
  with Cluster(3) as c:
    a, b, coordinator = c.hosts
    token = "link-token"
    cli = shutil.which("myplugin-coordinator", path=os.path.dirname(sys.executable))
    service = c.popen(coordinator, [cli, "--port", "29590", "--num-processes", "2", "--heartbeat-timeout",
                                    str(HEARTBEAT)], child_env(MYPLUGIN_COORDINATOR_TOKEN=token),
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
      with ClusterJob(c, [a, b], [FAULT_WORKER], tmp_path, port=29590, heartbeat=HEARTBEAT, coordinator=coordinator,
                      env={"MYPLUGIN_COORDINATOR_TOKEN": token, "MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS": "2",
                           "MYPLUGIN_COLLECTIVE_STALL_SECONDS": "2"}) as job:
        job.wait_event("ready", timeout=60)
        c.drop_incoming(a, b)
        c.drop_incoming(b, a)
        job.wait(30)
        for rank, other in ((0, b), (1, a)):
          out = job.output(rank)
          assert job.returncodes()[rank] not in (0, None), job.all_output()
          assert re.search(rf"the link to {re.escape(other.ipv4)} \(process {1 - rank}\) loses what this process "
                           r"sends: \d+ segments? unacknowledged, sent again \d+ times in a row", out), out
    finally:
      kill_group(service)
