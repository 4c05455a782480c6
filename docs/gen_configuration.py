"""Writes docs/configuration.md: every variable and option, its meaning and
its default. A default that C++ defines (plugin/common/settings.h,
plugin/coordination/defaults.h, plugin/collectives/defaults.h, bound as
_myplugin.DEFAULTS) is read from the
installed jax_plugin, never written here, so the page cannot disagree with
the code; the rest of the text is in ROWS below.

  python docs/gen_configuration.py           # rewrite the page
  python docs/gen_configuration.py --check   # exit 1 if the page is stale

Run it with the Python where myplugin is installed (the checkout's
jax_plugin/ has no built module). tests/test_plugin_surface.py runs the
same check.
"""
from __future__ import annotations

import argparse
import os
import sys

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configuration.md")


class D:
  """A default read from _myplugin.DEFAULTS: the keys, shown comma-separated."""

  def __init__(self, *keys: str):
    self.keys = keys

  def render(self, defaults: dict) -> str:
    return ", ".join(show(defaults[k]) for k in self.keys)


def show(value) -> str:
  # 100.0 seconds reads 100; sizes and counts are ints; the transport a word.
  return f"{value:g}" if isinstance(value, float) else str(value)


# (variable or option, meaning, default). A meaning may name a default in
# braces ({min_trace_buffer}); a default is text, or D(keys) for C++'s.
ROWS = [
  ("`JAX_PLATFORMS=myplugin`",
   "select the backend (the plugin keeps jax's `cpu` backend behind it, which jax's Python callbacks need; "
   "myplugin stays the default)",
   "jax's choice (myplugin has priority 400 over cpu)"),
  ("`MYPLUGIN_NUM_DEVICES`", "local devices (1 to 4096)", "1, like jax's CPU backend"),
  ("client option `num_devices`",
   "the same, via `jax_pjrt_client_create_options=\"num_devices:8\"` or `register_plugin(options=…)`; "
   "wins over the variable", ""),
  ("`MYPLUGIN_ENGINE`",
   "`cpu`, `cuda`, or the path of an engine library (any PJRT plugin `.so` with C API 0.81 or newer); "
   "see [GPUs](gpus.md#engine-selection)",
   "CUDA when GPUs and `jax-cuda13-pjrt` or `jax-cuda12-pjrt` are present, else the CPU engine shipped in "
   "the wheel (`jax_plugin/engine/`; an installed `lammps-jax-pjrt-cpu` in a build without it)"),
  ("`MYPLUGIN_NCCL_PATH`", "the `libnccl.so.2` the NCCL collectives load; see [GPUs](gpus.md#nccl)",
   "the `nvidia-nccl-cu13`/`-cu12` wheel's, else the system's (NCCL reads its own `NCCL_*` variables; "
   "myplugin reads `NCCL_HOSTID` only to name it when NCCL refuses two ranks on one GPU)"),
  ("`MYPLUGIN_VISIBLE_DEVICES`",
   "the GPUs this process uses on the CUDA engine (CUDA ordinals, comma-separated; `local_device_ids` win)",
   "every GPU"),
  ("`MYPLUGIN_ENGINE_PATH`",
   "the engine library, as before `MYPLUGIN_ENGINE` (`MYPLUGIN_ENGINE_KIND=cpu\\|cuda` says which it is)", ""),
  ("`MYPLUGIN_COORDINATOR_ADDRESS`, `MYPLUGIN_NUM_PROCESSES`, `MYPLUGIN_PROCESS_ID`",
   "this process's place in a job (set by `myplugin-run`)", ""),
  ("`MYPLUGIN_COORDINATOR_TOKEN`",
   "the shared secret every connection proves; without it the service listens on loopback only, except "
   "when started by `jax.distributed.initialize` with an address off this host (jax's own level of "
   "security: none, see [Starting a job](clusters.md#starting-a-job))",
   "none (the launcher makes one; under Open MPI, the job's random `OMPI_MCA_orte_precondition_transports`)"),
  ("`MYPLUGIN_RESTART_COUNT`",
   "which attempt of the job this is, under `myplugin-run --max-restarts` (set by the launcher, read by "
   "the program)", "0"),
  ("`MYPLUGIN_COORDINATOR_STANDALONE=1`",
   "the service runs elsewhere (launcher, CLI): process 0 does not start one", "unset"),
  ("`MYPLUGIN_COORDINATOR_PORT`", "the port under Slurm / Open MPI / Kubernetes",
   "derived from the job id (Kubernetes: the Job's name)"),
  ("`JAX_COORDINATOR_ADDRESS`, `JAX_LOCAL_DEVICE_IDS`, `JAX_COORDINATOR_BIND_ADDRESS`",
   "read by `jax.distributed.initialize` as jax reads them; our service then listens at that address",
   "jax's"),
  ("`MYPLUGIN_HEARTBEAT_TIMEOUT`, `MYPLUGIN_INITIALIZATION_TIMEOUT`, `MYPLUGIN_SHUTDOWN_TIMEOUT`",
   "seconds, for jobs joined from the environment",
   D("heartbeat_timeout", "initialization_timeout", "shutdown_timeout")),
  ("`timeout` of `jax_plugin.distributed.agree_membership` and `recover`",
   "seconds a membership agreement waits for every live member to ask for it; see "
   "[In-place recovery](clusters.md#in-place-recovery)",
   D("agreement_timeout")),
  ("`MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS`",
   "how long a collective waits for every process to reach it (also the bound of a communicator's setup)",
   D("collective_timeout")),
  ("`MYPLUGIN_COLLECTIVE_STALL_SECONDS`",
   "once every process has reached a collective, how long it may go without progress (a step done, a "
   "4 MiB piece received)",
   D("collective_stall")),
  ("`MYPLUGIN_COLLECTIVE_CAP_SECONDS`",
   "the bound on a whole collective, however it moves (checked at each wait it starts; Gloo's own "
   "all-reduce, all-gather and all-to-all take it at their start)",
   D("collective_cap")),
  ("`MYPLUGIN_PEER_EXIT_GRACE_SECONDS`", "how long a collective may still wait for a process that finished",
   D("peer_exit_grace")),
  ("`MYPLUGIN_TRANSPORT`",
   "how processes move collective data: `auto` (shared memory when every process of a process group is on "
   "this host; hierarchical when it spans hosts that each hold several of its processes; else Gloo), `shm` "
   "(shared memory; an error for a process group that spans hosts), `gloo`, `hierarchical` (shared memory "
   "within each host, Gloo between the hosts)",
   D("transport")),
  ("`MYPLUGIN_NCCL_AGREEMENT`",
   "on GPUs, where an NCCL call across processes agrees on its signature with the other processes: `beside` "
   "(the call is enqueued at once and agreed on a thread of its own; its result is held on the GPU until it "
   "agrees, and a failed agreement ends the process with the error; used where fate-sharing is on, else "
   "`before`) or `before` (agreed on the thread that launches the kernels, then enqueued)",
   D("nccl_agreement")),
  ("`MYPLUGIN_STRAGGLER_SECONDS`",
   "a wait in a collective or barrier longer than this makes process 0 print a straggler report (0: off); "
   "0 is accepted here, unlike the collectives' seconds",
   D("straggler_seconds")),
  ("`MYPLUGIN_TRACE_BUFFER`",
   "the calls each process's flight recorder keeps ({min_trace_buffer} to {max_trace_buffer})",
   D("trace_buffer")),
  ("`MYPLUGIN_TRACE_DIR`", "where flight recorders are written (`process-<id>.json`)",
   "a per-job folder `myplugin-trace-<UTC time>-<pid of process 0>` under `$TMPDIR` (or `/tmp`)"),
  ("`MYPLUGIN_GLOO_HOSTNAME`",
   "the address (or host name) where this process's peers reach it for collectives; one setting with "
   "`MYPLUGIN_NETWORK_INTERFACE` (both set is an error)",
   "the local address of this process's connection to the coordinator (see "
   "[Running on a cluster](clusters.md#running-on-a-cluster))"),
  ("`MYPLUGIN_NETWORK_INTERFACE`",
   "the interface whose address peers reach this process at (like `NCCL_SOCKET_IFNAME`); its address of "
   "the coordinator connection's family",
   "unset"),
  ("`MYPLUGIN_COMBINE_THRESHOLD_BYTES`",
   "the most bytes one combined collective call of a multi-process program carries: independent "
   "all-reduces (all-gathers, reduce-scatters) of one reduction and device groups become one call per "
   "bucket of at most this size, like XLA's `xla_gpu_all_reduce_combine_threshold_bytes` (0: one call per "
   "collective; every process must use the same value); see "
   "[One call per bucket](architecture.md#one-call-per-bucket)",
   D("combine_threshold_bytes")),
  ("`MYPLUGIN_FORM_REDUCE_SCATTERS`",
   "`1`: a multi-process program's all-reduce whose result each device only takes its own block of (an FSDP "
   "gradient, a contraction with a sharded result) becomes a reduce-scatter, which moves half the bytes, as "
   "XLA's GPU pipeline does; `0` keeps the partitioner's all-reduce and slice (every process must use the same "
   "value); see [Reduce-scatters](architecture.md#reduce-scatters)",
   D("form_reduce_scatters")),
  ("`MYPLUGIN_SPMD_LOG=1`",
   "log each multi-process compile: partition, rewrite and local compile times, cache hits", "unset"),
  ("`MYPLUGIN_SPMD_REWRITE=always`",
   "send every program of several devices through the multi-process compile, even in one process (for "
   "testing the path)",
   "unset: only programs that name another process's device"),
  ("`MYPLUGIN_DUMP_REWRITTEN=DIR`", "append every rewritten module (HLO text) to `DIR/rewritten.PID.txt`",
   "unset"),
  ("`XLA_PYTHON_CLIENT_ALLOCATOR`",
   "jax's GPU allocator (`default`, `platform`, `bfc`, `cuda_async`, `vmm`, `address`), given to the CUDA "
   "engine as jax's CUDA backend gives it; see [jax's GPU memory settings](gpus.md#jaxs-gpu-memory-settings)",
   "`default` (the engine's BFC allocator)"),
  ("`XLA_CLIENT_MEM_FRACTION` (or the older `XLA_PYTHON_CLIENT_MEM_FRACTION`; not both)",
   "the share of each GPU's memory the CUDA engine may take, above 0 and at most 1; `myplugin-run --share-gpu` "
   "sets 0.9/N", "the engine's: 0.75"),
  ("`XLA_PYTHON_CLIENT_PREALLOCATE`", "take that share at start (`false`, `False` or `0`: grow as needed)",
   "the engine's: preallocate"),
  ("`XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB`", "memory the CUDA engine sets aside for XLA's own collectives (MiB)",
   "the engine's"),
  ("client options `allocator`, `memory_fraction`, `preallocate`, `collective_memory_size`",
   "the same, via `jax_pjrt_client_create_options` (`collective_memory_size` in bytes); win over the variables",
   ""),
]

HEADER = """\
<!-- Written by docs/gen_configuration.py from _myplugin.DEFAULTS; edit the script, not this page. -->
# Configuration

Every setting of myplugin is an environment variable, read when the backend
starts or a job is joined, except the client option and the function
argument that the table names.

"""

FOOTER = """
Each default is defined once, in C++ (`plugin/common/settings.h`,
`plugin/coordination/defaults.h`, `plugin/collectives/defaults.h`), and
bound as `_myplugin.DEFAULTS`: `jax_plugin.distributed.initialize`'s
signature, jax.distributed's through ours, `myplugin-run` and
`myplugin-coordinator` read it there, and this page is written from it by
`docs/gen_configuration.py`; `tests/test_plugin_surface.py` and
`ci/docs.sh` fail when the page is stale, or when it leaves out a variable
that C++ reads (`_myplugin.SETTING_VARIABLES`).

C++ reads its variables in one place (`ParseSettings`,
`plugin/common/settings.cc`), once, when the backend starts (`jax.devices()`
or a compile-only topology) and when the process joins a job, and checks
them there: a collective's seconds that are not a positive number
(`MYPLUGIN_COLLECTIVE_STALL_SECONDS=abc`, `0`), a
`MYPLUGIN_STRAGGLER_SECONDS` that is not a number of seconds, a
`MYPLUGIN_TRACE_BUFFER` out of range, an unknown `MYPLUGIN_TRANSPORT` and a
`MYPLUGIN_SPMD_REWRITE` other than `always` are `INVALID_ARGUMENT` errors
naming the variable and its value then, never at the first collective
deep in a job (and never a silent fall back to the default).

Bad input is a Python error that says what is wrong, never a crash:
`MYPLUGIN_NUM_DEVICES=0` (or negative, or not a number) and an unknown client
option are `INVALID_ARGUMENT` errors naming the value and the accepted ones;
a missing engine, a file that is not a shared library and a library without
`GetPjrtApi` are each named with their path; a device id that does not exist
is an `INVALID_ARGUMENT` that says how many devices there are. When
`jax_plugin.initialize()` itself fails, it logs the cause at warning level
(jax alone would only call the platform "unknown").

A `MYPLUGIN_*` variable that nothing reads is said once when the backend
starts (by process 0 only, in a job), with the setting it most likely meant:
`myplugin: MYPLUGIN_NUM_DEVICE is not a myplugin setting and is ignored (did
you mean MYPLUGIN_NUM_DEVICES?)` (`jax_plugin/variables.py`; it used to be
ignored without a word).
"""


def keys_shown() -> set[str]:
  """The DEFAULTS keys the page shows, as defaults or inside a meaning."""
  import string
  shown = set()
  for _, meaning, default in ROWS:
    shown.update(name for _, name, _, _ in string.Formatter().parse(meaning) if name)
    if isinstance(default, D):
      shown.update(default.keys)
  return shown


def render(defaults: dict) -> str:
  """The page, from DEFAULTS; a ValueError when the two do not match."""
  unshown = set(defaults) - keys_shown()
  if unshown:
    # A new default in C++ needs its row (or its place in a meaning) here.
    raise ValueError(f"_myplugin.DEFAULTS has keys that no row of docs/gen_configuration.py shows: "
                     f"{sorted(unshown)}")
  absent = keys_shown() - set(defaults)
  if absent:
    # An installed build older (or newer) than the checkout.
    raise ValueError(f"the installed jax_plugin's _myplugin.DEFAULTS has no {sorted(absent)}: "
                     f"install this checkout (pip install .) and run again")
  shown = {k: show(v) for k, v in defaults.items()}
  lines = ["| variable / option | meaning | default |", "|---|---|---|"]
  for name, meaning, default in ROWS:
    value = default.render(defaults) if isinstance(default, D) else default
    lines.append(f"| {name} | {meaning.format_map(shown)} |" + (f" {value} |" if value else " |"))
  return HEADER + "\n".join(lines) + "\n" + FOOTER


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true", help="exit 1 if docs/configuration.md is stale")
  args = parser.parse_args(argv)
  from jax_plugin import _myplugin
  try:
    text = render(_myplugin.DEFAULTS)
  except ValueError as e:
    print(f"gen_configuration.py: {e}", file=sys.stderr)
    return 2
  current = open(PAGE).read() if os.path.exists(PAGE) else ""
  if args.check:
    if current != text:
      print(f"{PAGE} is stale: run python docs/gen_configuration.py and commit it", file=sys.stderr)
      return 1
    print(f"{PAGE} is current")
    return 0
  if current != text:
    with open(PAGE, "w") as f:
      f.write(text)
  print(f"wrote {PAGE}" if current != text else f"{PAGE} unchanged")
  return 0


if __name__ == "__main__":
  sys.exit(main())
