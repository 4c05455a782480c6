"""The coordination service at 4,096 processes: every process registers,
a barrier of all and key-value calls are answered for every one, and one
death is told to every other, nothing dropped.

The service runs as users run it (myplugin-coordinator, its own process);
the processes are simulated by bench/coordination_scale.cc (built here with
CMake: the protocol's codec and the generator only), real TCP connections
speaking the real protocol, all on one epoll loop. The generator checks each
reply against what it must be (the topology reply byte for byte against the
codec's encoding of what the job registered; each value against what its
neighbour set) and counts what is missing; this test asserts behaviour, not
times (bench/coordination_scale.py measures those).
"""
import json
import os
import resource
import shutil
import subprocess
import sys

import pytest

from proc import child_env, kill_group, run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROCESSES = 4096


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
  if shutil.which("cmake") is None:
    pytest.fail("cmake is needed to build the load generator (bench/coordination_scale.cc)")
  build = tmp_path_factory.mktemp("scale-build")
  generator = ["-G", "Ninja"] if shutil.which("ninja") else []
  configure = run(["cmake", "-S", ROOT, "-B", str(build), *generator, f"-DPython_EXECUTABLE={sys.executable}"],
                  dict(os.environ), timeout=300)
  assert configure.returncode == 0, configure.output
  compile_ = run(["cmake", "--build", str(build), "--target", "coordination_scale"], dict(os.environ), timeout=300)
  assert compile_.returncode == 0, compile_.output
  return str(build / "coordination_scale")


def _start_service(tmp_path, n: int, io_threads: int = 0):
  cli = shutil.which("myplugin-coordinator", path=os.path.dirname(sys.executable))
  assert cli, "myplugin-coordinator is not installed beside this Python"
  log = open(tmp_path / "coordinator.log", "w+")
  # Port 0: the service picks one and says which.
  service = subprocess.Popen([cli, "--port", "0", "--num-processes", str(n), "--bind", "127.0.0.1",
                              "--io-threads", str(io_threads)],
                             env=child_env(MYPLUGIN_COORDINATOR_TOKEN="scale-test"), stdout=log,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
  return service, log


def _port(service, log, timeout=60.0) -> int:
  import time
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    log.seek(0)
    for line in log.read().splitlines():
      if "listening on" in line:
        return int(line.split(" for ")[0].rsplit(":", 1)[1])
    assert service.poll() is None, "the coordinator exited: " + log.read()
    time.sleep(0.1)
  raise AssertionError("the coordinator did not start listening")


def test_4096_processes_register_meet_store_and_hear_of_a_death(generator, tmp_path):
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  assert hard >= PROCESSES + 128, f"this test needs {PROCESSES + 128} descriptors a process (ulimit -Hn is {hard})"
  # Three event loops (the default here is one: half of CI's two cores):
  # members on different loops arrive, are released and hear of the death
  # at once, as on a machine with cores to spare.
  service, log = _start_service(tmp_path, PROCESSES, io_threads=3)
  try:
    port = _port(service, log)
    r = run([generator, "--port", str(port), "--token", "scale-test", "--num-processes", str(PROCESSES),
             "--rounds", "2", "--idle-seconds", "1", "--death", "closed", "--phase-timeout", "60",
             "--service-pid", str(service.pid)], child_env(), timeout=240)
    assert r.stdout.strip(), r.output
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["problem_list"] == [], result["problem_list"]
    # Every process registered and got every process's topology.
    assert result["registered"] == PROCESSES
    # The barrier and the key-value rounds were answered for every process
    # (the generator counts a missing reply as a problem, above), and ran.
    assert len(result["barrier_total_s"]) == 2 and len(result["kv_set_get_s"]) == 2
    # The death (process 4095 closed its socket) reached every other one,
    # naming it.
    assert result["death_told"] == PROCESSES - 1
    assert result["problems"] == 0
    # The service served all of them on its event loops, not a thread each.
    assert 0 < result["threads"] < 16, result["threads"]
    # And the job failed for the reason the death gives.
    service.wait(timeout=30)
    log.seek(0)
    out = log.read()
    assert service.returncode == 1, out
    assert f"process {PROCESSES - 1} failed: lost its connection" in out, out
  finally:
    kill_group(service)
    log.close()


def test_a_wrong_number_of_event_loops_is_refused_at_start(tmp_path):
  cli = shutil.which("myplugin-coordinator", path=os.path.dirname(sys.executable))
  assert cli, "myplugin-coordinator is not installed beside this Python"
  r = run([cli, "--port", "0", "--num-processes", "2", "--io-threads", "9"], child_env(), timeout=60)
  assert r.returncode == 1, r.output
  assert "io_threads must be between 1 and 8 (or 0 for 1, the default for this job), got 9" in r.output, r.output
