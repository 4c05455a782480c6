"""Real launchers start unmodified programs: Debian's Open MPI (`mpirun`)
and a two-node Slurm cluster (slurmctld + two slurmd + munged, started here),
and a Kubernetes indexed Job modelled as its pods see it (host name
<job>-<index>, JOB_COMPLETION_INDEX, an /etc/hosts with the pods' DNS
names). Each launcher runs inside the test hosts (network namespaces), so
the job's traffic stays there; mpirun spans two of them. The program (tests/programs/cluster_train.py)
trains a few data-parallel steps over every process's devices; the result
is compared with the same steps in numpy.

Needs root (CI runs as root), Debian's openmpi-bin, slurm-wlm and munge."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from cluster import slurm
from cluster.hosts import module_hosts
from cluster.job import ClusterJob, numpy_training
from proc import child_env

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "programs", "cluster_train.py")


def _check_training(path, processes: int, devices: int):
  got = json.loads(open(path).read())
  assert (got["process_count"], got["device_count"], got["platform"]) == (processes, devices, "myplugin")
  w, b = numpy_training(devices)
  np.testing.assert_allclose(got["w"], w, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got["b"], b, rtol=1e-5, atol=1e-6)
  return got


@pytest.fixture(scope="module")
def net():
  yield from module_hosts(2)


def _run(net, argv, env, timeout, cwd):
  p = net.popen(net.hosts[0], argv, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
  try:
    out, _ = p.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    net.kill_processes()
    out, _ = p.communicate(timeout=30)
    raise AssertionError(f"{' '.join(argv)} did not finish in {timeout} s\n{out}")
  return p.returncode, out


# --- Open MPI ---

def _remote_agent(net, path) -> str:
  """Open MPI's remote launch agent (ssh's stand-in, OMPI_MCA_plm_rsh_agent):
  `agent HOST CMD…` runs CMD on that test host with a fresh environment,
  as ssh would, so the job's variables travel only by `mpirun -x`."""
  lines = ["#!/bin/sh", 'host=$1; shift', 'case "$host" in']
  for h in net.hosts:
    lines.append(f'  {h.ipv4}) ns={h.ns} ;;')
  lines += ['  *) echo "no test host $host" >&2; exit 1 ;;', "esac",
            'exec nsenter --net=/run/netns/$ns -- env -i PATH="$PATH" HOME="$HOME" sh -c "$*"', ""]
  path.write_text("\n".join(lines))
  path.chmod(0o755)
  return str(path)


@pytest.mark.parametrize("entry", ["plugin", "jax"])
def test_mpirun_starts_an_unmodified_program(net, tmp_path, entry):
  """`mpirun -n 4 python train.py` over two hosts (two slots each; the
  remote daemons start through an ssh stand-in): the program calls
  jax_plugin.distributed.initialize() (rank and size from Open MPI's own
  variables, the coordinator on mpirun's host, where rank 0 runs; the token
  is the job's random transport key) or jax.distributed.initialize() (jax's
  own Open MPI detection, served by our service)."""
  mpirun = shutil.which("mpirun")
  if mpirun is None:
    pytest.fail("mpirun is not installed (Debian package openmpi-bin; .ci/run installs it)")
  out = tmp_path / "train.json"
  hostfile = tmp_path / "hostfile"
  hostfile.write_text("".join(f"{h.ipv4} slots=2\n" for h in net.hosts[:2]))
  env = child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_HEARTBEAT_TIMEOUT="5",
                  OMPI_MCA_plm_rsh_agent=_remote_agent(net, tmp_path / "agent.sh"))
  code, log = _run(net, [mpirun, "--allow-run-as-root", "--hostfile", str(hostfile), "-n", "4",
                         "--mca", "plm_rsh_no_tree_spawn", "1", "-x", "JAX_PLATFORMS", "-x",
                         "MYPLUGIN_HEARTBEAT_TIMEOUT", "-x", "PYTHONPATH", sys.executable, TRAIN, entry, str(out)],
                   env, 180, str(tmp_path))
  assert code == 0, log
  got = _check_training(out, 4, 4)
  if entry == "plugin":
    # Each rank advertised its own host's address, with no setting.
    assert got["addresses"] == [net.hosts[0].ipv4] * 2 + [net.hosts[1].ipv4] * 2, got


# --- Slurm ---

@pytest.fixture(scope="module")
def slurm_cluster(net, tmp_path_factory):
  why = slurm.refusal()
  if why:
    pytest.fail(f"cannot run Slurm here: {why}")
  s = slurm.SlurmCluster(net, net.hosts[:2], str(tmp_path_factory.mktemp("slurm")))
  yield s
  s.close()


def test_srun_starts_an_unmodified_program(slurm_cluster, tmp_path):
  """`srun -N 2 --ntasks-per-node 2 python train.py` with jax_plugin.distributed.initialize():
  rank and size from SLURM_PROCID/SLURM_NTASKS, the coordinator on the
  step's first node (node0, found by name), its port from the job id."""
  out = tmp_path / "train.json"
  env = slurm_cluster.env(JAX_PLATFORMS="myplugin", MYPLUGIN_COORDINATOR_TOKEN="srun-test-token",
                          MYPLUGIN_HEARTBEAT_TIMEOUT="5")
  r = slurm_cluster.run(["srun", "-N", "2", "--ntasks-per-node", "2", sys.executable, TRAIN, "plugin", str(out)], env,
                        timeout=180, cwd=str(tmp_path))
  assert r.returncode == 0, r.stdout + r.stderr + slurm_cluster.logs()
  got = _check_training(out, 4, 4)
  # Two tasks on each node, each advertising its own node's address.
  nodes = slurm_cluster.nodes
  assert got["addresses"] == [nodes[0].ipv4] * 2 + [nodes[1].ipv4] * 2, got


def test_two_sbatch_jobs_at_once_on_the_same_nodes(slurm_cluster, tmp_path):
  """Two batch scripts submitted together run at the same time on the same
  two nodes (4 CPUs each; 2 tasks of each job per node), one through
  jax_plugin.distributed, one through jax.distributed alone: each job's
  coordinator port comes from its job id, so the two coordinators on node0
  do not collide, and both train correctly."""
  job_ids = []
  for entry in ("plugin", "jax"):
    script = tmp_path / f"{entry}.sbatch"
    script.write_text(f"#!/bin/sh\n#SBATCH -N 2 --ntasks-per-node=2\n#SBATCH -o {tmp_path}/{entry}.%j.log\n"
                      f"srun {sys.executable} {TRAIN} {entry} {tmp_path}/{entry}.json\n"
                      f"echo $? > {tmp_path}/{entry}.rc\n")
    env = slurm_cluster.env(JAX_PLATFORMS="myplugin", MYPLUGIN_COORDINATOR_TOKEN=f"{entry}-token",
                            MYPLUGIN_HEARTBEAT_TIMEOUT="5")
    r = slurm_cluster.run(["sbatch", "--parsable", str(script)], env, timeout=30, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    job_ids.append(r.stdout.strip().split(";")[0])
  assert job_ids[0] != job_ids[1]
  # Polled here: sbatch --wait polls with growing pauses (seconds each).
  deadline = time.monotonic() + 240
  while time.monotonic() < deadline:
    r = slurm_cluster.run(["squeue", "-h", "-j", ",".join(job_ids)], timeout=30)
    if r.returncode == 0 and not r.stdout.strip():
      break
    time.sleep(0.3)
  logs = "\n".join(f"--- {f.name} ---\n{f.read_text()}" for f in sorted(tmp_path.glob("*.log")))
  assert time.monotonic() < deadline, "jobs still queued or running after 240 s\n" + logs + slurm_cluster.logs()
  for entry in ("plugin", "jax"):
    rc = tmp_path / f"{entry}.rc"
    assert rc.exists() and rc.read_text().strip() == "0", logs + slurm_cluster.logs()
  a, b = (_check_training(tmp_path / f"{entry}.json", 4, 4) for entry in ("plugin", "jax"))
  assert a["started"] < b["finished"] and b["started"] < a["finished"], "the two jobs did not overlap"


# --- Kubernetes ---

@pytest.mark.parametrize("entry", ["plugin", "jax", "none"])
def test_kubernetes_indexed_job(net, tmp_path, entry):
  """Two pods of an indexed Job `train` (completionMode: Indexed,
  completions: 2) whose template has `subdomain: workers` (a headless
  service), as the pods see it: host names train-0 and train-1,
  JOB_COMPLETION_INDEX, HOSTNAME, the service account's KUBERNETES_SERVICE_*
  variables, an /etc/hosts with the pods' DNS names (what the kubelet
  writes, plus what cluster DNS would answer), and the two variables the
  Job spec sets for myplugin: MYPLUGIN_NUM_PROCESSES (= completions) and
  MYPLUGIN_COORDINATOR_TOKEN (from a Secret). The program calls
  jax_plugin.distributed.initialize(), jax.distributed.initialize(), or
  nothing at all."""
  hosts = net.hosts[:2]
  fqdn = "train-{}.workers.default.svc.cluster.local"
  hosts_file = tmp_path / "hosts"
  hosts_file.write_text("127.0.0.1 localhost\n" +
                        "".join(f"{h.ipv4} {fqdn.format(i)} train-{i}\n" for i, h in enumerate(hosts)))
  out = tmp_path / "train.json"
  with ClusterJob(net, hosts, [TRAIN, entry, str(out)], tmp_path, devices=2, identity=False,
                  hostnames=["train-0", "train-1"], hosts_file=str(hosts_file),
                  env={"MYPLUGIN_NUM_PROCESSES": "2", "KUBERNETES_SERVICE_HOST": "10.96.0.1",
                       "KUBERNETES_SERVICE_PORT": "443"},
                  per_rank_env=lambda r: {"JOB_COMPLETION_INDEX": str(r), "HOSTNAME": f"train-{r}"}) as job:
    job.wait(120)
    assert job.returncodes() == [0, 0], job.all_output()
    got = _check_training(out, 2, 4)
    if entry == "plugin":
      assert got["addresses"] == [h.ipv4 for h in hosts]
