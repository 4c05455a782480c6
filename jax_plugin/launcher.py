"""myplugin-run: start a multi-process job on this host.

  myplugin-run -n 4 [--devices-per-process 2] [--timeout S] [--max-restarts K [--min-processes M]]
               [--recover R [--rejoin-wait]] [--cpu-bind] [--share-gpu [GPU]] -- python train.py args

It hosts the coordination service itself, starts the processes with the
MYPLUGIN_* variables set (JAX_PLATFORMS=myplugin unless set), prefixes each
output line with the rank, and on the first failure ends every process and
exits with 100 + the rank that caused it (and says so). The culprit is the
process whose failure the coordination service recorded first (its own
exception, signal, early exit or silence), never one that fate-sharing ended
afterwards (those exit with 42); a rank that failed before it joined the
service is found by exit order instead.

With --max-restarts K (torchrun's meaning) a failed job is started again,
every rank anew, up to K times; MYPLUGIN_RESTART_COUNT tells the program
which attempt it is (0 first). The service lives on across attempts with a
new token each time, so a process left over from an earlier attempt is
refused with an error that says so. A rank that fails twice in a row before
it joins the job is left out of the next attempt, down to --min-processes.

With --recover R (in-place recovery: the program initializes with
fate_sharing=False and calls jax_plugin.distributed.recover) a failed rank
ends alone: the others go on, and the launcher starts that rank again with
the same rank id (up to R times in all), with MYPLUGIN_REJOIN=1; it is let
in at the survivors' first membership agreement after it registered (with
--rejoin-wait, the next agreement waits for it to register: the survivors
stall while it starts, but when it comes back is certain). A failure that the
job cannot recover from (the agreement failed) ends every rank as above.
The job's exit code is 0 when every rank's last process exited 0.

With --cpu-bind each rank runs on its own share of the launcher's CPUs
(cpu_binding.py), a rank started again on its rank's share.

With --share-gpu [GPU] every rank runs on the same GPU (CUDA ordinal, 0 by
default), one device each, with its own NCCL host identity and its share of
the GPU's memory (gpu_sharing.py): an N-way job on one GPU.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

from jax_plugin import cpu_binding, gpu_sharing

EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
# The job ended on a preemption notice (SIGTERM to the launcher): 128 +
# SIGTERM, as a scheduler reads a job it terminated; not a failure.
EXIT_PREEMPTED = 128 + signal.SIGTERM
# How long the ranks get after a SIGTERM to reach their preemption sync
# point, save and exit, before they are killed (Slurm's KillWait default).
DEFAULT_GRACE_PERIOD_S = 30.0
# After a first failure, the others get this long to report their own
# error (fate-sharing) before they are killed.
FAILURE_GRACE_S = 5.0
# How long a culprit that is still there (stopped, hung) is waited for once
# every other rank has ended.
CULPRIT_GRACE_S = 0.5
# Once every rank has passed the job's shutdown barrier (each finished its
# program), a rank still running this long after is stuck in its teardown:
# it is ended, and the summary says so. Its work was complete, so the job's
# exit code stays 0. A program may still work after an explicit
# jax.distributed.shutdown(): --teardown-grace gives it longer.
DEFAULT_TEARDOWN_GRACE_S = 60.0
# A culprit that reported its own failure (an exception it raised) is
# exiting by itself: it gets the whole FAILURE_GRACE_S, so that its own exit
# status is what the summary says. Its exit took up to 1.5 s on a machine
# at load 5 (2 cores), where CULPRIT_GRACE_S killed it in 7 runs of 8.


# How much of the job's failure reason the summary repeats: its start, then
# a reference. The reason is said whole once in each rank's own output (the
# culprit's traceback, the others' notice of the failure); a collective
# mismatch's 300-character sentence appeared five times in the job's output.
SUMMARY_REASON_CHARS = 120


def short_reason(reason: str) -> str:
  """`reason`'s first line, cut at SUMMARY_REASON_CHARS with a reference."""
  first, _, rest = reason.partition("\n")
  if len(first) <= SUMMARY_REASON_CHARS and not rest.strip():
    return first
  return f"{first[:SUMMARY_REASON_CHARS].rstrip()}… (in full above)"


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _pump(stream, out, prefix: str, lock: threading.Lock) -> None:
  for line in iter(stream.readline, b""):
    with lock:
      out.buffer.write(prefix.encode() + line if line.endswith(b"\n") else prefix.encode() + line + b"\n")
      out.flush()
  stream.close()


def failure_exit_code(rank: int) -> int:
  return min(100 + rank, 255)


def _kill_all(procs) -> None:
  for p in procs:
    if p.poll() is None:
      try:
        os.killpg(p.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      prog="myplugin-run", description="Run a multi-process JAX program on myplugin, on this host.",
      usage="myplugin-run -n N [options] -- command [args...]")
  parser.add_argument("-n", "--num-processes", type=int, required=True)
  parser.add_argument("--devices-per-process", type=int, default=None,
                      help="MYPLUGIN_NUM_DEVICES for every process (default: the environment's, else 1)")
  parser.add_argument("--timeout", type=float, default=None, help="end the whole job after this many seconds")
  parser.add_argument("--port", type=int, default=0, help="coordinator port (default: a free one)")
  parser.add_argument("--heartbeat-timeout", type=float, default=None,
                      help="seconds (default: MYPLUGIN_HEARTBEAT_TIMEOUT, else the service's default)")
  parser.add_argument("--initialization-timeout", type=float, default=None,
                      help="seconds (default: MYPLUGIN_INITIALIZATION_TIMEOUT, else the service's default)")
  parser.add_argument("--max-restarts", type=int, default=0,
                      help="when a rank fails, end every rank and start the job again, up to this many times "
                           "(MYPLUGIN_RESTART_COUNT tells the program which attempt it is)")
  parser.add_argument("--min-processes", type=int, default=None,
                      help="a rank that fails twice in a row before joining the job is left out of the next "
                           "attempt, down to this many processes (default: -n, never shrink)")
  parser.add_argument("--recover", type=int, default=None, metavar="R",
                      help="in-place recovery: a failed rank is started again alone (same rank id, "
                           "MYPLUGIN_REJOIN=1), up to R times in all, while the others go on")
  parser.add_argument("--rejoin-wait", action="store_true",
                      help="with --recover: the next membership agreement waits for a restarted rank")
  parser.add_argument("--cpu-bind", action="store_true",
                      help="run each rank on its own share of the CPUs this launcher may use (as mpirun's "
                           "--bind-to core); the engine sizes its thread pools to that share")
  parser.add_argument("--share-gpu", type=int, nargs="?", const=0, default=None, metavar="GPU",
                      help="run every rank on this one GPU (a CUDA ordinal; default 0), one device each, with its "
                           "own NCCL host identity and 0.9/N of the GPU's memory (XLA_CLIENT_MEM_FRACTION, "
                           "unless set)")
  parser.add_argument("--grace-period", type=float, default=DEFAULT_GRACE_PERIOD_S, metavar="S",
                      help="on SIGTERM (a preemption notice) the ranks get it too, and this many seconds to "
                           "save and exit before they are killed; exit code 143 (default: 30, as Slurm's KillWait; "
                           "0: end them at once)")
  parser.add_argument("--teardown-grace", type=float, default=DEFAULT_TEARDOWN_GRACE_S, metavar="S",
                      help="a rank still running this many seconds after every rank passed the job's shutdown "
                           "barrier (its program finished) is stuck in its teardown: it is ended and named, and the "
                           "exit code stays 0 (default: 60)")
  parser.add_argument("command", nargs=argparse.REMAINDER)
  args = parser.parse_args(argv)
  command = args.command[1:] if args.command[:1] == ["--"] else args.command
  if not command:
    parser.error("no command given (put it after --)")
  if args.num_processes < 1:
    parser.error("-n must be at least 1")
  if args.devices_per_process is not None and args.devices_per_process < 1:
    parser.error("--devices-per-process must be at least 1")
  if args.max_restarts < 0:
    parser.error("--max-restarts must be at least 0")
  if args.recover is not None and (args.recover < 0 or args.max_restarts):
    parser.error("--recover takes a number of restarts of single ranks (at least 0) and excludes --max-restarts")
  if args.rejoin_wait and args.recover is None:
    parser.error("--rejoin-wait goes with --recover")
  if args.grace_period < 0:
    parser.error("--grace-period must be at least 0")
  if args.teardown_grace < 0:
    parser.error("--teardown-grace must be at least 0")
  if args.share_gpu is not None:
    if args.share_gpu < 0:
      parser.error("--share-gpu takes a CUDA ordinal, 0 or more")
    if args.devices_per_process not in (None, 1):
      parser.error("--share-gpu gives each rank one device (the shared GPU): --devices-per-process must be 1")
    try:  # a request that cannot fit is refused before anything starts
      gpu_sharing.rank_environment(0, args.num_processes, args.share_gpu)
    except ValueError as e:
      parser.error(f"--share-gpu: {e}")
  if args.min_processes is None:
    args.min_processes = args.num_processes
  if not 1 <= args.min_processes <= args.num_processes:
    parser.error("--min-processes must be between 1 and -n")

  from jax_plugin import _myplugin, distributed

  if args.heartbeat_timeout is None:
    args.heartbeat_timeout = distributed.seconds_setting("MYPLUGIN_HEARTBEAT_TIMEOUT", "heartbeat_timeout")
  if args.initialization_timeout is None:
    args.initialization_timeout = distributed.seconds_setting("MYPLUGIN_INITIALIZATION_TIMEOUT",
                                                              "initialization_timeout")
  token = secrets.token_hex(16)
  try:
    service = _myplugin.CoordinationService.start("127.0.0.1", args.port, args.num_processes, token,
                                                  args.heartbeat_timeout, args.initialization_timeout)
  except RuntimeError as e:
    print(f"myplugin-run: {e}", file=sys.stderr)
    return 1
  base_env = dict(os.environ)
  base_env.setdefault("JAX_PLATFORMS", "myplugin")
  base_env.update({
      "MYPLUGIN_COORDINATOR_ADDRESS": f"127.0.0.1:{service.port}",
      "MYPLUGIN_NUM_PROCESSES": str(args.num_processes),
      "MYPLUGIN_COORDINATOR_TOKEN": token,
      "MYPLUGIN_COORDINATOR_STANDALONE": "1",
      "MYPLUGIN_HEARTBEAT_TIMEOUT": str(args.heartbeat_timeout),
      "MYPLUGIN_INITIALIZATION_TIMEOUT": str(args.initialization_timeout),
      "PYTHONUNBUFFERED": "1",
  })
  if args.devices_per_process is not None:
    base_env["MYPLUGIN_NUM_DEVICES"] = str(args.devices_per_process)

  interrupted = []

  def on_signal(signum, frame):
    interrupted.append(signum)

  previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
  deadline = time.monotonic() + args.timeout if args.timeout else None
  num_processes = args.num_processes
  failed_before_joining = None  # the rank that did, in the attempt before
  try:
    if args.recover is not None:
      env = dict(base_env, MYPLUGIN_RESTART_COUNT="0", MYPLUGIN_JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{_free_port()}")
      return _run_recovering(command, env, num_processes, service, deadline, interrupted, args.timeout,
                             args.recover, args.rejoin_wait, _Placement(args, num_processes))
    for attempt in range(args.max_restarts + 1):
      # jax's own coordinator (hosted by rank 0 of each attempt) moves to a
      # fresh port: the one before may still be held by a dying process.
      env = dict(base_env, MYPLUGIN_RESTART_COUNT=str(attempt), MYPLUGIN_NUM_PROCESSES=str(num_processes),
                 MYPLUGIN_JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{_free_port()}")
      result = _run_attempt(command, env, num_processes, service, deadline, interrupted, args.timeout,
                            _Placement(args, num_processes), args.grace_period, args.teardown_grace)
      if result.status:
        return result.status
      if result.culprit is None:
        return 0
      if attempt == args.max_restarts:
        return failure_exit_code(result.culprit)
      # A rank that fails twice in a row before it joined the job (its host
      # is gone, its device broken) is left out of the next attempt, while
      # --min-processes allows it.
      unjoined = None if result.culprit_joined else result.culprit
      drop = unjoined is not None and unjoined == failed_before_joining and num_processes > args.min_processes
      failed_before_joining = None if drop else unjoined
      if drop:
        num_processes -= 1
      print(f"myplugin-run: restarting the job (restart {attempt + 1} of {args.max_restarts})"
            + (f" without a rank: rank {result.culprit} failed twice in a row before it joined; "
               f"{num_processes} processes now" if drop else ""), file=sys.stderr)
      token = secrets.token_hex(16)
      service.restart(token, num_processes)
      base_env["MYPLUGIN_COORDINATOR_TOKEN"] = token
  finally:
    service.stop()
    for s, h in previous.items():
      signal.signal(s, h)


class _Attempt:
  """How one attempt of the job ended."""

  def __init__(self, status: int, culprit: int | None, culprit_joined: bool):
    self.status = status  # EXIT_TIMEOUT or EXIT_INTERRUPTED, else 0
    self.culprit = culprit  # the rank that failed first, if one did
    self.culprit_joined = culprit_joined


class _Placement:
  """Where each rank of an attempt runs: its CPUs (--cpu-bind) and its GPU
  (--share-gpu), as variables and a binding."""

  def __init__(self, args, num_processes: int):
    self.num_processes = num_processes
    self.cpus = cpu_binding.cpu_shares(num_processes, cpu_binding.launcher_cpus()) if args.cpu_bind else None
    self.gpu = args.share_gpu

  def environment(self, rank: int) -> dict[str, str]:
    if self.gpu is None:
      return {}
    return gpu_sharing.rank_environment(rank, self.num_processes, self.gpu)


def _start_rank(command, env, rank, lock, pumps, placement) -> subprocess.Popen:
  p = subprocess.Popen(command, env=dict(env, **placement.environment(rank), MYPLUGIN_PROCESS_ID=str(rank)),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
  if placement.cpus is not None:
    # Popen returns once the command was executed, before it can start a
    # thread: every thread of the rank's process inherits this.
    why = cpu_binding.bind(p.pid, placement.cpus[rank])
    if why:
      print(f"myplugin-run: rank {rank} runs unbound: {why}", file=sys.stderr)
  for stream, out in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
    t = threading.Thread(target=_pump, args=(stream, out, f"[{rank}] ", lock), daemon=True)
    t.start()
    pumps.append(t)
  return p


def _run_recovering(command, env, num_processes, service, deadline, interrupted, timeout, respawns,
                    rejoin_wait, placement) -> int:
  """--recover: ranks fail alone; each failed one starts again while respawns last."""
  from jax_plugin import _myplugin
  lock = threading.Lock()
  pumps = []
  procs = [_start_rank(command, env, rank, lock, pumps, placement) for rank in range(num_processes)]
  # Each rank's count of failures the service had declared when its
  # process started: a higher count while that process still runs means
  # the service failed it alive (stopped, stuck, cut off), and the members
  # went on without it; it is ended here so that it is started again (or
  # given up) like a dead one, not left to hold the job until --timeout.
  # It first gets the time an exit gives a flight recorder being written.
  failures_at_start = list(service.failures_per_process())
  failed_alive_since = {}
  given_up = set()
  status = None
  try:
    while status is None:
      failures = service.failures_per_process()
      for rank, p in enumerate(procs):
        if failures[rank] <= failures_at_start[rank] or p.poll() is not None:
          continue
        since = failed_alive_since.setdefault(rank, time.monotonic())
        if time.monotonic() - since > _myplugin.EXIT_GUARD_SECONDS:
          failures_at_start[rank] = failures[rank]
          del failed_alive_since[rank]
          print(f"myplugin-run: rank {rank} was declared failed by the coordination service and its process "
                f"was still running {_myplugin.EXIT_GUARD_SECONDS:g} s later; ending it", file=sys.stderr)
          _kill_all([p])
          p.wait()
      codes = [p.poll() for p in procs]
      if all(c is not None for c in codes):
        failed = [r for r, c in enumerate(codes) if c != 0]
        if failed:
          print(f"myplugin-run: ranks {failed} ended with an error", file=sys.stderr)
        status = 1 if failed else 0
        break
      if interrupted:
        print("myplugin-run: interrupted; ending all processes", file=sys.stderr)
        status = EXIT_INTERRUPTED
        break
      if deadline is not None and time.monotonic() > deadline:
        running = [r for r, c in enumerate(codes) if c is None]
        print(f"myplugin-run: the job did not finish within {timeout:g} s; ending ranks {running}", file=sys.stderr)
        status = EXIT_TIMEOUT
        break
      if service.failure() is not None and not service.recoverable():
        culprit = service.failed_process()
        print(f"myplugin-run: the job cannot recover ({service.failure()}); all ranks were ended", file=sys.stderr)
        status = failure_exit_code(culprit if culprit is not None else 0)
        break
      for rank, code in enumerate(codes):
        if code in (None, 0) or rank in given_up:
          continue
        if respawns > 0 and rejoin_wait:
          # Before the service hears of the death: an agreement that the
          # death completes must already wait for the new process.
          service.expect_rejoin(rank, True)
        # The process is gone (reaped): the service hears it from here, not
        # from its connection's close, which may come later (or never, while
        # a child of it holds the socket); its id is free from now on.
        service.process_ended(rank, _describe(code))
        if respawns == 0:
          # Whatever agreement waited for it to come back waits no more.
          given_up.add(rank)
          service.expect_rejoin(rank, False)
          print(f"myplugin-run: rank {rank} failed {_describe(code)}; no restarts left, the job goes on "
                "without it", file=sys.stderr)
          continue
        respawns -= 1
        print(f"myplugin-run: rank {rank} failed {_describe(code)}; starting it again to rejoin the job "
              f"({respawns} restarts left)", file=sys.stderr)
        procs[rank] = _start_rank(command, dict(env, MYPLUGIN_REJOIN="1"), rank, lock, pumps, placement)
        failures_at_start[rank] = service.failures_per_process()[rank]
        failed_alive_since.pop(rank, None)
      time.sleep(0.02)
  finally:
    _kill_all(procs)
    for p in procs:
      p.wait()
    for t in pumps:
      t.join(timeout=5)
  return status


def _run_attempt(command, env, num_processes, service, deadline, interrupted, timeout, placement,
                 grace_period: float = 0.0, teardown_grace: float = DEFAULT_TEARDOWN_GRACE_S) -> _Attempt:
  from jax_plugin import _myplugin
  lock = threading.Lock()
  pumps = []
  procs = [_start_rank(command, env, rank, lock, pumps, placement) for rank in range(num_processes)]

  first_exit = None  # (rank, code) of the first process seen to end with an error
  failure_seen_at = None
  preempted_at = None  # when a SIGTERM was forwarded to the ranks
  departed_at = None  # when every rank was seen past the shutdown barrier
  status = 0
  try:
    while True:
      codes = [p.poll() for p in procs]
      if interrupted and preempted_at is None and interrupted == [signal.SIGTERM] and grace_period > 0:
        # A preemption notice: the ranks get it, and the grace period to
        # reach their sync point, save and exit.
        preempted_at = time.monotonic()
        running = [r for r, c in enumerate(codes) if c is None]
        print(f"myplugin-run: SIGTERM (a preemption notice): forwarded to ranks {running}, which have "
              f"{grace_period:g} s to save and exit", file=sys.stderr)
        for r in running:
          try:
            os.killpg(procs[r].pid, signal.SIGTERM)
          except ProcessLookupError:
            pass
      if preempted_at is not None:
        if all(c is not None for c in codes):
          status = EXIT_PREEMPTED
          break
        if len(interrupted) > 1 or time.monotonic() - preempted_at > grace_period:
          status = EXIT_PREEMPTED
          running = [r for r, c in enumerate(codes) if c is None]
          print(f"myplugin-run: ranks {running} did not exit within the grace period"
                f"{'' if len(interrupted) == 1 else ' (a second signal)'}; ending them", file=sys.stderr)
          break
        time.sleep(0.02)
        continue
      if failure_seen_at is None:
        first_exit = next(((r, c) for r, c in enumerate(codes) if c not in (None, 0)), None)
        if first_exit is not None or service.failed_process() is not None:
          failure_seen_at = time.monotonic()
      if all(c is not None for c in codes):
        break
      if interrupted:
        status = EXIT_INTERRUPTED
        print("myplugin-run: interrupted; ending all processes", file=sys.stderr)
        break
      if deadline is not None and time.monotonic() > deadline:
        status = EXIT_TIMEOUT
        running = [r for r, c in enumerate(codes) if c is None]
        print(f"myplugin-run: the job did not finish within {timeout:g} s; ending ranks {running}",
              file=sys.stderr)
        break
      if failure_seen_at is None and service.all_departed():
        departed_at = departed_at or time.monotonic()
        if time.monotonic() - departed_at > teardown_grace:
          stuck = [r for r, c in enumerate(codes) if c is None]
          print(f"myplugin-run: ranks {stuck} still running {teardown_grace:g} s after every rank passed the "
                f"job's shutdown barrier (their programs finished): stuck in teardown; ending them (exit code "
                f"stays 0)", file=sys.stderr)
          break
      if failure_seen_at is not None:
        waited = time.monotonic() - failure_seen_at
        culprit = service.failed_process()
        # A culprit that is stopped or hung will not end by itself: once
        # every other rank has reported, it gets no more than a moment.
        others_done = culprit is not None and all(c is not None for r, c in enumerate(codes) if r != culprit)
        culprit_grace = FAILURE_GRACE_S if service.failure_self_reported() else CULPRIT_GRACE_S
        if waited > FAILURE_GRACE_S or (others_done and waited > culprit_grace):
          break
      time.sleep(0.02)
  finally:
    # The culprit is read before the launcher's own kills can add failures
    # (the first failure is final, so this only matters if there was none).
    culprit = service.failed_process()
    why = service.failure()
    killed = {r for r, p in enumerate(procs) if p.poll() is None}
    _kill_all(procs)
    for p in procs:
      p.wait()
    for t in pumps:
      t.join(timeout=5)

  if status == EXIT_PREEMPTED:
    print(f"myplugin-run: the job was preempted (exit {EXIT_PREEMPTED})", file=sys.stderr)
  if status:
    return _Attempt(status, None, False)
  joined = culprit is not None
  if culprit is None and first_exit is not None:
    # It failed before the service knew it (e.g. before it joined): the
    # first rank to end with an error that is not fate-sharing's, among
    # those that ended by themselves (not by the kills above).
    culprit = next((r for r, c in enumerate(codes) if c not in (None, 0, _myplugin.FATE_SHARING_EXIT_CODE)),
                   first_exit[0])
  if culprit is not None:
    code = procs[culprit].returncode
    ended = [r for r, p in enumerate(procs) if r != culprit and p.returncode == _myplugin.FATE_SHARING_EXIT_CODE]
    detail = f" ({short_reason(why)})" if why else ""
    bystanders = f"; ranks {ended} were ended because of it (exit code {_myplugin.FATE_SHARING_EXIT_CODE})" if ended else ""
    how = ("(still running after its failure: killed by myplugin-run)" if culprit in killed
           else _describe(code))
    print(f"myplugin-run: rank {culprit} failed first {how}{detail}{bystanders}; all ranks were ended",
          file=sys.stderr)
  return _Attempt(0, culprit, joined)


def _describe(code: int) -> str:
  if code < 0:
    try:
      return f"(killed by {signal.Signals(-code).name})"
    except ValueError:
      return f"(killed by signal {-code})"
  return f"with exit code {code}"


if __name__ == "__main__":
  sys.exit(main())
