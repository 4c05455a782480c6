"""How a process finds its job and its address, as pure rules: Kubernetes
indexed Jobs, Open MPI's variables as a real mpirun sets them (captured
from Debian's Open MPI 4.1.4), and the address settings. The real
launchers run in tests/test_cluster_launchers.py."""

import pytest

from jax_plugin import cluster, distributed

# What mpirun 4.1.4 gave rank 1 of `mpirun -n 2` (the variables we read).
REAL_OMPI = {
    "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_NODE_RANK": "1", "OMPI_MCA_ess_base_jobid": "763822081",
    "OMPI_MCA_orte_hnp_uri": "763822080.0;tcp://192.0.2.2:52331;tcp6://[fd00::2]:56097",
    "OMPI_MCA_orte_precondition_transports": "792746cf2a8ecc7c-844c15f99029c6bd",
    "PMIX_RANK": "1", "PMIX_SERVER_URI2": "763822080.0;tcp4://127.0.0.1:49279",
}


def test_open_mpi_as_mpirun_sets_it():
  spec = cluster.detect(env=REAL_OMPI)
  assert (spec.method, spec.num_processes, spec.process_id) == ("ompi", 2, 1)
  # mpirun's host (process 0 runs there when mpirun starts on one node),
  # a port from the job family, the same on every rank.
  assert spec.coordinator_address == "192.0.2.2:63488"
  assert spec.token == "792746cf2a8ecc7c-844c15f99029c6bd"
  v6 = cluster.detect(env={**REAL_OMPI, "OMPI_MCA_orte_hnp_uri": "5.0;tcp6://[fd00:1::7]:4000"})
  assert v6.coordinator_address == "[fd00:1::7]:63493"


def test_kubernetes_indexed_job():
  env = {"JOB_COMPLETION_INDEX": "3", "MYPLUGIN_NUM_PROCESSES": "8", "HOSTNAME": "train-3"}
  spec = cluster.from_kubernetes(env, fqdn="train-3.workers.ml.svc.cluster.local")
  port = 64675  # from crc32("train"), as for a Slurm job id
  assert (spec.method, spec.num_processes, spec.process_id) == ("kubernetes", 8, 3)
  assert spec.coordinator_address == f"train-0.workers.ml.svc.cluster.local:{port}"
  # Our launcher's variables (a rank given) win; without MYPLUGIN_NUM_PROCESSES it is not our job.
  assert cluster.detect(env={**env, "MYPLUGIN_PROCESS_ID": "1", "MYPLUGIN_COORDINATOR_ADDRESS": "h:1"}).method == \
      "myplugin"
  assert cluster.from_kubernetes({"JOB_COMPLETION_INDEX": "0"}, fqdn="x-0.s") is None
  assert cluster.from_myplugin_env(env) is None  # the index is the rank, not "process 0"
  explicit = cluster.from_kubernetes({**env, "MYPLUGIN_COORDINATOR_ADDRESS": "lead:7000"}, fqdn="whatever")
  assert explicit.coordinator_address == "lead:7000"
  with pytest.raises(ValueError, match="no subdomain"):
    cluster.from_kubernetes(env, fqdn="train-3")
  with pytest.raises(ValueError, match="is not <job>-3"):
    cluster.from_kubernetes(env, fqdn="worker.workers.ml.svc.cluster.local")
  with pytest.raises(ValueError, match="JOB_COMPLETION_INDEX must be an integer"):
    cluster.from_kubernetes({**env, "JOB_COMPLETION_INDEX": "x"}, fqdn="train-3.w")


def test_address_settings_are_one_or_the_other(monkeypatch):
  monkeypatch.setenv("MYPLUGIN_GLOO_HOSTNAME", "[fd00::5]")
  monkeypatch.delenv("MYPLUGIN_NETWORK_INTERFACE", raising=False)
  assert distributed._advertised_address() == ("fd00::5", "")
  monkeypatch.setenv("MYPLUGIN_NETWORK_INTERFACE", "eth0")
  with pytest.raises(ValueError, match="both set"):
    distributed._advertised_address()
  monkeypatch.delenv("MYPLUGIN_GLOO_HOSTNAME")
  assert distributed._advertised_address() == ("", "eth0")
