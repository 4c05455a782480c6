"""A myplugin job across the hosts of a Cluster: one process per rank, on
the host given for it, with only the variables a user would set (the
coordinator's address, the rank, a token). Output goes to files, so no
pipe can stall a process; every wait has a deadline, and leaving the
context (or a wait past its deadline) kills every rank's process group."""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time

import numpy as np

from cluster.hosts import Cluster, Host, wait_all

from job import WaitsForEvents
from proc import child_env


class ClusterJob(WaitsForEvents):

  def __init__(self, cluster: Cluster, hosts: list[Host], argv: list[str], out_dir, *, port: int = 29500,
               coordinator: Host | None = None, devices: int = 1, heartbeat: float = 3.0, hostnames=None,
               env: dict[str, str] | None = None, per_rank_env=None, address: str | None = None,
               hosts_file: str | None = None, identity: bool = True):
    """Rank i runs `python argv` on hosts[i]. Process 0 hosts the
    coordination service unless `coordinator` (a host already running
    myplugin-coordinator) is given; `address` overrides the coordinator's
    host ("[::1]", say). identity=False leaves rank and coordinator to the
    environment a launcher sets (per_rank_env)."""
    self.cluster = cluster
    self.hosts = hosts
    self.token = secrets.token_hex(8)
    coord = coordinator or hosts[0]
    self.address = f"{address or coord.address}:{port}"
    self.out_dir = str(out_dir)
    self.procs: list[subprocess.Popen] = []
    self.started = time.monotonic()
    try:
      for rank, host in enumerate(hosts):
        e = child_env(PYTHONUNBUFFERED="1", JAX_PLATFORMS="myplugin", MYPLUGIN_COORDINATOR_TOKEN=self.token,
                      MYPLUGIN_NUM_DEVICES=str(devices),
                      MYPLUGIN_HEARTBEAT_TIMEOUT=str(heartbeat), MYPLUGIN_INITIALIZATION_TIMEOUT="60",
                      MYPLUGIN_SHUTDOWN_TIMEOUT="30", TEST_HEARTBEAT_TIMEOUT=str(heartbeat))
        if identity:
          e.update(MYPLUGIN_COORDINATOR_ADDRESS=self.address, MYPLUGIN_NUM_PROCESSES=str(len(hosts)),
                   MYPLUGIN_PROCESS_ID=str(rank))
        if coordinator is not None:
          e["MYPLUGIN_COORDINATOR_STANDALONE"] = "1"
        e.update(env or {})
        if per_rank_env:
          e.update(per_rank_env(rank))
        with open(self.log(rank), "w") as f:
          self.procs.append(cluster.popen(host, [sys.executable, *[a.format(rank=rank) for a in argv]], e,
                                          hostname=hostnames[rank] if hostnames else None,
                                          hosts_file=hosts_file, stdout=f,
                                          stderr=subprocess.STDOUT, cwd=self.out_dir))
    except BaseException:
      self.kill()  # the ranks already started
      raise

  def log(self, rank: int) -> str:
    return os.path.join(self.out_dir, f"rank{rank}.log")

  def output(self, rank: int) -> str:
    with open(self.log(rank), errors="replace") as f:
      return f.read()

  def all_output(self) -> str:
    return "\n".join(f"--- rank {r} on {h.ns} (exit {p.poll()}) ---\n{self.output(r)}"
                     for r, (h, p) in enumerate(zip(self.hosts, self.procs)))

  def results(self, rank: int) -> list[dict]:
    return [json.loads(l[len("RESULT "):]) for l in self.output(rank).splitlines() if l.startswith("RESULT ")]

  def event(self, rank: int, name: str) -> dict | None:
    return next((r for r in self.results(rank) if r.get("event") == name), None)

  def wait(self, timeout: float) -> list[float | None]:
    """Exit times (monotonic); AssertionError naming the ranks still
    running (the job is then killed)."""
    ends = wait_all(self.procs, time.monotonic() + timeout)
    if None in ends:
      running = [r for r, e in enumerate(ends) if e is None]
      out = self.all_output()
      self.kill()
      raise AssertionError(f"ranks {running} still running after {timeout} s\n{out}")
    return ends

  def kill(self) -> None:
    """Kills every rank's process group (each rank has its own; what a rank
    left elsewhere in its host goes with the Cluster)."""
    for p in self.procs:
      try:
        os.killpg(p.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
    wait_all(self.procs, time.monotonic() + 30)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.kill()

  def returncodes(self) -> list[int | None]:
    return [p.poll() for p in self.procs]


def numpy_training(n_devices: int):
  """What tests/programs/cluster_train.py computes (w, b), in numpy."""
  rng = np.random.default_rng(0)
  X = rng.normal(size=(8 * n_devices, 3)).astype(np.float32).astype(np.float64)
  y = X @ np.array([1.0, -2.0, 0.5]) + 0.25
  w, b = np.zeros(3), 0.0
  for _ in range(5):
    r = X @ w + b - y
    w, b = w - 0.1 * (2 * X.T @ r / len(y)), b - 0.1 * (2 * r.mean())
  return w, b
