"""DLPack both ways on the CUDA engine, against jax's own CUDA backend on the
same machine: a myplugin array exports device memory (kDLCUDA, the GPU's
ordinal) without a copy, and a tensor in GPU memory imports onto a myplugin
device as a view of it. The consumer and producer is PyTorch where it is
installed (the GPU machine has it), else a reader of the capsule."""
import json

from proc import child_env, run_python

PROGRAM = r"""
import ctypes, json, sys
import jax, jax.numpy as jnp, numpy as np
platform = sys.argv[1]
out = []
try:
  import torch
except ImportError:
  torch = None
for d in jax.local_devices():
  x = jax.device_put(np.arange(1024, dtype=np.float32) * 0.5, d)
  y = jax.jit(lambda v: v * 2 + 1)(x)
  dev = tuple(int(v) for v in y.__dlpack_device__())
  row = {"device": dev, "hw": d.local_hardware_id}
  if torch is not None:
    t = torch.from_dlpack(y)
    row["torch_device"] = str(t.device)
    row["export_aliases"] = t.data_ptr() == y.unsafe_buffer_pointer()
    row["export_values"] = bool(np.array_equal(t.cpu().numpy(), np.arange(1024, dtype=np.float32) + 1))
    src = torch.arange(4096, dtype=torch.float32, device=f"cuda:{d.local_hardware_id}") * 3
    z = jax.dlpack.from_dlpack(src, device=d)
    row["import_device"] = str(next(iter(z.devices())))
    row["import_aliases"] = z.unsafe_buffer_pointer() == src.data_ptr()
    row["import_values"] = bool(np.array_equal(np.asarray(z), np.arange(4096, dtype=np.float32) * 3))
  else:
    ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
    ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    cap = y.__dlpack__(stream=1)
    p = ctypes.pythonapi.PyCapsule_GetPointer(cap, b"dltensor")
    raw = ctypes.string_at(p, 16)
    row["capsule_device"] = (int.from_bytes(raw[8:12], "little"), int.from_bytes(raw[12:16], "little"))
    row["export_aliases"] = int.from_bytes(raw[:8], "little") == y.unsafe_buffer_pointer()
  out.append(row)
print(json.dumps(out))
"""


def _run(platform, **env):
  r = run_python(["-c", PROGRAM, platform], child_env(JAX_PLATFORMS=platform, **env), timeout=300)
  assert r.returncode == 0, r.output
  return json.loads(r.stdout.strip().splitlines()[-1])


def test_dlpack_on_each_gpu_as_on_jax_cuda():
  ours = _run("myplugin", MYPLUGIN_ENGINE="cuda")
  for row in ours:
    assert row["device"] == [2, row["hw"]], row  # kDLCUDA, the CUDA ordinal
    assert row["export_aliases"], row
    if "torch_device" in row:
      assert row["torch_device"] == f"cuda:{row['hw']}", row
      assert row["export_values"] and row["import_values"] and row["import_aliases"], row
    else:
      assert row["capsule_device"] == [2, row["hw"]], row
  theirs = _run("cuda")
  strip = lambda rows: [{k: v for k, v in r.items() if k != "import_device"} for r in rows]
  assert strip(ours) == strip(theirs)
