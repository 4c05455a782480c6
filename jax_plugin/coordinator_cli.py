"""myplugin-coordinator: the coordination service on its own.

  MYPLUGIN_COORDINATOR_TOKEN=secret myplugin-coordinator --port 7000 --num-processes 16

Processes then join with MYPLUGIN_COORDINATOR_ADDRESS=host:7000, the same
token, and MYPLUGIN_COORDINATOR_STANDALONE=1 (so that process 0 does not
start a service of its own). Without a token the service listens on
loopback only. It exits when every process has shut down (0) or when the
job fails (1).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="myplugin-coordinator")
  parser.add_argument("--port", type=int, required=True)
  parser.add_argument("--num-processes", type=int, required=True)
  parser.add_argument("--bind", default=None, help="bind address (default every interface, IPv4 and IPv6, with a token, else 127.0.0.1)")
  parser.add_argument("--heartbeat-timeout", type=float, default=None, help="seconds (default: the service's)")
  parser.add_argument("--initialization-timeout", type=float, default=None, help="seconds (default: the service's)")
  parser.add_argument("--io-threads", type=int, default=0,
                      help="event-loop threads (default: one per 2,048 processes, up to the machine's cores, at most 8)")
  args = parser.parse_args(argv)

  from jax_plugin import _myplugin, distributed

  if args.heartbeat_timeout is None:
    args.heartbeat_timeout = distributed.DEFAULTS["heartbeat_timeout"]
  if args.initialization_timeout is None:
    args.initialization_timeout = distributed.DEFAULTS["initialization_timeout"]

  token = os.environ.get("MYPLUGIN_COORDINATOR_TOKEN", "")
  bind = args.bind or (distributed.wildcard_host() if token else "127.0.0.1")
  if not token and bind not in ("127.0.0.1", "localhost", "::1"):
    print("myplugin-coordinator: refusing to listen beyond loopback without MYPLUGIN_COORDINATOR_TOKEN",
          file=sys.stderr)
    return 2
  try:
    service = _myplugin.CoordinationService.start(bind, args.port, args.num_processes, token,
                                                  args.heartbeat_timeout, args.initialization_timeout,
                                                  io_threads=args.io_threads)
  except RuntimeError as e:
    print(f"myplugin-coordinator: {e}", file=sys.stderr)
    return 1
  print(f"myplugin-coordinator: listening on {bind}:{service.port} for {args.num_processes} processes", flush=True)
  stop = []
  signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
  signal.signal(signal.SIGINT, lambda *a: stop.append(1))
  code = 0
  while not stop:
    if service.failure() is not None:
      print(f"myplugin-coordinator: job failed: {service.failure()}", file=sys.stderr)
      time.sleep(1)  # let the failure notices reach every process
      code = 1
      break
    if service.all_departed():
      print("myplugin-coordinator: every process shut down", flush=True)
      break
    time.sleep(0.1)
  service.stop()
  return code


if __name__ == "__main__":
  sys.exit(main())
