"""Several processes on one GPU (myplugin-run --share-gpu, gpu_sharing.py),
and jax's GPU memory settings as the CUDA engine is given them.

No GPU here: what the processes are given is checked (the same GPU, their
own NCCL host identities, memory shares that fit), and a 4-process job run
that way on the CPU engine (where those variables mean nothing) gets 4
devices with distinct ids and all-reduces across them. The settings are
compared with what jax's CUDA backend makes of the same environment
(jaxlib's generate_pjrt_gpu_plugin_options); the C++ unit tests read back
what a stand-in CUDA engine is given (tests/cpp/engine_client_tests.cc)."""
import json
import os
import sys

import numpy as np
import pytest

from proc import child_env, run_python

LAUNCHER = ["-m", "jax_plugin.launcher"]


def test_each_rank_gets_the_gpu_its_own_host_identity_and_a_share():
  from jax_plugin import gpu_sharing
  envs = [gpu_sharing.rank_environment(r, 4, gpu=1, environ={}) for r in range(4)]
  assert {e["MYPLUGIN_VISIBLE_DEVICES"] for e in envs} == {"1"}
  assert {e["MYPLUGIN_NUM_DEVICES"] for e in envs} == {"1"}
  assert len({e["NCCL_HOSTID"] for e in envs}) == 4
  assert {e["NCCL_SOCKET_IFNAME"] for e in envs} == {"lo"}
  assert {e["XLA_CLIENT_MEM_FRACTION"] for e in envs} == {"0.225"}  # 0.9 of the GPU, split 4 ways
  assert 4 * 0.225 <= gpu_sharing.TOTAL_SHARE
  # The user's own choices are kept.
  mine = gpu_sharing.rank_environment(0, 4, environ={"NCCL_SOCKET_IFNAME": "eth0", "XLA_CLIENT_MEM_FRACTION": "0.2"})
  assert "NCCL_SOCKET_IFNAME" not in mine and "XLA_CLIENT_MEM_FRACTION" not in mine
  older = gpu_sharing.rank_environment(0, 2, environ={"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.4"})
  assert "XLA_CLIENT_MEM_FRACTION" not in older  # both set would be refused, as jax refuses it


@pytest.mark.parametrize("environ, n, expected", [
    ({"XLA_CLIENT_MEM_FRACTION": "0.5"}, 4, "4 processes with XLA_CLIENT_MEM_FRACTION=0.5 each would take 2 times"),
    ({"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.3"}, 4, "XLA_PYTHON_CLIENT_MEM_FRACTION=0.3"),
    ({"XLA_CLIENT_MEM_FRACTION": "lots"}, 2, "XLA_CLIENT_MEM_FRACTION='lots' is not a share of the GPU's memory"),
    ({"XLA_PYTHON_CLIENT_ALLOCATOR": "fast"}, 2, "XLA_PYTHON_CLIENT_ALLOCATOR='fast' is not an allocator"),
    ({}, 1000, "1000 processes cannot share one GPU"),
])
def test_a_request_that_cannot_fit_is_refused_naming_the_cause(environ, n, expected):
  from jax_plugin import gpu_sharing
  with pytest.raises(ValueError, match=expected.replace("(", r"\(")):
    gpu_sharing.rank_environment(0, n, environ=environ)


SHOW = """
import json, os
import jax, jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((jax.device_count(),), ("x",))
rank = jax.process_index()
local = np.full((1, 3), rank + 1.0, np.float32)
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), local)
total = jax.jit(lambda v: v.sum(axis=0), out_shardings=NamedSharding(mesh, P()))(x)
print("RESULT", json.dumps({
    "rank": rank, "ids": [d.id for d in jax.devices()], "local": [d.id for d in jax.local_devices()],
    "env": {k: os.environ.get(k) for k in ("MYPLUGIN_VISIBLE_DEVICES", "NCCL_HOSTID", "NCCL_SOCKET_IFNAME",
                                          "XLA_CLIENT_MEM_FRACTION")},
    "sum": np.asarray(total.addressable_data(0)).tolist()}))
"""


def test_four_processes_share_one_gpu_with_distinct_device_ids():
  r = run_python(LAUNCHER + ["-n", "4", "--share-gpu", "--timeout", "150", "--", sys.executable, "-c", SHOW],
                 child_env(), timeout=180)
  assert r.returncode == 0, r.output
  results = {}
  for line in r.stdout.splitlines():
    if "RESULT " in line:
      got = json.loads(line.split("RESULT ", 1)[1])
      results[got["rank"]] = got
  assert sorted(results) == [0, 1, 2, 3], r.output
  assert {tuple(g["ids"]) for g in results.values()} == {(0, 1, 2, 3)}
  assert sorted(g["local"][0] for g in results.values()) == [0, 1, 2, 3]
  assert {g["env"]["MYPLUGIN_VISIBLE_DEVICES"] for g in results.values()} == {"0"}
  assert len({g["env"]["NCCL_HOSTID"] for g in results.values()}) == 4
  assert {g["env"]["XLA_CLIENT_MEM_FRACTION"] for g in results.values()} == {"0.225"}
  want = np.full(3, 1.0 + 2 + 3 + 4).tolist()  # the ranks' values, summed across the 4 processes
  assert all(g["sum"] == want for g in results.values()), results


@pytest.mark.parametrize("args, env, expected", [
    (["-n", "2", "--share-gpu", "--devices-per-process", "2"], {}, "--devices-per-process must be 1"),
    (["-n", "4", "--share-gpu"], {"XLA_CLIENT_MEM_FRACTION": "0.5"}, "each would take 2 times the GPU's memory"),
    (["-n", "2", "--share-gpu", "-1"], {}, "--share-gpu takes a CUDA ordinal"),
])
def test_share_gpu_usage_errors(args, env, expected):
  r = run_python(LAUNCHER + args + ["--", sys.executable, "-c", "print('started')"], child_env(**env), timeout=60)
  assert r.returncode == 2, r.output
  assert expected in r.stderr and "started" not in r.stdout, r.output


ENVIRONMENTS = [
    {},
    {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"},
    {"XLA_PYTHON_CLIENT_ALLOCATOR": "BFC", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
    {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async", "XLA_CLIENT_MEM_FRACTION": ".3"},
    {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.45", "XLA_PYTHON_CLIENT_PREALLOCATE": "False"},
    {"XLA_PYTHON_CLIENT_PREALLOCATE": "0"},
    {"XLA_PYTHON_CLIENT_PREALLOCATE": "true"},
    {"XLA_PYTHON_CLIENT_PREALLOCATE": "no"},  # jax preallocates for every value but false, False and 0
    {"XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB": "64"},
    {"XLA_CLIENT_MEM_FRACTION": "1", "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB": "0"},
]
BAD = [
    ({"XLA_PYTHON_CLIENT_ALLOCATOR": "tcmalloc"}, "XLA_PYTHON_CLIENT_ALLOCATOR"),
    ({"XLA_CLIENT_MEM_FRACTION": "half"}, "XLA_CLIENT_MEM_FRACTION"),
    ({"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5", "XLA_CLIENT_MEM_FRACTION": "0.5"}, "XLA_PYTHON_CLIENT_MEM_FRACTION"),
    ({"XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB": "1.5"}, "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB"),
]
MEMORY_KEYS = ("allocator", "memory_fraction", "preallocate", "collective_memory_size")


def _jax_options(monkeypatch, environ):
  from jax._src.lib import xla_client
  for name in ("XLA_PYTHON_CLIENT_ALLOCATOR", "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION",
               "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB"):
    monkeypatch.delenv(name, raising=False)
  for k, v in environ.items():
    monkeypatch.setenv(k, v)
  options = xla_client.generate_pjrt_gpu_plugin_options()
  return {k: options[k] for k in MEMORY_KEYS if k in options}


@pytest.mark.parametrize("environ", ENVIRONMENTS, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "unset")
def test_memory_settings_are_what_jaxs_cuda_backend_makes_of_them(monkeypatch, environ):
  from jax_plugin import _myplugin
  want = _jax_options(monkeypatch, environ)
  got = _myplugin.gpu_memory_settings(environ)
  assert sorted(got) == sorted(want), (got, want)
  for key, value in want.items():
    assert got[key] == pytest.approx(value) if key == "memory_fraction" else got[key] == value, (key, got, want)


@pytest.mark.parametrize("environ, variable", BAD, ids=[b[1] for b in BAD])
def test_a_bad_memory_setting_is_refused_where_jax_refuses_it_naming_the_variable(monkeypatch, environ, variable):
  from jax_plugin import _myplugin
  with pytest.raises(ValueError):
    _jax_options(monkeypatch, environ)
  with pytest.raises(Exception, match=variable):
    _myplugin.gpu_memory_settings(environ)


def test_a_bad_memory_setting_fails_the_backend_at_start():
  r = run_python(["-c", "import jax; jax.devices()"],
                 child_env(JAX_PLATFORMS="myplugin", XLA_PYTHON_CLIENT_MEM_FRACTION="75%"), timeout=120)
  assert r.returncode != 0
  assert "XLA_PYTHON_CLIENT_MEM_FRACTION='75%' is not a share of the GPU's memory" in r.output, r.output
  # jax's client options name it too: jax_pjrt_client_create_options reaches the engine the same way.
  r = run_python(["-c", "import jax; jax.devices()"],
                 child_env(JAX_PLATFORMS="myplugin", JAX_PJRT_CLIENT_CREATE_OPTIONS="memory_fraction:2"), timeout=120)
  assert r.returncode != 0
  assert "myplugin client option 'memory_fraction'='2'" in r.output, r.output
