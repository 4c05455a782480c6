"""Writes fuzz/corpus/hlo_rewrite_fuzzer/: real partitioned modules, as the
multi-process compile sees them, of small jax programs that use every
collective the rewrite handles (psum, all_gather, psum_scatter, all_to_all,
ppermute, axis_index as partition-id, pmap's replica-id) under shard_map, jit
and pmap, and programs whose collectives the rewrite combines into one call
per bucket (a training step's gradients, independent gathers and scatters),
an FSDP gradient (an all-reduce and each device's slice: a reduce-scatter),
a partly manual shard_map's psum (a copy in its reduction body), narrow
floats (a bf16 sum, a float8 gather), and a pmap of PRNG keys (threefry's loops). jax's own CPU backend with 8 host devices compiles them and dumps
the module after SPMD partitioning (a pmap's module is not partitioned: its
module before optimizations is the one), the files the compile hook reads.

    XLA_FLAGS unset; python fuzz/make_hlo_seeds.py [out_dir]
"""
import glob
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
  out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "corpus", "hlo_rewrite_fuzzer")
  dump = tempfile.mkdtemp(prefix="hlo-seeds-")
  os.environ["JAX_PLATFORMS"] = "cpu"
  os.environ["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count=8 --xla_dump_to={dump} "
                             "--xla_dump_hlo_pass_re=spmd-partitioning --xla_dump_hlo_as_text")
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  try:
    from jax import shard_map
  except ImportError:
    from jax.experimental.shard_map import shard_map

  devices = np.array(jax.devices()[:8])
  mesh1 = Mesh(devices, ("x",))
  mesh2 = Mesh(devices.reshape(2, 4), ("a", "b"))
  x = jnp.arange(64, dtype=jnp.float32).reshape(8, 8)

  def smap(mesh, f, in_specs, out_specs):
    return jax.jit(shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs))

  programs = {
      "psum": smap(mesh1, lambda v: jax.lax.psum(v, "x"), P("x"), P()),
      "pmax_2d": smap(mesh2, lambda v: jax.lax.pmax(v, "b"), P("a", "b"), P("a")),
      "psum_both_axes": smap(mesh2, lambda v: jax.lax.psum(v * 2, ("a", "b")), P("a", "b"), P()),
      "all_gather": smap(mesh1, lambda v: jax.lax.all_gather(v, "x", axis=1, tiled=True), P("x"), P("x")),
      "all_gather_2d": smap(mesh2, lambda v: jax.lax.all_gather(v, "a", tiled=True), P("a", "b"), P("a", "b")),
      "reduce_scatter": smap(mesh1, lambda v: jax.lax.psum_scatter(v, "x", scatter_dimension=1, tiled=True),
                             P(None, None), P(None, "x")),
      "all_to_all": smap(mesh1, lambda v: jax.lax.all_to_all(v, "x", 1, 0, tiled=True), P("x"), P("x")),
      "ppermute": smap(mesh1, lambda v: jax.lax.ppermute(v, "x", [(i, (i + 1) % 8) for i in range(8)]),
                       P("x"), P("x")),
      "axis_index": smap(mesh2, lambda v: v + jax.lax.axis_index("b").astype(jnp.float32), P("a", "b"),
                         P("a", "b")),
      "loop_psum": smap(mesh1, lambda v: jax.lax.fori_loop(0, 3, lambda i, c: c + jax.lax.psum(c, "x") / 8, v),
                        P("x"), P("x")),
      "cond_psum": smap(mesh1, lambda v: jax.lax.cond(v.sum() > 0, lambda c: c + jax.lax.psum(c, "x"),
                                                      lambda c: c, v), P("x"), P("x")),
      "tuple_psum": smap(mesh1, lambda v: jax.lax.psum((v, v.astype(jnp.int32)), "x"), P("x"), P()),
      "jit_sharded_matmul": jax.jit(lambda a: a @ a.T, in_shardings=NamedSharding(mesh2, P("a", "b")),
                                    out_shardings=NamedSharding(mesh2, P())),
      "jit_sharded_sum": jax.jit(lambda a: a.sum(axis=0), in_shardings=NamedSharding(mesh1, P("x")),
                                 out_shardings=NamedSharding(mesh1, P())),
      "training_step": jax.jit(jax.grad(lambda p, a: sum(jnp.sum(jnp.tanh(a @ w + b)) for w, b in p)),
                               in_shardings=(NamedSharding(mesh1, P()), NamedSharding(mesh1, P("x")))),
      "combinable": jax.jit(shard_map(lambda v: (jax.lax.all_gather(v, "x", axis=1, tiled=True),
                                                 jax.lax.all_gather(v.astype(jnp.int32), "x", tiled=True),
                                                 jax.lax.psum_scatter(v, "x", tiled=True),
                                                 jax.lax.psum_scatter(v * 2, "x", scatter_dimension=1, tiled=True),
                                                 jax.lax.psum(v, "x"), jax.lax.pmax(v, "x")),
                                      mesh=mesh1, in_specs=P(), out_specs=P(), check_vma=False)),
      # FSDP: each gradient an all-reduce and a slice of the device's rows by a
      # table of partition-id, which the rewrite makes a reduce-scatter.
      "fsdp_step": jax.jit(jax.grad(lambda w, a: jnp.sum(jnp.tanh(a @ jax.lax.with_sharding_constraint(
          w, NamedSharding(mesh1, P()))))), in_shardings=(NamedSharding(mesh1, P("x")), NamedSharding(mesh1, P("x"))),
                           out_shardings=NamedSharding(mesh1, P("x"))),
      # A partly manual shard_map: a sharding constraint in the psum's body,
      # a copy of the sum after partitioning.
      "partial_manual_psum": jax.jit(shard_map(lambda v: jax.lax.psum(v * 2, "a"), mesh=mesh2, in_specs=P("a"),
                                               out_specs=P(), axis_names={"a"})),
      # Narrow floats: a bf16 sum (in f32 on the CPU engine), a float8 gather (as bytes).
      "bf16_psum": smap(mesh1, lambda v: jax.lax.psum(v.astype(jnp.bfloat16), "x"), P("x"), P()),
      "f8_all_gather": smap(mesh1, lambda v: jax.lax.all_gather(v.astype(jnp.float8_e4m3fn), "x", tiled=True),
                            P("x"), P("x")),
      "pmap_psum": jax.pmap(lambda v: jax.lax.psum(v, "i") + jax.lax.axis_index("i"), axis_name="i"),
      "pmap_all_gather": jax.pmap(lambda v: jax.lax.all_gather(v, "i"), axis_name="i"),
      # threefry's loops and rotation constants (jax's multi-process pmap test).
      "pmap_prng": jax.pmap(lambda k: jax.random.normal(k, shape=(2,))),
  }
  os.makedirs(out, exist_ok=True)
  params = [(jnp.ones((8, 8)) / (i + 1), jnp.zeros(8)) for i in range(3)]
  arguments = {"training_step": (params, x), "fsdp_step": (x, x), "pmap_prng": (jax.random.split(jax.random.key(0), 8),)}
  for name, f in programs.items():
    before = set(glob.glob(os.path.join(dump, "*.txt")))
    f.lower(*arguments.get(name, (x,))).compile()
    new = sorted(set(glob.glob(os.path.join(dump, "*.txt"))) - before)
    after = [p for p in new if "after_spmd-partitioning" in p] or [p for p in new if "before_optimizations" in p]
    if not after:
      raise SystemExit(f"{name}: no partitioned module among {new}")
    shutil.copy(after[-1], os.path.join(out, name + ".hlo"))
    print(name, os.path.basename(after[-1]))
  # jax no longer partitions by replicas: the same pmap program as a module of
  # 8 replicas (replica-id, an all-reduce of replica groups without a channel).
  with open(os.path.join(out, "pmap_psum.hlo")) as f:
    text = f.read()
  text = (text.replace("num_partitions=8", "replica_count=8").replace("partition-id()", "replica-id()")
          .replace("channel_id=1, ", "").replace(", use_global_device_ids=true", ""))
  with open(os.path.join(out, "replica_id.hlo"), "w") as f:
    f.write(text)
  shutil.rmtree(dump)


if __name__ == "__main__":
  main()
