"""Data-parallel training that keeps going when a process dies.

N processes train a small MLP (jit over a NamedSharding of every device)
for S steps, keeping a checkpoint every C steps. One rank is SIGKILLed at a
given step (it kills itself, so the example is repeatable). Two ways on:

  in place (docs/clusters.md, "In-place recovery"): the survivors' next collective
  raises an error naming the dead rank; they agree on the new membership
  (jax_plugin.distributed.recover), rebuild the backend over their devices,
  restore the checkpoint they keep in host memory and go on; the launcher
  starts the dead rank again, and it is let back in at the next checkpoint,
  where the members agree again and hand it the checkpoint.

    myplugin-run -n 4 --recover 1 [--rejoin-wait] -- python examples/elastic_training.py

  restart (torchrun's way): every rank ends and the launcher starts the job
  again; it resumes from the checkpoint on disk.

    myplugin-run -n 4 --max-restarts 1 -- python examples/elastic_training.py --mode restart --dir /tmp/ckpt

A restarted rank is ready before it asks to rejoin: it imports jax and
sets up before `initialize` registers it, so the members, who let it in at
their next checkpoint after it registered, never wait for its start-up.
With `--compilation-cache DIR` (jax's persistent compilation cache) the
program compiled for a membership seen before (the job's own, when the
rank is back) is loaded instead of compiled, by the members and by the
restarted rank alike.

The global batch of step s depends on s only, never on the membership, so
any schedule of failures ends with the loss of an uninterrupted run (up to
float rounding): `--reference` computes that on one process.
Rank 0 (the lowest member) prints "final loss L" at the end. `--hidden` and
`--batch` make the step longer (bench/recovery.py uses `--hidden 32768`).
"""
import argparse
import io
import os
import signal
import sys
import time

import numpy as np

DIM = 16
BATCH = 120  # --batch: the global batch; 120 divides among 1..6 processes
HIDDEN = 32  # --hidden: the width


def batch(step: int, size: int = BATCH):
  rng = np.random.default_rng(1000 + step)
  x = rng.normal(size=(size, DIM)).astype(np.float32)
  y = (np.sin(2 * x[:, :1]) + x[:, 1:2] ** 2).astype(np.float32)
  return x, y


def initial_params(hidden: int = HIDDEN):
  rng = np.random.default_rng(0)
  return {"w1": (rng.normal(size=(DIM, hidden)) / np.sqrt(DIM)).astype(np.float32),
          "b1": np.zeros(hidden, np.float32),
          "w2": (rng.normal(size=(hidden, 1)) / np.sqrt(hidden)).astype(np.float32),
          "b2": np.zeros(1, np.float32)}


def make_step(lr: float):
  import jax
  import jax.numpy as jnp

  def loss_fn(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

  @jax.jit
  def step(p, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, g: a - lr * g, p, grads), loss

  return step


def reference(steps: int, lr: float, hidden: int, size: int) -> float:
  """The uninterrupted run, on this process alone (run it with JAX_PLATFORMS=cpu)."""
  step = make_step(lr)
  p = initial_params(hidden)
  loss = None
  for s in range(steps):
    p, loss = step(p, *batch(s, size))
  return float(loss)


def encode(step: int, params) -> bytes:
  buf = io.BytesIO()
  np.savez(buf, __step__=np.array(step), **params)
  return buf.getvalue()


def decode(blob: bytes):
  with np.load(io.BytesIO(blob)) as z:
    return int(z["__step__"]), {k: z[k] for k in z.files if k != "__step__"}


class Trainer:
  """The loop of one process; the checkpoint (step, params as numpy) is its own."""

  def __init__(self, args):
    import jax
    self.jax, self.args = jax, args
    self.step_fn = None
    self.checkpoint = (0, initial_params(args.hidden))
    self.failed_at = None  # when the last failure surfaced here

  def place(self, params):
    """Arrays of the current backend: the params replicated, the batch split over every device."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    jax = self.jax
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    self.replicated, self.rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    self.step_fn = make_step(self.args.lr)
    return {k: jax.make_array_from_callback(v.shape, self.replicated, lambda i, v=v: v[i]) for k, v in params.items()}

  def train(self, start: int, params):
    jax, args = self.jax, self.args
    from jax_plugin import distributed
    p = self.place(params)
    s = start
    loss = None
    while s < args.steps:
      if s % args.checkpoint_every == 0 and s != start:
        host = {k: np.asarray(v) for k, v in p.items()}
        self.checkpoint = (s, host)
        if args.mode == "restart":
          self.save_to_disk(s, host)
        else:
          # The members agree at every checkpoint: a restarted rank waiting
          # to rejoin is let in here.
          if distributed.recover(args.agreement_timeout).changed:
            return self.share_checkpoint()
      if (s == args.kill_step and distributed.membership().members[distributed.process_id()] == args.kill_rank
          and os.environ.get("MYPLUGIN_REJOIN") != "1" and os.environ.get("MYPLUGIN_RESTART_COUNT", "0") == "0"):
        print(f"rank {args.kill_rank} kills itself at step {s}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
      x, y = batch(s, args.batch)
      xs = jax.make_array_from_callback(x.shape, self.rows, lambda i: x[i])
      ys = jax.make_array_from_callback(y.shape, self.rows, lambda i: y[i])
      p, loss = self.step_fn(p, xs, ys)
      loss = float(loss)  # waits for the step: a failure surfaces here
      s += 1
      if self.failed_at is not None:  # the rebuilt backend has compiled and run a step
        print(f"training again {time.monotonic() - self.failed_at:.3f} s after the error", flush=True)
        self.failed_at = None
    return s, loss

  def share_checkpoint(self):
    """After a new membership: every member that kept a checkpoint offers
    it, and all restore the latest (a rejoined rank has none of its own)."""
    from jax_plugin import distributed
    m = distributed.membership()
    prefix = f"elastic/{m.epoch}/"
    if os.environ.get("MYPLUGIN_REJOIN") != "1" or self.checkpoint[0] > 0:
      distributed.key_value_set(prefix + str(m.members[m.process_id]), encode(*self.checkpoint))
    distributed.barrier(f"elastic/{m.epoch}", timeout=self.args.agreement_timeout)
    offered = [decode(v) for _, v in distributed.key_value_list(prefix)]
    self.checkpoint = max(offered, key=lambda c: c[0])
    print(f"epoch {m.epoch}: members {m.members}, resuming at step {self.checkpoint[0]}", flush=True)
    return None

  def save_to_disk(self, step, params):
    from jax_plugin import distributed
    if distributed.process_id() == 0:
      tmp = os.path.join(self.args.dir, "ckpt.npz.tmp")
      with open(tmp, "wb") as f:
        f.write(encode(step, params))
      os.replace(tmp, os.path.join(self.args.dir, "ckpt.npz"))
    distributed.barrier(f"ckpt/{step}")

  def run(self):
    from jax_plugin import distributed
    args = self.args
    if args.mode == "restart":
      path = os.path.join(args.dir, "ckpt.npz")
      if os.path.exists(path):
        with open(path, "rb") as f:
          self.checkpoint = decode(f.read())
        print(f"restart: resuming at step {self.checkpoint[0]}", flush=True)
    elif os.environ.get("MYPLUGIN_REJOIN") == "1":
      self.checkpoint = (0, initial_params(args.hidden))
      self.share_checkpoint()  # initialize returned with the verdict that let this process in
    while True:
      try:
        result = self.train(*self.checkpoint)
      except Exception as e:  # the failure of a peer, named
        if args.mode == "restart":
          raise
        print(f"error: {str(e).splitlines()[0][:300]}", flush=True)
        self.failed_at = time.monotonic()
        result = None
      else:
        if result is not None:
          return result[1]
        continue  # a restarted rank was let in at a checkpoint
      # Outside the except block: its traceback holds the old backend's arrays.
      t0 = time.monotonic()
      distributed.recover(args.agreement_timeout)
      self.share_checkpoint()
      print(f"recovered in {time.monotonic() - t0:.3f} s", flush=True)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--checkpoint-every", type=int, default=20)
  parser.add_argument("--kill-rank", type=int, default=2)
  parser.add_argument("--kill-step", type=int, default=50, help="-1: no rank is killed")
  parser.add_argument("--lr", type=float, default=None, help="default: 0.1 at the default width, less when wider")
  parser.add_argument("--hidden", type=int, default=HIDDEN, help="the hidden layer's width")
  parser.add_argument("--batch", type=int, default=BATCH, help="the global batch (it must divide among the members)")
  parser.add_argument("--mode", choices=("recover", "restart"), default="recover")
  parser.add_argument("--dir", default=None, help="the checkpoint folder (--mode restart)")
  parser.add_argument("--agreement-timeout", type=float, default=60)
  parser.add_argument("--reference", action="store_true", help="print the uninterrupted run's final loss")
  parser.add_argument("--compilation-cache", default=None, metavar="DIR",
                      help="jax's persistent compilation cache, for every program however fast it compiles")
  args = parser.parse_args(argv)
  if args.lr is None:  # the output sums `hidden` terms: a fixed rate diverges when wide
    args.lr = 0.1 * min(1.0, HIDDEN / args.hidden)
  # Before initialize: a restarted rank registers (and so rejoins) only once it is ready.
  import jax
  if args.compilation_cache:
    jax.config.update("jax_compilation_cache_dir", args.compilation_cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  if args.reference:
    print(f"final loss {reference(args.steps, args.lr, args.hidden, args.batch):.8f}")
    return 0
  if args.mode == "restart" and not args.dir:
    parser.error("--mode restart needs --dir")
  from jax_plugin import distributed
  try:
    distributed.initialize(fate_sharing=args.mode == "restart")
  except RuntimeError as e:
    if "finished before this process could rejoin" not in str(e):
      raise
    print("the job finished before this restarted rank could rejoin it", flush=True)
    return 0
  started = time.monotonic()
  loss = Trainer(args).run()
  if distributed.process_id() == 0:
    print(f"final loss {loss:.8f} after {time.monotonic() - started:.2f} s", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
