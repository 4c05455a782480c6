"""Addresses of the coordination service: host:port parsing, loopback
checks, the wildcard to bind, and the addresses of this host that peers may
reach."""

from __future__ import annotations

import ipaddress
import socket


def _is_loopback(host: str) -> bool:
  if host in ("localhost", "ip6-localhost"):
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


def _split_address(address: str) -> tuple[str, int]:
  host, sep, port = address.rpartition(":")
  if not sep or not host or not port.isdigit():
    raise ValueError(f"coordinator address must be host:port, got {address!r}")
  return host.strip("[]"), int(port)

def wildcard_host() -> str:
  """Every interface: dual-stack "::" where the kernel has IPv6 (IPv6-only
  hosts need it; IPv4 clients arrive mapped), else "0.0.0.0"."""
  if socket.has_ipv6:
    try:
      with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::", 0))
      return "::"
    except OSError:
      pass
  return "0.0.0.0"

def _loopback_of(host: str) -> str:
  return "::1" if host in ("::1", "ip6-localhost") else "127.0.0.1"

def _candidate_addresses(port: int) -> list[str]:
  """Addresses of this host that other processes may reach, loopback last."""
  hosts = []
  try:
    for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_UNSPEC, socket.SOCK_STREAM):
      if info[4][0] not in hosts and not _is_loopback(info[4][0]):
        hosts.append(info[4][0])
  except OSError:
    pass
  hosts.append("127.0.0.1")
  return [f"[{h}]:{port}" if ":" in h else f"{h}:{port}" for h in hosts]
