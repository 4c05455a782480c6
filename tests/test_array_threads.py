"""Arrays that several threads touch at once while they move between
processes (tests/programs/array_threads_worker.py): reads of every kind
(np.asarray, np.from_dlpack, jax.dlpack, __array__, the buffer protocol)
during repeated sends of the same array, reads of arrays as they arrive,
one array sent to two processes at once, a view of numpy memory deleted
while it is sent, deletes and donations during sends, a receiver killed
mid-burst, and a random mix of all of them. Each is a real job of
processes with one device each, bounded in rounds and time; every process
must end cleanly, and every array that arrived must equal what was sent
(numpy on both sides).

Before the buffer holds (engine/buffer_holds.h), the engine's list of a
buffer's external references was changed by several threads at once: the
readers job aborted the sender within 20 rounds (the list corrupted:
jaxlib's fatal "decrease reference on a buffer with zero reference count";
a corrupted heap or SIGSEGV in other runs), and a lock around those changes
deadlocked the deleted-view job against the GIL."""
import json
import os
import signal
import time

import pytest

from job import HERE, Job
from proc import child_env, run_python

WORKER = "array_threads_worker.py"
ONE_DEVICE = {"MYPLUGIN_NUM_DEVICES": "1"}
# Rounds a job: enough for thousands of sends with readers racing them
# (the crash above took a few hundred); more under TEST_STRESS_ROUNDS.
ROUNDS = os.environ.get("TEST_STRESS_ROUNDS", "150")


def run_job(scenario, processes=2, timeout=180, **env):
  with Job(processes, [scenario], program=WORKER, env=dict(ONE_DEVICE, ROUNDS=ROUNDS, SECONDS="60", **env)) as job:
    codes = job.wait(timeout=timeout)
    assert codes == {r: 0 for r in range(processes)}, job.all_output()
    done = [job.event(r, "done") for r in range(processes)]
    assert all(done), job.all_output()
    for d in done:
      assert d["ok"], (d, job.all_output())
      assert d["rounds"] > 0, d
    return done


def test_readers_during_repeated_sends_of_the_same_array():
  sender, _ = run_job("readers")
  assert sender["reads"] > 0, sender  # the reader thread really raced the sends


def test_readers_of_arrays_as_they_arrive():
  _, receiver = run_job("received")
  assert receiver["reads"] > 0, receiver


def test_one_array_sent_to_two_processes_at_once():
  run_job("two", processes=3)


def test_a_view_of_numpy_memory_deleted_while_it_is_sent_then_an_export():
  """The view's last release runs numpy's deleter, which takes the GIL,
  while the main thread exports another array: no deadlock."""
  sender, _ = run_job("deleted_view", timeout=120)
  assert sender["reads"] == sender["rounds"], sender


def test_deletes_and_donations_during_sends():
  run_job("donate")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_random_mix_of_sends_exports_deletes_and_donations(seed):
  run_job("mix", MIX_SEED=str(seed))


def test_a_receiver_killed_mid_burst_frees_the_sender_and_its_readers():
  env = dict(ONE_DEVICE, ROUNDS="100000", SECONDS="120", TEST_HEARTBEAT_TIMEOUT="60")
  with Job(2, ["readers"], program=WORKER, env=env) as job:
    job.wait_event("looping")
    time.sleep(0.5)
    job.signal(1, signal.SIGKILL)
    job.wait_event("error", ranks=[0], timeout=30)
    e = job.event(0, "error")
    assert "process 1" in e["error"], e
    codes = job.wait([0], timeout=30)
    assert codes[0] == 0, job.all_output()


@pytest.mark.parametrize("platform", ["myplugin", "cpu"])
def test_readers_of_views_of_numpy_memory_let_go_meanwhile(platform):
  """jaxlib's own external references, from several threads at once, on
  views whose last release runs numpy's deleter: no crash and no deadlock
  on myplugin, as on jax's CPU backend, and every read equals numpy."""
  r = run_python([os.path.join(HERE, "programs", "view_readers.py")], child_env(JAX_PLATFORMS=platform), timeout=120)
  assert r.returncode == 0, r.output
  res = json.loads(r.stdout.split("RESULT ", 1)[1])
  assert res["rounds"] > 0 and res["reads"] > 0 and not res["wrong"], res
