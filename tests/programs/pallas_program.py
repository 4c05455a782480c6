"""A Pallas kernel in a shard_map over every device of the job, then a psum
across them: each process saves the blocks it holds (NAME.DEVICE_ID) to
OUT ({rank} in OUT is the process index). The kernel is compiled (Triton)
where the devices are GPUs and interpreted elsewhere: jax's CPU backend,
and myplugin's CPU engine, compile no other (tests/gpu/shared_gpu.py).

  python pallas_program.py OUT
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def kernel(x_ref, o_ref):
  o_ref[...] = x_ref[...] * 2.0 + jnp.sin(x_ref[...])


def main(out: str) -> None:
  devices = jax.devices()
  interpret = not devices[0].device_kind.startswith("NVIDIA")
  n = len(devices)
  line = Mesh(np.array(devices), ("i",))
  host = np.linspace(-2, 2, 8 * n * 128, dtype=np.float32).reshape(8 * n, 128)
  x = jax.make_array_from_callback(host.shape, NamedSharding(line, P("i")), lambda idx: host[idx])

  def body(block):
    y = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype), interpret=interpret)(block)
    return y, jax.lax.psum(y, "i")

  # (A kernel's output carries no varying-axes type: jax asks for check_vma=False.)
  f = jax.jit(jax.shard_map(body, mesh=line, in_specs=P("i"), out_specs=(P("i"), P("i")), check_vma=False))
  kernel_out, summed = f(x)
  results = {}
  for name, array in (("kernel", kernel_out), ("psum", summed)):
    for s in array.addressable_shards:
      results[f"{name}.{s.device.id}"] = np.asarray(s.data)
  print(f"process {jax.process_index()}: interpret={interpret}, {len(results)} blocks")
  np.savez(out.format(rank=jax.process_index()), **results)


if __name__ == "__main__":
  main(sys.argv[1])
