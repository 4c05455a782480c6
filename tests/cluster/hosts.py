"""Hosts for multi-host tests: network namespaces joined by veth pairs on a
bridge, each with its own IPv4 and/or IPv6 address, and the processes run
in them. Needs root (CI runs as root); `Cluster.refusal()` says exactly why
it cannot run where it cannot.

Everything a Cluster makes is undone by `close()` (a context manager and a
pytest fixture call it), whatever failed: every process it started is
killed with its process group, every process left inside a namespace too,
then veths, the bridge and the namespaces (iptables rules and routes live
in a namespace and go with it). Names carry the creating pid, so a later
run removes what a killed run left behind.

Traffic stays inside the namespaces: the bridge has no address, and the
root namespace gets no route to the hosts' subnets.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import time

PREFIX = "mpt"  # every namespace, bridge and veth of ours: mpt<pid>...


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
  r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
  if check and r.returncode != 0:
    raise RuntimeError(f"ip {' '.join(args)} failed: {r.stderr.strip()}")
  return r


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
    return True
  except ProcessLookupError:
    return False
  except PermissionError:
    return True


def remove_leftovers() -> None:
  """Namespaces, bridges and veths of runs whose process is gone."""
  for line in _ip("netns", "list", check=False).stdout.splitlines():
    name = line.split()[0] if line.split() else ""
    m = re.fullmatch(rf"{PREFIX}(\d+)x\d+h\d+", name)
    if m and not _alive(int(m.group(1))):
      _kill_namespace_pids(name)
      _ip("netns", "del", name, check=False)
  for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
    m = re.match(rf"\d+: ({PREFIX}(\d+)x\d+[a-z0-9]*)[@:]", line)
    if m and not _alive(int(m.group(2))):
      _ip("link", "del", m.group(1), check=False)


def namespace_pids(ns: str) -> list[int]:
  r = _ip("netns", "pids", ns, check=False)
  return [int(p) for p in r.stdout.split() if p.isdigit()]


def _kill_namespace_pids(ns: str) -> None:
  for pid in namespace_pids(ns):
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass


@dataclasses.dataclass
class Host:
  index: int
  ns: str  # the network namespace
  veth: str  # the bridge side of its veth pair (the host's side is "eth0")
  ipv4: str | None
  ipv6: str | None

  @property
  def address(self) -> str:
    """The host's address as it goes into host:port (IPv6 bracketed)."""
    return self.ipv4 if self.ipv4 else f"[{self.ipv6}]"


class Cluster:
  _count = 0

  def __init__(self, n_hosts: int, *, ipv4: bool = True, ipv6: bool = True):
    Cluster._count += 1
    self.tag = f"{PREFIX}{os.getpid()}x{Cluster._count}"
    self.bridge = f"{self.tag}br"
    self.hosts: list[Host] = []
    self.procs: list[subprocess.Popen] = []
    self.closed = False
    net = (os.getpid() * 7 + Cluster._count) % 250
    try:
      remove_leftovers()
      _ip("link", "add", self.bridge, "type", "bridge")
      _ip("link", "set", self.bridge, "up")
      for i in range(n_hosts):
        host = Host(i, f"{self.tag}h{i}", f"{self.tag}v{i}", f"10.231.{net}.{i + 1}" if ipv4 else None,
                    f"fd00:231:{net}::{i + 1}" if ipv6 else None)
        _ip("netns", "add", host.ns)
        self.hosts.append(host)
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.ns)
        _ip("link", "set", host.veth, "master", self.bridge)
        _ip("link", "set", host.veth, "up")
        _ip("-n", host.ns, "link", "set", "lo", "up")
        if host.ipv4:
          _ip("-n", host.ns, "addr", "add", f"{host.ipv4}/24", "dev", "eth0")
        if host.ipv6:
          # nodad: the address is usable at once, not after duplicate detection.
          _ip("-n", host.ns, "addr", "add", f"{host.ipv6}/64", "dev", "eth0", "nodad")
        _ip("-n", host.ns, "link", "set", "eth0", "up")
    except BaseException:
      self.close()
      raise

  @staticmethod
  def refusal() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
      return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
      return "iproute2's `ip` is not installed (apt-get install iproute2)"
    probe = f"{PREFIX}{os.getpid()}x0h0"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
      return f"`ip netns add` is refused here: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None

  # --- processes ---

  def popen(self, host: Host, argv: list[str], env: dict[str, str], *, hostname: str | None = None,
            hosts_file: str | None = None, **kw) -> subprocess.Popen:
    """Runs argv on `host` (its own process group), under its own host name
    when one is given (a UTS namespace), else the machine's (every host then
    has the same name, as containers often do). `hosts_file` is mounted
    over /etc/hosts for it alone (a mount namespace), as a kubelet does for
    a pod."""
    # nsenter joins the network namespace only; `ip netns exec` would also
    # remount /sys, hiding the cgroup tree that slurmd needs.
    cmd = ["nsenter", f"--net=/run/netns/{host.ns}", "--"]
    if hostname is not None or hosts_file is not None:
      script = ['hostname "$0"'] if hostname is not None else []
      if hosts_file is not None:
        script.append(f"mount --bind {hosts_file} /etc/hosts")
      cmd += ["unshare", "--uts", "--mount", "--", "sh", "-c", " && ".join(script + ['exec "$@"']),
              hostname or "-"]
    p = subprocess.Popen(cmd + argv, env=env, start_new_session=True, **kw)
    self.procs.append(p)
    return p

  def leftover_processes(self) -> dict[str, list[int]]:
    return {h.ns: pids for h in self.hosts if (pids := namespace_pids(h.ns))}

  def kill_processes(self) -> None:
    for p in self.procs:
      try:
        os.killpg(p.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
    for h in self.hosts:
      _kill_namespace_pids(h.ns)
    for p in self.procs:
      try:
        p.wait(timeout=10)
      except subprocess.TimeoutExpired:
        pass
    self.procs = [p for p in self.procs if p.poll() is None]

  # --- faults ---

  def link_down(self, host: Host) -> None:
    """The host's cable is pulled: its interface goes down."""
    _ip("-n", host.ns, "link", "set", "eth0", "down")

  def link_up(self, host: Host) -> None:
    _ip("-n", host.ns, "link", "set", "eth0", "up")

  def blackhole(self, host: Host, toward: Host) -> None:
    """Packets from `host` to `toward` vanish (a routing fault, no error
    is sent back)."""
    for addr, plen, fam in ((toward.ipv4, 32, "-4"), (toward.ipv6, 128, "-6")):
      if addr:
        _ip("-n", host.ns, fam, "route", "add", "blackhole", f"{addr}/{plen}")

  def drop_incoming(self, host: Host, source: Host) -> None:
    """One-way loss: `host` receives nothing from `source`; the other
    direction still works (iptables DROP in host's INPUT chain)."""
    for tool, addr in (("iptables", source.ipv4), ("ip6tables", source.ipv6)):
      if addr and shutil.which(tool) is None:
        raise RuntimeError(f"{tool} is not installed (Debian package iptables; .ci/run installs it)")
      if addr:
        r = subprocess.run(["ip", "netns", "exec", host.ns, tool, "-A", "INPUT", "-s", addr, "-j", "DROP"],
                           capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
          raise RuntimeError(f"{tool} -A INPUT -s {addr} -j DROP failed in {host.ns}: {r.stderr.strip()}")

  def degrade(self, host: Host, *, loss: float, rate: str) -> None:
    """A poor link, as clusters have: `loss` of the packets reaching `host`
    on its link are dropped at random (iptables' statistic match, both
    address families), and what it sends is held to `rate` (tc's token
    bucket, tbf: a queue, bursts). The kernel here has no netem, so a fixed
    delay cannot be modelled."""
    for tool, addr in (("iptables", host.ipv4), ("ip6tables", host.ipv6)):
      if addr:
        self._in_host(host, [tool, "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random",
                             "--probability", str(loss), "-j", "DROP"])
    self._in_host(host, ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "256kb",
                         "latency", "1s"])

  def dropped(self, host: Host) -> int:
    """Packets that degrade()'s rules dropped at `host` so far."""
    total = 0
    for tool, addr in (("iptables", host.ipv4), ("ip6tables", host.ipv6)):
      if addr:
        out = self._in_host(host, [tool, "-L", "INPUT", "-v", "-x", "-n"])
        total += sum(int(line.split()[0]) for line in out.splitlines() if "statistic" in line)
    return total

  def tcp_retransmits(self, host: Host) -> int:
    """Segments `host`'s TCP has sent again (RetransSegs of its /proc/net/snmp)."""
    lines = [l.split() for l in self._in_host(host, ["cat", "/proc/net/snmp"]).splitlines() if l.startswith("Tcp:")]
    return int(lines[1][lines[0].index("RetransSegs")])

  def _in_host(self, host: Host, argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
      raise RuntimeError(f"{argv[0]} is not installed (.ci/run installs iptables and iproute2)")
    r = subprocess.run(["nsenter", f"--net=/run/netns/{host.ns}", "--", *argv], capture_output=True, text=True,
                       timeout=20)
    if r.returncode != 0:
      raise RuntimeError(f"{' '.join(argv)} failed in {host.ns}: {r.stderr.strip()}")
    return r.stdout

  def vanish(self, host: Host) -> None:
    """The host is gone, as if powered off: its link disappears first (so
    no FIN or RST can leave it), then every process on it is killed."""
    _ip("link", "del", host.veth, check=False)
    _kill_namespace_pids(host.ns)

  # --- teardown ---

  def close(self) -> None:
    if self.closed:
      return
    self.closed = True
    self.kill_processes()
    for h in self.hosts:
      _ip("link", "del", h.veth, check=False)
      _kill_namespace_pids(h.ns)
      _ip("netns", "del", h.ns, check=False)
    _ip("link", "del", self.bridge, check=False)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def skip_or_fail_without_namespaces() -> None:
  """Skips a test where namespaces need root it lacks (CI runs as root);
  fails one where root is refused them."""
  import pytest
  if os.geteuid() != 0:
    pytest.skip("the test hosts are network namespaces, which need root; CI runs the suite as root")
  why = Cluster.refusal()
  if why:
    pytest.fail(f"cannot build the test hosts: {why}")


def module_hosts(n_hosts: int):
  """A test module's hosts (a module-scoped fixture yields from it); at the
  end, no process may be left in them."""
  skip_or_fail_without_namespaces()
  with Cluster(n_hosts) as c:
    yield c
    left = c.leftover_processes()
  assert not left, f"processes left in the test hosts: {left}"


def wait_all(procs: list[subprocess.Popen], deadline: float) -> list[float | None]:
  """Waits until every process has exited or the monotonic deadline passes;
  returns each one's exit time (None if still running)."""
  ends: list[float | None] = [None] * len(procs)
  while True:
    now = time.monotonic()
    for i, p in enumerate(procs):
      if ends[i] is None and p.poll() is not None:
        ends[i] = now
    if all(e is not None for e in ends) or now >= deadline:
      return ends
    time.sleep(0.02)
