"""Imported at interpreter start by myplugin-cluster.pth, only when
MYPLUGIN_NUM_PROCESSES is set. It imports nothing heavy: it waits for jax
to import its cluster module and registers ours right after."""

import importlib.abc
import importlib.util
import sys

_TARGET = "jax._src.clusters"


def _register():
  try:
    from jax_plugin import jax_cluster
    jax_cluster.register()
  except Exception as e:  # never break the user's program from a startup hook
    print(f"myplugin: could not register the jax cluster environment: {e}", file=sys.stderr)


class _AfterClustersImport(importlib.abc.MetaPathFinder):

  def find_spec(self, fullname, path, target=None):
    if fullname != _TARGET:
      return None
    sys.meta_path.remove(self)
    spec = importlib.util.find_spec(fullname)
    if spec is None or spec.loader is None:
      return spec
    exec_module = spec.loader.exec_module

    def exec_then_register(module):
      exec_module(module)
      _register()

    spec.loader.exec_module = exec_then_register
    return spec


if _TARGET in sys.modules:
  _register()
else:
  sys.meta_path.insert(0, _AfterClustersImport())
