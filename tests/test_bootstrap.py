"""Every way a job can start: our variables, Slurm's, Open MPI's, an
unmodified jax.distributed.initialize, and no initialize call at all."""
import pytest

from jax_plugin import cluster
from job import Job, free_port


def check_joined(job, n, devices_per_process):
  codes = job.wait(timeout=180)
  assert codes == {r: 0 for r in range(n)}, job.all_output()
  for r in range(n):
    j = job.event(r, "joined")
    assert j, job.all_output()
    assert j["process_index"] == r
    assert j["process_count"] == n
    assert j["device_count"] == n * devices_per_process
    assert j["local_device_count"] == devices_per_process
    assert j["device_processes"] == [p for p in range(n) for _ in range(devices_per_process)]
    assert j["local_ids"] == list(range(r * devices_per_process, (r + 1) * devices_per_process))
    assert j["platform"] == "myplugin"
    assert j["peers"] == list(range(n))
    # Programs over every process's devices run.
    total = n * devices_per_process
    assert j["psum"] == [float(total)] * devices_per_process
    assert j["jit_sum"] == float(total * (total - 1))


@pytest.mark.parametrize("mode", ["ours", "none", "jax"])
def test_myplugin_variables(mode):
  # "jax": an unmodified jax.distributed.initialize() finds our cluster environment.
  with Job(3, [mode], program="bootstrap_worker.py",
           env={"JAX_PLATFORMS": "myplugin", "MYPLUGIN_NUM_DEVICES": "2"}) as job:
    check_joined(job, 3, 2)


def test_unmodified_jax_distributed_initialize_with_arguments():
  jax_port = free_port()
  with Job(2, ["jax", f"127.0.0.1:{jax_port}", "2", lambda r: str(r)], program="bootstrap_worker.py",
           identity=False, env={"JAX_PLATFORMS": "myplugin", "MYPLUGIN_NUM_DEVICES": "2"}) as job:
    check_joined(job, 2, 2)


def test_slurm_variables():
  port = free_port()
  env = {"JAX_PLATFORMS": "myplugin", "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "4",
         "SLURM_STEP_NODELIST": "localhost", "MYPLUGIN_COORDINATOR_PORT": str(port)}
  with Job(4, ["ours"], program="bootstrap_worker.py", identity=False, env=env,
           per_rank_env=lambda r: {"SLURM_PROCID": str(r)}) as job:
    check_joined(job, 4, 1)


def test_open_mpi_variables():
  port = free_port()
  env = {"JAX_PLATFORMS": "myplugin", "OMPI_COMM_WORLD_SIZE": "2",
         "OMPI_MCA_orte_hnp_uri": "1234.0;tcp://127.0.0.1:5555", "MYPLUGIN_COORDINATOR_PORT": str(port),
         "MYPLUGIN_NUM_DEVICES": "2"}
  with Job(2, ["ours"], program="bootstrap_worker.py", identity=False, env=env,
           per_rank_env=lambda r: {"OMPI_COMM_WORLD_RANK": str(r)}) as job:
    check_joined(job, 2, 2)


def test_detection_rules():
  env = {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "8", "SLURM_PROCID": "3", "SLURM_JOB_NODELIST": "gpu[012-015,20]"}
  spec = cluster.detect(env=env)
  assert (spec.method, spec.num_processes, spec.process_id) == ("slurm", 8, 3)
  # Above Linux's ephemeral ports, and not the port jax's own Slurm detection
  # gives job 77 (61440 + 77).
  assert spec.coordinator_address == "gpu012:63565"
  assert cluster.first_host("a,b") == "a" and cluster.first_host("n[7]") == "n7"
  ompi = cluster.detect(env={"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "1",
                             "OMPI_MCA_orte_hnp_uri": "99.0;tcp://10.1.2.3,192.168.0.1:3000"})
  assert (ompi.method, ompi.num_processes, ompi.process_id) == ("ompi", 4, 1)
  assert ompi.coordinator_address.startswith("10.1.2.3:")
  ours = cluster.detect(env={"MYPLUGIN_NUM_PROCESSES": "2", "MYPLUGIN_PROCESS_ID": "1",
                             "MYPLUGIN_COORDINATOR_ADDRESS": "h:1", **env})
  assert ours.method == "myplugin"  # our variables win over Slurm's
  assert cluster.detect(env={}) is None
  with pytest.raises(ValueError, match="unknown cluster_detection_method"):
    cluster.detect("pbs", env={})
  with pytest.raises(ValueError, match="its environment variables are not set"):
    cluster.detect("slurm", env={})
  with pytest.raises(ValueError, match="SLURM_NTASKS must be an integer"):
    cluster.detect(env={"SLURM_JOB_ID": "1", "SLURM_NTASKS": "x", "SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "a"})
