"""Where a process learns its place in a job: explicit arguments, our own
variables (set by myplugin-run), Slurm, Open MPI, or a Kubernetes indexed
Job. Pure functions of the environment (and, for Kubernetes, of the pod's
FQDN), so they are tested by setting variables; tests/cluster/ checks them
against the real launchers."""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import zlib
from typing import Mapping

METHODS = ("myplugin", "slurm", "ompi", "kubernetes")


@dataclasses.dataclass
class ClusterSpec:
  method: str
  coordinator_address: str | None
  num_processes: int
  process_id: int
  local_device_ids: list[int] | None = None
  # A secret that only this job's processes know, where the launcher hands
  # one out (Open MPI); MYPLUGIN_COORDINATOR_TOKEN wins over it.
  token: str | None = None


def _int(env: Mapping[str, str], name: str) -> int:
  value = env[name]
  try:
    return int(value)
  except ValueError:
    raise ValueError(f"{name} must be an integer, got {value!r}") from None


_PORT_BASE, _PORT_SPAN = 61440, 4096


def _port(env: Mapping[str, str], job_id: str) -> int:
  """MYPLUGIN_COORDINATOR_PORT, else a port derived from the job id (same on every node)."""
  if env.get("MYPLUGIN_COORDINATOR_PORT"):
    return _int(env, "MYPLUGIN_COORDINATOR_PORT")
  digits = re.sub(r"\D", "", job_id) or "0"
  # Above Linux's ephemeral ports (32768-60999 by default), where any outgoing
  # connection on the node could already hold it, and half a cycle from the
  # port jax's own Slurm detection gives the same job (61440 + id % 4096), so
  # a job that also starts jax's coordination service never meets it.
  return _PORT_BASE + (int(digits) + _PORT_SPAN // 2) % _PORT_SPAN


def first_host(nodelist: str) -> str:
  """The first host of a Slurm node list: 'n[003-005,9],x' -> 'n003'."""
  m = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist.strip())
  if not m:
    raise ValueError(f"cannot parse Slurm node list {nodelist!r}")
  prefix, ranges = m.group(1), m.group(3)
  if ranges is None:
    return prefix
  first = ranges.split(",")[0].split("-")[0]
  return prefix + first


def from_myplugin_env(env: Mapping[str, str]) -> ClusterSpec | None:
  if "MYPLUGIN_NUM_PROCESSES" not in env:
    return None
  if "JOB_COMPLETION_INDEX" in env and "MYPLUGIN_PROCESS_ID" not in env:
    return None  # a Kubernetes indexed Job: the index is the process id
  ids = env.get("MYPLUGIN_LOCAL_DEVICE_IDS")
  return ClusterSpec(
      method="myplugin",
      coordinator_address=env.get("MYPLUGIN_COORDINATOR_ADDRESS"),
      num_processes=_int(env, "MYPLUGIN_NUM_PROCESSES"),
      process_id=_int(env, "MYPLUGIN_PROCESS_ID") if "MYPLUGIN_PROCESS_ID" in env else 0,
      local_device_ids=[int(i) for i in ids.split(",")] if ids else None,
  )


def from_slurm(env: Mapping[str, str]) -> ClusterSpec | None:
  if "SLURM_JOB_ID" not in env or "SLURM_PROCID" not in env or "SLURM_NTASKS" not in env:
    return None
  nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
  if not nodelist:
    raise ValueError("Slurm detected (SLURM_JOB_ID is set) but SLURM_STEP_NODELIST/SLURM_JOB_NODELIST is not")
  return ClusterSpec(
      method="slurm",
      coordinator_address=f"{first_host(nodelist)}:{_port(env, env['SLURM_JOB_ID'])}",
      num_processes=_int(env, "SLURM_NTASKS"),
      process_id=_int(env, "SLURM_PROCID"),
  )


def from_ompi(env: Mapping[str, str]) -> ClusterSpec | None:
  if "OMPI_COMM_WORLD_SIZE" not in env or "OMPI_COMM_WORLD_RANK" not in env:
    return None
  uri = env.get("OMPI_MCA_orte_hnp_uri") or env.get("PMIX_SERVER_URI2") or ""
  m = re.search(r"tcp://([^,:/]+)", uri) or re.search(r"tcp6://\[([^\]]+)\]", uri)
  host = env.get("MYPLUGIN_COORDINATOR_HOST") or (m.group(1) if m else None)
  if host is None:
    raise ValueError("Open MPI detected but the launcher's address is unknown: set MYPLUGIN_COORDINATOR_HOST "
                     "(or MYPLUGIN_COORDINATOR_ADDRESS)")
  job = uri.split(";")[0].split(".")[0] if uri else env.get("OMPI_COMM_WORLD_NODE_RANK", "0")
  return ClusterSpec(
      method="ompi",
      coordinator_address=f"{_bracket(host)}:{_port(env, job)}",
      num_processes=_int(env, "OMPI_COMM_WORLD_SIZE"),
      process_id=_int(env, "OMPI_COMM_WORLD_RANK"),
      # mpirun draws this key at random for each job and hands it to every
      # rank (Open MPI's transport preconditioning); nobody else sees it.
      token=env.get("OMPI_MCA_orte_precondition_transports") or None,
  )


def _bracket(host: str) -> str:
  return f"[{host}]" if ":" in host else host


def from_kubernetes(env: Mapping[str, str], fqdn: str | None = None) -> ClusterSpec | None:
  """A Kubernetes indexed Job (completionMode: Indexed). Kubernetes sets
  JOB_COMPLETION_INDEX and names each pod's host <job>-<index>; with the
  pod template's `subdomain:` naming a headless service, <job>-0.<subdomain>
  resolves to the pod of index 0, which hosts the coordinator. Kubernetes
  does not tell a pod how many completions its Job has: the Job spec sets
  MYPLUGIN_NUM_PROCESSES (without it this is not a myplugin job)."""
  if "JOB_COMPLETION_INDEX" not in env or "MYPLUGIN_NUM_PROCESSES" not in env:
    return None
  index = _int(env, "JOB_COMPLETION_INDEX")
  if env.get("MYPLUGIN_COORDINATOR_ADDRESS"):
    address = env["MYPLUGIN_COORDINATOR_ADDRESS"]
  else:
    fqdn = fqdn if fqdn is not None else socket.getfqdn()
    host, _, domain = fqdn.partition(".")
    suffix = f"-{index}"
    if not host.endswith(suffix) or len(host) == len(suffix):
      raise ValueError(f"Kubernetes indexed Job detected (JOB_COMPLETION_INDEX={index}) but this pod's host name "
                       f"{host!r} is not <job>-{index}: set MYPLUGIN_COORDINATOR_ADDRESS")
    if not domain:
      raise ValueError(f"Kubernetes indexed Job detected (JOB_COMPLETION_INDEX={index}) but the pod has no "
                       f"subdomain ({fqdn!r}), so pod 0 has no DNS name: set the pod template's `subdomain:` to a "
                       "headless service selecting the Job's pods, or set MYPLUGIN_COORDINATOR_ADDRESS")
    job = host[:-len(suffix)]
    address = f"{job}-0.{domain}:{_port(env, str(zlib.crc32(job.encode())))}"
  return ClusterSpec(
      method="kubernetes",
      coordinator_address=address,
      num_processes=_int(env, "MYPLUGIN_NUM_PROCESSES"),
      process_id=index,
  )


_DETECTORS = {"myplugin": from_myplugin_env, "slurm": from_slurm, "ompi": from_ompi, "kubernetes": from_kubernetes}


def detect(method: str | None = None, env: Mapping[str, str] | None = None) -> ClusterSpec | None:
  """The first environment that is present (or the one named), else None."""
  env = os.environ if env is None else env
  if method is not None:
    if method not in _DETECTORS:
      raise ValueError(f"unknown cluster_detection_method {method!r}; choose one of {', '.join(METHODS)}")
    spec = _DETECTORS[method](env)
    if spec is None:
      raise ValueError(f"cluster_detection_method={method!r}, but its environment variables are not set")
    return spec
  for detector in _DETECTORS.values():
    spec = detector(env)
    if spec is not None:
      return spec
  return None
