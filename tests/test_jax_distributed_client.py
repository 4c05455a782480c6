"""jax's distributed client, served by myplugin's coordination service, on
every way a job can start: each run of tests/programs/jax_client_worker.py
(key-value store, barriers, multihost_utils) must observe exactly what the
same program observes on jax's own gRPC service and CPU backend, print no
warning at a normal exit, start no service of jax's, and work with proxy
variables pointing at a proxy that does not exist."""
import json
import re
import socket
import sys

import pytest

from job import Job, free_port
from proc import child_env, run_python

WORKER = "jax_client_worker.py"
# Port 9 (discard) on loopback: nothing listens, every proxied connection fails.
PROXIES = {v: "http://127.0.0.1:9" for v in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "GRPC_PROXY")}
PROXIES.update({k.lower(): v for k, v in PROXIES.items()})
NOISE = re.compile(r"warn|UNAVAILABLE|CANCELLED|^[WE]\d{4} ", re.IGNORECASE | re.MULTILINE)


def _run_job(args, env, per_rank_env=None, identity=False):
  with Job(2, args, env=env, per_rank_env=per_rank_env, program=WORKER, identity=identity) as job:
    codes = job.wait(timeout=150)
    assert codes == {0: 0, 1: 0}, job.all_output()
    results = [job.results(r) for r in range(2)]
    stderr = ["\n".join(l for _, l, out in job.lines[r] if not out) for r in range(2)]
    return results, stderr, job.all_output()


@pytest.fixture(scope="module")
def reference():
  """The same program on jax's own service and CPU backend."""
  port = free_port()
  results, _, out = _run_job(["jax", "explicit"], {"JAX_PLATFORMS": "cpu"},
                             lambda r: {"ADDRESS": f"127.0.0.1:{port}", "RANK": str(r)})
  assert all(res[1]["client"] == "jaxlib._jax" for res in results), out
  return [res[0] for res in results]


def _free_ompi_port() -> int:
  """jax derives Open MPI's coordinator port from the job id, in 61440..65535."""
  for port in range(61440 + (free_port() % 3000), 65536):
    with socket.socket() as s:
      try:
        s.bind(("127.0.0.1", port))
        return port
      except OSError:
        continue
  raise AssertionError("no free port for the Open MPI path")


def _start(path: str, env: dict):
  if path == "launcher":
    r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--", sys.executable,
                    f"{__import__('job').HERE}/programs/{WORKER}", "none"], child_env(**env), timeout=150)
    assert r.returncode == 0, r.output
    results = [[json.loads(l.split("RESULT ", 1)[1]) for l in r.stdout.splitlines() if l.startswith(f"[{k}] RESULT ")]
               for k in range(2)]
    stderr = ["\n".join(l for l in r.stderr.splitlines() if l.startswith(f"[{k}] ")) for k in range(2)]
    return results, stderr, r.output
  if path == "myplugin_variables":
    return _run_job(["none"], env, identity=True)
  port = free_port()
  explicit = lambda r: {"ADDRESS": f"127.0.0.1:{port}", "RANK": str(r)}
  if path == "jax_explicit":
    return _run_job(["jax", "explicit"], env, explicit)
  if path == "plugin_explicit":
    return _run_job(["plugin", "explicit"], env, explicit)
  if path == "slurm_plugin":
    return _run_job(["plugin"], env, lambda r: {
        "SLURM_JOB_ID": "4242", "SLURM_PROCID": str(r), "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "localhost",
        "MYPLUGIN_COORDINATOR_PORT": str(port)})
  if path == "ompi_jax":
    job_id = (_free_ompi_port() - 61440) * 4096
    return _run_job(["jax"], env, lambda r: {
        "OMPI_MCA_orte_hnp_uri": f"{job_id}.0;tcp://127.0.0.1:1234", "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_LOCAL_RANK": str(r)})
  raise ValueError(path)


PATHS = ["launcher", "myplugin_variables", "jax_explicit", "plugin_explicit", "slurm_plugin", "ompi_jax"]


@pytest.mark.parametrize("proxies", [False, True], ids=["no_proxy", "unreachable_proxy"])
@pytest.mark.parametrize("path", PATHS)
def test_start_path_serves_jax_client(path, proxies, reference):
  results, stderr, out = _start(path, PROXIES if proxies else {})
  for rank in range(2):
    main, extra = results[rank]
    assert extra["client"] == "jax_plugin.jax_client", out
    assert not extra["jax_service_started"], out
    assert main == reference[rank], f"rank {rank}: ours {main}\njax's {reference[rank]}\n{out}"
    # A normal exit is quiet: no gRPC shutdown noise, no warnings.
    assert not NOISE.search(stderr[rank]), f"rank {rank} stderr:\n{stderr[rank]}"


def test_jax_initialize_errors_are_clear():
  # Under myplugin-run the job is the launcher's: arguments that contradict it,
  # and a second initialize, are errors that say so (as jax's would).
  program = """
import jax
try:
  jax.distributed.initialize(num_processes=3)
except ValueError as e:
  print("contradiction:", e)
jax.distributed.initialize()
try:
  jax.distributed.initialize()
except RuntimeError as e:
  print("twice:", e)
c = jax._src.distributed.global_state.client
print("increment:", c.key_value_increment("n", 2), c.key_value_increment("n", -5))
"""
  r = run_python(["-m", "jax_plugin.launcher", "-n", "1", "--", sys.executable, "-c", program], child_env(),
                 timeout=120)
  assert r.returncode == 0, r.output
  assert "contradiction: jax.distributed.initialize(num_processes=3) contradicts the myplugin job" in r.stdout
  assert "twice: distributed.initialize should only be called once." in r.stdout, r.output
  assert "increment: 2 -3" in r.stdout, r.output
