"""Imported at interpreter start by myplugin-cluster.pth. It imports nothing
heavy: it waits for jax to import two of its modules and acts right after.

- ``jax._src.distributed``: jax.distributed.initialize/shutdown start and
  stop myplugin's coordination service instead of jax's gRPC one, and jax's
  distributed client is ours once the process belongs to a myplugin job
  (jax_client). This must happen before the user's first jax.distributed
  call, which runs before plugin discovery: hence a startup hook.
- ``jax._src.xla_bridge``: every backend is created without our client in
  jax's state (jaxlib's factories only take their own).
- ``jax._src.clusters`` (only under myplugin-run / MYPLUGIN_* variables):
  our cluster environment, for jax's own service when it runs the job.
"""

import importlib.machinery
import os
import sys


def _after_distributed():
  from jax_plugin import jax_client
  jax_client.patch_jax_distributed()
  jax_client.sync()


def _after_bridge():
  # Not at jax._src.distributed's import: xla_bridge imports it half-way
  # through its own, before it defines what jax_client wraps.
  from jax_plugin import jax_client
  jax_client.hide_during_backend_init()


def _after_clusters():
  if "MYPLUGIN_NUM_PROCESSES" in os.environ:
    from jax_plugin import jax_cluster
    jax_cluster.register()


_ACTIONS = {"jax._src.distributed": _after_distributed, "jax._src.xla_bridge": _after_bridge,
            "jax._src.clusters": _after_clusters}


def _run(name):
  try:
    _ACTIONS[name]()
  except Exception as e:  # never break the user's program from a startup hook
    print(f"myplugin: startup hook for {name} failed: {e}", file=sys.stderr)


class _AfterImport:
  """A meta-path finder (importlib.abc is not imported: it costs more than
  the rest of this hook)."""

  def __init__(self):
    self.pending = {n for n in _ACTIONS if n not in sys.modules}

  def find_spec(self, fullname, path, target=None):
    if fullname not in self.pending:
      return None
    self.pending.discard(fullname)
    if not self.pending:
      sys.meta_path.remove(self)
    spec = importlib.machinery.PathFinder.find_spec(fullname, path)
    if spec is None or spec.loader is None:
      return spec
    exec_module = spec.loader.exec_module

    def exec_then_act(module):
      exec_module(module)
      _run(fullname)

    spec.loader.exec_module = exec_then_act
    return spec


for _name in _ACTIONS:
  if _name in sys.modules:
    _run(_name)
if any(n not in sys.modules for n in _ACTIONS):
  sys.meta_path.insert(0, _AfterImport())
