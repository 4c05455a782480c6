"""An expert-parallel mixture-of-experts layer, one expert a device, with
lax.ragged_all_to_all as DeepSeek-style MoE layers dispatch tokens: each
device sorts its tokens by the expert they are routed to, sends each
expert its run of rows (sizes known only at run time), the expert applies
its MLP to whatever arrived, and a second ragged_all_to_all sends every row
back to the device it came from, where the tokens are put back in order.

layer(mesh, axis) is the jitted step over the mesh axis `axis` (tokens and
routes split along it, one expert's weights a device); reference() is the
same layer in numpy, for checking results. The receive buffer holds
`capacity` rows a device: a routing that sends an expert more fails with
myplugin's bounds error on GPUs, never writes past the buffer.
"""
from __future__ import annotations

import numpy as np


def _exclusive_cumsum(x, axis=0):
  import jax.numpy as jnp
  return jnp.cumsum(x, axis=axis) - x


def layer(mesh, axis: str, capacity: int):
  """f(x [n·T, D], route [n·T] int32 in 0..n-1, w1 [n, D, F], w2 [n, F, D])
  -> [n·T, D], each token through its routed expert's MLP."""
  import jax
  import jax.numpy as jnp
  from jax.sharding import PartitionSpec as P

  n = mesh.shape[axis]

  def local(x, route, w1, w2):
    order = jnp.argsort(route, stable=True)
    xs = x[order]
    send = jnp.bincount(route, length=n).astype(jnp.int32)       # rows to each expert
    in_off = _exclusive_cumsum(send)
    sent = jax.lax.all_gather(send, axis)                          # [sender, expert]
    out_off = _exclusive_cumsum(sent)[jax.lax.axis_index(axis)]    # where mine land on each expert
    recv = jax.lax.all_to_all(send, axis, 0, 0, tiled=True)        # rows from each sender
    buf = jnp.zeros((capacity, x.shape[1]), x.dtype)
    h = jax.lax.ragged_all_to_all(xs, buf, in_off, send, out_off, recv, axis_name=axis)
    y = jax.nn.gelu(h @ w1[0]) @ w2[0]
    # Back: each sender's rows sit at recv_off on this expert; they return to
    # where they left from (the sender's in_off, told by an all-to-all).
    recv_off = _exclusive_cumsum(recv)
    home = jax.lax.all_to_all(in_off, axis, 0, 0, tiled=True)
    back = jax.lax.ragged_all_to_all(y, jnp.zeros_like(xs), recv_off, recv, home, send, axis_name=axis)
    return jnp.zeros_like(back).at[order].set(back)

  return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(axis), P(axis), P(axis), P(axis)),
                               out_specs=P(axis)))


def reference(x, route, w1, w2):
  """The layer in numpy (float64): gelu as jax's default (tanh form)."""
  x = np.asarray(x, np.float64)
  out = np.empty_like(x)
  for e in range(w1.shape[0]):
    rows = np.asarray(route) == e
    h = x[rows] @ np.asarray(w1[e], np.float64)
    g = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    out[rows] = g @ np.asarray(w2[e], np.float64)
  return out
