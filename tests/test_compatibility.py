"""The supported jax range: declared once (pyproject.toml), read back from
the installed metadata, and enforced when the plugin initializes."""

import os
import sys
import tomllib

import jax
import jaxlib.version
import pytest

from proc import run

from jax_plugin import compatibility

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pyproject_ranges():
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
  out = {}
  for dep in deps:
    for name in ("jaxlib", "jax"):
      if dep.startswith(name) and dep[len(name)] in "<>=!":
        out[name] = ",".join(sorted(dep[len(name):].split(",")))
        break
  return out


def test_installed_metadata_declares_the_pyproject_range():
  declared = {k: ",".join(sorted(v.split(","))) for k, v in compatibility.declared_ranges().items()}
  assert declared == _pyproject_ranges()
  assert set(declared) == {"jax", "jaxlib"}


@pytest.mark.parametrize("version,spec,expected", [
    ("0.10.2", ">=0.10.2,<0.12", True),
    ("0.11.2", ">=0.10.2,<0.12", True),
    ("0.11.10", ">=0.10.2,<0.12", True),
    ("0.10.1", ">=0.10.2,<0.12", False),
    ("0.12.0", ">=0.10.2,<0.12", False),
    ("0.12.0.dev20261101", ">=0.10.2,<0.12", False),
    ("0.9.9", ">=0.10.2", False),
    ("0.12", "<0.12", False),
    ("1.0.0", "!=1.0", False),
])
def test_specifiers(version, spec, expected):
  assert compatibility.satisfies(version, spec) is expected


def test_this_jax_is_supported():
  compatibility.check({"jax": jax.__version__, "jaxlib": jaxlib.version.__version__})


def test_the_supported_range_reaches_the_newest_jax():
  assert compatibility.declared_ranges() == {"jax": ">=0.10.2,<0.13", "jaxlib": ">=0.10.2,<0.13"}
  for version in ("0.10.2", "0.11.2", "0.12.0.1"):
    compatibility.check({"jax": version, "jaxlib": version})


def test_an_unsupported_jax_is_named_with_the_supported_range():
  with pytest.raises(RuntimeError) as e:
    compatibility.check({"jax": "0.13.0", "jaxlib": "0.13.0"}, {"jax": ">=0.10.2,<0.13", "jaxlib": ">=0.10.2,<0.13"})
  msg = str(e.value)
  assert "jax 0.13.0 (supported: jax>=0.10.2,<0.13)" in msg
  assert "jaxlib 0.13.0" in msg and "pip install 'jax>=0.10.2,<0.13'" in msg


def test_backend_refuses_an_unsupported_jax_at_initialization():
  # jax only logs a failing plugin initialize(); ours says why in its own line.
  code = ("import jax; jax.__version__ = '0.13.0'\n"
          "try:\n  jax.devices('myplugin')\nexcept RuntimeError as e:\n  print('RAISED', e)\n")
  env = dict(os.environ, JAX_PLATFORMS="myplugin")
  out = run([sys.executable, "-c", code], env, timeout=120, cwd="/")
  assert "RAISED" in out.stdout, out.stdout + out.stderr
  assert "myplugin does not support this jax: jax 0.13.0 (supported: jax>=0.10.2,<0.13)" in out.stderr
  assert out.returncode == 0
