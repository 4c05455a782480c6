"""A jax cluster environment for myplugin's launcher variables, for the one
case in which jax's own service runs a job under myplugin-run: JAX_PLATFORMS
without myplugin (otherwise jax.distributed is served by ours, see
jax_client), so that ``jax.distributed.initialize()`` with no arguments
works there the way it does under Slurm.

jax detects cluster environments by subclass registration, and
``jax.distributed.initialize`` runs before plugin discovery, so the class
must exist before the user's first jax.distributed call: the
``myplugin-cluster.pth`` startup hook arranges that (see _cluster_hook).
"""

from __future__ import annotations

import os

_registered = False


def jax_coordinator_address() -> str | None:
  """Where jax's own coordination service listens: the launcher gives a
  port of its own; otherwise the port after ours, on our coordinator's host."""
  explicit = os.environ.get("MYPLUGIN_JAX_COORDINATOR_ADDRESS")
  if explicit:
    return explicit
  ours = os.environ.get("MYPLUGIN_COORDINATOR_ADDRESS")
  if not ours:
    return None
  host, _, port = ours.rpartition(":")
  return f"{host}:{int(port) + 1}"


def register() -> None:
  global _registered
  if _registered:
    return
  _registered = True
  from jax._src import clusters

  class MypluginCluster(clusters.ClusterEnv):
    name = "myplugin"
    opt_in_only_method = False

    @classmethod
    def is_env_present(cls) -> bool:
      return "MYPLUGIN_NUM_PROCESSES" in os.environ and jax_coordinator_address() is not None

    @classmethod
    def get_coordinator_address(cls, timeout_secs=None, override_coordinator_port=None) -> str:
      address = jax_coordinator_address()
      if override_coordinator_port:
        address = f"{address.rpartition(':')[0]}:{override_coordinator_port}"
      return address

    @classmethod
    def get_process_count(cls) -> int:
      return int(os.environ["MYPLUGIN_NUM_PROCESSES"])

    @classmethod
    def get_process_id(cls) -> int:
      return int(os.environ.get("MYPLUGIN_PROCESS_ID", "0"))

    @classmethod
    def get_local_process_id(cls) -> int | None:
      return None

  # Ahead of Slurm/Open MPI detection: under myplugin-run our variables describe the job.
  types = clusters.ClusterEnv._cluster_types
  types.remove(MypluginCluster)
  types.insert(0, MypluginCluster)
