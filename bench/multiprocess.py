"""Multi-process JAX programs: myplugin against jax's own CPU backend in
multi-process mode over Gloo (jax.distributed.initialize +
jax_cpu_collectives_implementation='gloo'), same processes and devices,
jobs interleaved round by round:

  - a psum over processes (shard_map over one device per process), 4 KB to
    256 MB: bus bandwidth as nccl-tests defines it, busbw = bytes / time *
    2 (n - 1) / n;
  - a data-parallel training step (jit, NamedSharding): its time, and its
    compile time (for myplugin, partition on the shadow engine + rewrite +
    local compile);
  - a tensor-parallel layer's training step on a 2-D mesh (data x model,
    bench/tensor_parallel_step.py): its time.

With --combine, instead: myplugin alone, the deep MLP's training step (12
parameter arrays, bench/training_step.py) with the rewrite's collective
combining off (MYPLUGIN_COMBINE_THRESHOLD_BYTES=0: an all-reduce call per
gradient) and on (the default: one per bucket), jobs interleaved round by
round; best and median step times, and their ratios.

With --fsdp, instead: myplugin alone, the FSDP step (bench/training_step.py:
weights sharded by rows, gathered before use, gradients a reduce-scatter
each) with the rewrite's reduce-scatter forming off
(MYPLUGIN_FORM_REDUCE_SCATTERS=0: an all-reduce of each whole gradient and
a slice) and on (the default), over Gloo and over shared memory, jobs
interleaved round by round; best and median step times, and their ratios.

usage: python bench/multiprocess.py [--processes 2] [--rounds 3] [--max-mb 256] [--plot out.png] [--combine]
                                   [--fsdp [--layers 2]]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from procs import free_port, kill_groups  # noqa: E402


def run_job(backend: str, n: int, sizes: list[int], timeout=1800, env=None, mode=None) -> dict:
  """One job; `env` adds to every myplugin process's environment, `mode`
  ("deep") picks the worker's deep step alone."""
  port = free_port()
  base = {k: v for k, v in os.environ.items() if not k.startswith(("MYPLUGIN_", "JAX_", "BENCH_"))}
  envs = []
  for r in range(n):
    if backend == "myplugin":
      envs.append(dict(base, JAX_PLATFORMS="myplugin", MYPLUGIN_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                       MYPLUGIN_NUM_PROCESSES=str(n), MYPLUGIN_PROCESS_ID=str(r), MYPLUGIN_NUM_DEVICES="1",
                       **(env or {})))
    else:
      envs.append(dict(base, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="1", BENCH_JAX_COORDINATOR=f"127.0.0.1:{port}",
                       BENCH_NUM_PROCESSES=str(n), BENCH_PROCESS_ID=str(r)))
  argv = [sys.executable, os.path.join(HERE, "multiprocess_worker.py"), ",".join(map(str, sizes)), *([mode] if mode else [])]
  procs = [subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True) for e in envs]
  try:
    out, err = procs[0].communicate(timeout=timeout)
    for p in procs[1:]:
      p.wait(timeout=120)
    if procs[0].returncode != 0:
      raise RuntimeError(f"{backend} job failed:\n{err[-3000:]}")
    res = {"psum": {}}
    for line in out.splitlines():
      parts = line.split()
      if line.startswith("RESULT psum"):
        res["psum"][int(parts[2])] = (float(parts[3]), float(parts[4]))
      elif line.startswith("RESULT compile"):
        res["compile"] = float(parts[2])
        res["compile_cpu"] = float(parts[3])
      elif line.startswith("RESULT step"):
        res["step"] = (float(parts[2]), float(parts[3]))
      elif line.startswith("RESULT tp_step"):
        res["tp_step"] = (float(parts[2]), float(parts[3]))
      elif line.startswith("RESULT deep_step"):
        res["deep_step"] = (float(parts[2]), float(parts[3]))
      elif line.startswith("RESULT fsdp_step"):
        res["fsdp_step"] = (float(parts[2]), float(parts[3]))
    return res
  finally:
    kill_groups(procs)


def label(b: int) -> str:
  return f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB"


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--processes", type=int, default=2)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--max-mb", type=int, default=256)
  parser.add_argument("--plot")
  parser.add_argument("--combine", action="store_true")
  parser.add_argument("--batch", type=int, default=1024, help="--combine: the deep step's global batch")
  parser.add_argument("--transport", help="--combine: MYPLUGIN_TRANSPORT of the jobs (default: auto)")
  parser.add_argument("--fsdp", action="store_true")
  parser.add_argument("--layers", type=int, default=2, help="--fsdp: the step's layers (2 weights each)")
  args = parser.parse_args()
  n = args.processes
  if args.fsdp:
    return fsdp(n, args.rounds, args.layers)
  if args.combine:
    return combine(n, args.rounds, args.batch, args.transport)
  sizes, s = [], 4096
  while s <= args.max_mb << 20:
    sizes.append(s)
    s *= 4
  runs = {"myplugin": [], "jax": []}
  for _ in range(args.rounds):
    for backend in runs:
      runs[backend].append(run_job(backend, n, sizes))
  factor = 2 * (n - 1) / n
  bw = lambda b, t: b / t * factor / 1e9
  print(f"{n} processes x 1 device, {args.rounds} rounds interleaved; best / median over rounds of each job's "
        "best and median call")
  print("\n| psum size | myplugin busbw GB/s | jax+Gloo busbw GB/s | speedup (best, median) |")
  print("|---|---|---|---|")
  curves = {"myplugin": [], "jax": []}
  for b in sizes:
    cells = {}
    for backend, rs in runs.items():
      best = min(r["psum"][b][0] for r in rs)
      med = statistics.median(r["psum"][b][1] for r in rs)
      cells[backend] = (best, med)
      curves[backend].append(bw(b, best))
    (ob, om), (jb, jm) = cells["myplugin"], cells["jax"]
    print(f"| {label(b)} | {bw(b, ob):.3f} / {bw(b, om):.3f} ({ob * 1e6:.0f} us) | {bw(b, jb):.3f} / "
          f"{bw(b, jm):.3f} ({jb * 1e6:.0f} us) | {jb / ob:.2f}, {jm / om:.2f} |", flush=True)
  step = {k: (min(r["step"][0] for r in rs), statistics.median(r["step"][1] for r in rs)) for k, rs in runs.items()}
  tp = {k: (min(r["tp_step"][0] for r in rs), statistics.median(r["tp_step"][1] for r in rs)) for k, rs in runs.items()}
  comp = {k: (min(r["compile"] for r in rs), statistics.median(r["compile"] for r in rs)) for k, rs in runs.items()}
  # CPU seconds too: on a shared machine they vary less than wall time.
  comp_cpu = {k: (min(r["compile_cpu"] for r in rs), statistics.median(r["compile_cpu"] for r in rs))
              for k, rs in runs.items()}
  print("\n| training step | myplugin | jax+Gloo | speedup (best, median) |")
  print("|---|---|---|---|")
  print(f"| step time | {step['myplugin'][0] * 1e3:.2f} / {step['myplugin'][1] * 1e3:.2f} ms | "
        f"{step['jax'][0] * 1e3:.2f} / {step['jax'][1] * 1e3:.2f} ms | {step['jax'][0] / step['myplugin'][0]:.2f}, "
        f"{step['jax'][1] / step['myplugin'][1]:.2f} |")
  print(f"| tensor-parallel step (2-D mesh) | {tp['myplugin'][0] * 1e3:.2f} / {tp['myplugin'][1] * 1e3:.2f} ms | "
        f"{tp['jax'][0] * 1e3:.2f} / {tp['jax'][1] * 1e3:.2f} ms | {tp['jax'][0] / tp['myplugin'][0]:.2f}, "
        f"{tp['jax'][1] / tp['myplugin'][1]:.2f} |")
  print(f"| compile time | {comp['myplugin'][0] * 1e3:.0f} / {comp['myplugin'][1] * 1e3:.0f} ms | "
        f"{comp['jax'][0] * 1e3:.0f} / {comp['jax'][1] * 1e3:.0f} ms | {comp['jax'][0] / comp['myplugin'][0]:.2f}, "
        f"{comp['jax'][1] / comp['myplugin'][1]:.2f} |")
  print(f"| compile CPU time | {comp_cpu['myplugin'][0] * 1e3:.0f} / {comp_cpu['myplugin'][1] * 1e3:.0f} ms | "
        f"{comp_cpu['jax'][0] * 1e3:.0f} / {comp_cpu['jax'][1] * 1e3:.0f} ms | "
        f"{comp_cpu['jax'][0] / comp_cpu['myplugin'][0]:.2f}, {comp_cpu['jax'][1] / comp_cpu['myplugin'][1]:.2f} |")
  if args.plot:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    mb = [b / (1 << 20) for b in sizes]
    ax.plot(mb, curves["myplugin"], "o-", label="myplugin")
    ax.plot(mb, curves["jax"], "s-", label="jax CPU + Gloo")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("psum size (MB)")
    ax.set_ylabel("bus bandwidth (GB/s, best)")
    ax.set_title(f"psum over {n} processes")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    # Step times beside it: PLOT_steps.png.
    steps = os.path.splitext(args.plot)[0] + "_steps.png"
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = ["data-parallel MLP", "tensor-parallel layer (2-D mesh)"]
    for i, (backend, shown) in enumerate([("myplugin", "myplugin"), ("jax", "jax CPU + Gloo")]):
      best = [step[backend][0] * 1e3, tp[backend][0] * 1e3]
      ax.bar([x + 0.38 * i for x in range(2)], best, width=0.38, label=shown)
    ax.set_xticks([x + 0.19 for x in range(2)], names)
    ax.set_ylabel("step time (ms, best)")
    ax.set_title(f"training steps, {n} processes")
    ax.legend()
    fig.tight_layout()
    fig.savefig(steps, dpi=110)
    print(f"\nplots: {args.plot}, {steps}")


def interleaved(n: int, rounds: int, settings: dict, mode: str, result: str) -> tuple[dict, dict]:
  """myplugin's job of each setting (its environment), round by round: per
  setting, the best of the rounds' best steps and the median of their medians."""
  runs = {k: [] for k in settings}
  for _ in range(rounds):
    for key, env in settings.items():
      runs[key].append(run_job("myplugin", n, [], env=env, mode=mode)[result])
  return ({k: min(r[0] for r in rs) for k, rs in runs.items()},
          {k: statistics.median(r[1] for r in rs) for k, rs in runs.items()})


def combine(n: int, rounds: int, batch: int, transport: str | None) -> None:
  """The deep step with combining off and on, interleaved round by round."""
  common = {"MYPLUGIN_TRANSPORT": transport} if transport else {}
  settings = {"off": dict(common, MYPLUGIN_COMBINE_THRESHOLD_BYTES="0"), "on": common}
  best, med = interleaved(n, rounds, settings, f"deep:{batch}", "deep_step")
  print(f"{n} processes x 1 device, batch {batch}, transport {transport or 'auto'}, {rounds} rounds interleaved; "
        "best / median over rounds of each job's best and median step (50 steps)")
  print("\n| deep MLP step (12 parameter arrays) | combining off (threshold 0) | combining on (default) | "
        "off / on (best, median) |")
  print("|---|---|---|---|")
  print(f"| step time | {best['off'] * 1e3:.3f} / {med['off'] * 1e3:.3f} ms | {best['on'] * 1e3:.3f} / "
        f"{med['on'] * 1e3:.3f} ms | {best['off'] / best['on']:.2f}, {med['off'] / med['on']:.2f} |")



def fsdp(n: int, rounds: int, layers: int) -> None:
  """The FSDP step with reduce-scatter forming off and on, per transport, interleaved round by round."""
  cases = {(t, form): {"MYPLUGIN_TRANSPORT": t, "MYPLUGIN_FORM_REDUCE_SCATTERS": form}
           for t in ("gloo", "shm") for form in ("0", "1")}
  best, med = interleaved(n, rounds, cases, f"fsdp:{layers}", "fsdp_step")
  print(f"{n} processes x 1 device, FSDP step of {layers} layers (D 1024, F 4096, 256 tokens, f32), {rounds} "
        "rounds interleaved; best / median over rounds of each job's best and median step (30 steps)")
  print("\n| transport | all-reduce + slice (forming off) | reduce-scatter (default) | off / on (best, median) |")
  print("|---|---|---|---|")
  for t in ("gloo", "shm"):
    off, on = (t, "0"), (t, "1")
    print(f"| {t} | {best[off] * 1e3:.3f} / {med[off] * 1e3:.3f} ms | {best[on] * 1e3:.3f} / {med[on] * 1e3:.3f} ms | "
          f"{best[off] / best[on]:.2f}, {med[off] / med[on]:.2f} |")


if __name__ == "__main__":
  main()
