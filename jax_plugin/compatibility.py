"""Which jax this package runs with.

The range is the one that pyproject.toml declares for ``jax`` and ``jaxlib``
(read back from the installed package's metadata, so it is written once). A
jax outside it is refused when the plugin initializes, with the versions
named, instead of failing later in ways that name nothing (an FFI handler
that the engine silently drops, a private jax module that moved).
"""

from __future__ import annotations

import re
from importlib import metadata

DISTRIBUTION = "myplugin"
_CHECKED = ("jax", "jaxlib")


def _version_tuple(version: str) -> tuple[int, ...]:
  """'0.11.2' -> (0, 11, 2); pre-release and local suffixes are ignored."""
  parts = []
  for piece in version.split("."):
    m = re.match(r"\d+", piece)
    if m is None:
      break
    parts.append(int(m.group()))
  return tuple(parts)


_COMPARE = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def satisfies(version: str, specifier: str) -> bool:
  """Whether `version` meets a comma-separated specifier such as '>=0.10.2,<0.12'."""
  have = _version_tuple(version)
  for clause in filter(None, (c.strip() for c in specifier.split(","))):
    m = re.fullmatch(r"(>=|<=|==|!=|<|>)\s*([0-9][0-9A-Za-z.]*)", clause)
    if m is None:
      raise ValueError(f"unsupported version specifier {clause!r}")
    want = _version_tuple(m.group(2))
    width = max(len(have), len(want))
    if not _COMPARE[m.group(1)](have + (0,) * (width - len(have)), want + (0,) * (width - len(want))):
      return False
  return True


def declared_ranges() -> dict[str, str]:
  """{'jax': '>=0.10.2,<0.12', 'jaxlib': …} from the installed package; empty if it is not installed."""
  try:
    requirements = metadata.requires(DISTRIBUTION) or []
  except metadata.PackageNotFoundError:
    return {}
  ranges = {}
  for requirement in requirements:
    if ";" in requirement:  # extras and markers: not the core dependencies
      continue
    m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*\(?([^)]*)\)?\s*", requirement)
    if m and m.group(1).lower() in _CHECKED:
      # Metadata may list the bounds in any order: lower bound first reads best.
      clauses = sorted(m.group(2).replace(" ", "").split(","), key=lambda c: not c.startswith(">"))
      ranges[m.group(1).lower()] = ",".join(clauses)
  return ranges


def check(versions: dict[str, str], ranges: dict[str, str] | None = None) -> None:
  """Raises RuntimeError naming every package whose version is outside the supported range."""
  ranges = declared_ranges() if ranges is None else ranges
  wrong = [f"{name} {versions[name]} (supported: {name}{spec})"
           for name, spec in sorted(ranges.items())
           if name in versions and spec and not satisfies(versions[name], spec)]
  if wrong:
    wanted = " ".join(f"'{name}{spec}'" for name, spec in sorted(ranges.items()))
    raise RuntimeError(f"myplugin does not support this jax: {', '.join(wrong)}. Install a supported one: "
                       f"pip install {wanted}")


def installed_versions() -> dict[str, str]:
  import jax
  import jaxlib.version
  return {"jax": jax.__version__, "jaxlib": jaxlib.version.__version__}
