"""jax.device_put onto another process's devices (jax's cross-host
transfer, through our PJRT CrossHostTransfers extension): every case of
tests/programs/cross_host_worker.py equals numpy on the receiving process,
and the other process holds no shard of the result."""
import json
import os
import re
import sys

from job import HERE
from proc import child_env, run_python

WORKER = f"{HERE}/programs/cross_host_worker.py"


def test_device_put_across_processes_equals_numpy():
  r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--devices-per-process", "2", "--",
                  sys.executable, WORKER], child_env(), timeout=240)
  assert r.returncode == 0, r.output
  results = [json.loads(l.split("RESULT ", 1)[1]) for l in r.stdout.splitlines() if "RESULT " in l]
  assert sorted(res.pop("rank") for res in results) == [0, 1], r.output
  for res in results:
    assert len(res) == 16 and all(res.values()), (res, r.output)


# ---- The direct path: size, memory, faults (tests/programs/transfer_worker.py) ----
import signal  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

from job import Job  # noqa: E402

TRANSFER_WORKER = "transfer_worker.py"
ONE_DEVICE = {"MYPLUGIN_NUM_DEVICES": "1"}


def test_a_transfer_over_256_mib_succeeds_with_bounded_memory():
  """300 MiB: more than the coordination store's limit (which the old path
  went through, twice); the data equals what was sent, and neither side
  holds more than a few pieces beyond the arrays themselves."""
  with Job(2, ["big"], program=TRANSFER_WORKER, env=ONE_DEVICE) as job:
    codes = job.wait(timeout=240)
    assert codes == {0: 0, 1: 0}, job.all_output()
    sender, receiver = job.event(0, "big"), job.event(1, "big")
    assert receiver["ok"], job.all_output()
    # The sender's array exists before; the receiver's is made as it arrives.
    # Beyond the arrays, each side maps the ring between them (4 pieces of
    # 16 MiB, transfer_endpoint.h) and little else; a copy of the whole array
    # (as the old path made on the sender) is 300 MiB.
    assert sender["peak_mib"] - sender["before_mib"] < 96, sender
    assert receiver["peak_mib"] - receiver["before_mib"] < 300 + 96, receiver
    assert sender["rings"] == receiver["rings"] == 1, (sender, receiver)  # one host: through shared memory


def test_sender_killed_mid_transfer_ends_the_receivers_wait_naming_it():
  env = dict(ONE_DEVICE, TEST_HEARTBEAT_TIMEOUT="60")  # the transfer, not the heartbeat, must notice
  with Job(2, ["ping_pong"], program=TRANSFER_WORKER, env=env) as job:
    job.wait_event("looping")
    time.sleep(0.5)
    job.signal(0, signal.SIGKILL)
    t0 = time.monotonic()
    job.wait_event("error", ranks=[1], timeout=30)
    assert time.monotonic() - t0 < 10, job.all_output()
    e = job.event(1, "error")
    assert "process 0" in e["error"], e
    assert "failed" in e["error"] or "closed" in e["error"], e  # the cause
    # Nothing left behind: the connections to the dead process are closed,
    # their rings unmapped.
    assert e["sockets"] <= job.event(1, "looping")["sockets"] - 1, (e, job.event(1, "looping"))
    assert e["shm"] == job.event(1, "looping")["shm"], e
    # (At "looping" the ring of process 0's 16 MiB send is mapped; process
    # 1's own small send back may still be setting its ring up.)
    assert job.event(1, "looping")["rings"] >= 1 and e["rings"] == 0, (e, job.event(1, "looping"))
    # The transfers are calls in the flight recorder that the failure wrote:
    # sends and receives between the two processes. (Whether the last is
    # done depends on when the notice came: between two transfers, it is.)
    trace = re.search(r"flight recorder written to (\S+)", job.output(1))
    assert trace, job.all_output()
    with open(os.path.join(trace.group(1), "process-1.json")) as f:
      calls = [c for c in json.load(f)["calls"] if c["op"] in ("send", "receive")]
    assert {c["op"] for c in calls} == {"send", "receive"}, calls[-4:]
    assert all(c["processes"] == [0, 1] or c["processes"] == [1, 0] for c in calls), calls[-4:]


def test_receiver_killed_frees_the_sender_naming_it():
  env = dict(ONE_DEVICE, TEST_HEARTBEAT_TIMEOUT="60")
  with Job(2, ["ping_pong"], program=TRANSFER_WORKER, env=env) as job:
    job.wait_event("looping")
    time.sleep(0.5)
    job.signal(1, signal.SIGKILL)
    t0 = time.monotonic()
    job.wait_event("error", ranks=[0], timeout=30)
    assert time.monotonic() - t0 < 10, job.all_output()
    e = job.event(0, "error")
    assert "process 1" in e["error"], e
    assert e["sockets"] <= job.event(0, "looping")["sockets"] - 1, (e, job.event(0, "looping"))
    assert e["rings"] == 0, e
    codes = job.wait([0], timeout=30)  # and it is free to go
    assert codes[0] == 0, job.all_output()


@pytest.mark.parametrize("stopped", [0, 1])
def test_a_stopped_peer_is_named_within_the_transfer_bounds(stopped):
  """SIGSTOP of the sender of the big array, or of its receiver: the
  connection stays open and heartbeats are slow to tell (300 s here); the
  transfer's own bounds (2 s without data, 4 s for the other side to come)
  must name the stopped process."""
  env = dict(ONE_DEVICE, TEST_HEARTBEAT_TIMEOUT="300", MYPLUGIN_COLLECTIVE_STALL_SECONDS="2",
             MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS="4")
  other = 1 - stopped
  with Job(2, ["ping_pong"], program=TRANSFER_WORKER, env=env) as job:
    job.wait_event("looping")
    time.sleep(0.5)
    job.signal(stopped, signal.SIGSTOP)
    job.wait_event("error", ranks=[other], timeout=30)
    e = job.event(other, "error")
    assert e["waited"] < 15, e
    assert f"process {stopped}" in e["error"], e
    assert any(why in e["error"] for why in ("sent no data for 2 s", "took no data for 2 s", "never sent it")), e
    assert e["code"] == "DEADLINE_EXCEEDED" and e["processes"] == [stopped], e


def test_a_shape_mismatch_is_an_error_naming_both_sides():
  with Job(2, ["mismatch"], program=TRANSFER_WORKER, env=ONE_DEVICE) as job:
    job.wait(timeout=120)
    e = job.event(1, "error")
    assert e, job.all_output()
    assert "process 0 sends type 11 [8]" in e["error"] and "process 1 expects type 11 [4]" in e["error"], e
    assert not job.event(1, "received")
    # The sender hears the refusal too.
    assert "refused it" in job.output(0) and "expects type 11 [4]" in job.output(0), job.all_output()


def test_a_receiver_that_gives_up_frees_the_late_sender():
  env = dict(ONE_DEVICE, MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS="3")
  with Job(2, ["late_sender"], program=TRANSFER_WORKER, env=env) as job:
    job.wait(timeout=120)
    e = job.event(1, "error")
    assert e and "process 0 never sent it" in e["error"] and e["code"] == "DEADLINE_EXCEEDED", job.all_output()
    assert 2.5 < e["waited"] < 10, e
    # The sender, late, is told at once that process 1 gave up.
    assert "process 1 refused it: process 1 gave up" in job.output(0), job.all_output()


def test_a_send_whose_process_goes_on_to_a_collective_completes():
  """The sender's process runs a collective that the receiver joins only
  once it has the array, with as many devices as cores: the collective's
  partitions then hold every thread of the CPU engine's pool while they
  wait, so the send must not need one (it deadlocked until the stall
  bound when it read the array through the engine)."""
  env = {"MYPLUGIN_NUM_DEVICES": str(max(2, os.cpu_count() or 2)), "MYPLUGIN_COLLECTIVE_STALL_SECONDS": "20",
         "MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS": "30"}
  with Job(2, ["then_collective"], program=TRANSFER_WORKER, env=env) as job:
    codes = job.wait(timeout=120)
    assert codes == {0: 0, 1: 0}, job.all_output()
    for rank in range(2):
      e = job.event(rank, "then_collective")
      assert e["array_ok"] and e["sum_ok"], (e, job.all_output())


def test_an_array_deleted_as_it_is_sent_arrives_whole():
  """jax.device_put to another process, then delete(): the send was issued
  first, so the receiver gets the array as it was, whatever the sender's
  process writes next into the memory it freed."""
  with Job(2, ["deleted"], program=TRANSFER_WORKER, env=ONE_DEVICE) as job:
    codes = job.wait(timeout=120)
    assert codes == {0: 0, 1: 0}, job.all_output()
    assert job.event(1, "deleted")["ok"], job.all_output()


def test_an_array_donated_as_it_is_sent_arrives_whole():
  """The sender passes the array, donated, to a jitted call while its send
  waits for the receiver: the call's result is right, and so are the bytes
  the receiver gets (the send holds the array's memory until it is done)."""
  with Job(2, ["donated"], program=TRANSFER_WORKER, env=ONE_DEVICE) as job:
    codes = job.wait(timeout=120)
    assert codes == {0: 0, 1: 0}, job.all_output()
    assert job.event(0, "donated")["ok"] and job.event(1, "donated")["ok"], job.all_output()


# ---- Between hosts: two network namespaces, so the bytes go over TCP ----
from cluster.hosts import module_hosts  # noqa: E402
from cluster.job import ClusterJob  # noqa: E402

_ports = iter(range(29720, 29760))


@pytest.fixture(scope="module")
def net():
  yield from module_hosts(2)


def test_across_hosts_over_tcp(net, tmp_path):
  """300 MiB between namespaces: over the TCP connection (no ring), equal
  to what was sent, memory bounded as on one host."""
  with ClusterJob(net, net.hosts, [f"{HERE}/programs/{TRANSFER_WORKER}", "big"], tmp_path, port=next(_ports)) as job:
    job.wait(300)
    assert job.returncodes() == [0, 0], job.all_output()
    sender, receiver = job.event(0, "big"), job.event(1, "big")
    assert receiver["ok"] and sender["rings"] == receiver["rings"] == 0, (sender, receiver)
    assert sender["peak_mib"] - sender["before_mib"] < 96, sender
    assert receiver["peak_mib"] - receiver["before_mib"] < 300 + 96, receiver


def test_across_hosts_a_killed_sender_is_named(net, tmp_path):
  with ClusterJob(net, net.hosts, [f"{HERE}/programs/{TRANSFER_WORKER}", "ping_pong"], tmp_path, port=next(_ports),
                  heartbeat=60) as job:
    job.wait_event("looping", timeout=120)
    time.sleep(0.5)
    job.procs[0].send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    job.wait_event("error", ranks=[1], timeout=30)
    assert time.monotonic() - t0 < 10, job.all_output()
    e = job.event(1, "error")
    assert "process 0" in e["error"] and ("failed" in e["error"] or "closed" in e["error"]), e
    assert e["sockets"] <= job.event(1, "looping")["sockets"] - 1, (e, job.event(1, "looping"))


def test_a_waiting_receive_shows_in_the_straggler_report():
  """A receive whose sender is late is a call like a collective's: the
  straggler watch reports it, naming the sender as not arrived."""
  env = dict(ONE_DEVICE, MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS="5", MYPLUGIN_STRAGGLER_SECONDS="1.5")
  with Job(2, ["late_sender"], program=TRANSFER_WORKER, env=env) as job:
    job.wait(timeout=120)
    report = job.output(0)  # the first member prints the reports
    assert "receive u8[32] (call #0) on processes [0, 1] has waited" in report, job.all_output()
    assert "arrived: processes [1]; not arrived: processes [0]" in report, job.all_output()
