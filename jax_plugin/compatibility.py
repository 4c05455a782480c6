"""Which jax this package runs with.

Two checks at start. The range that pyproject.toml declares for ``jax`` and
``jaxlib`` (read back from the installed package's metadata, so it is
written once): a jax outside it is refused when the plugin initializes,
with the versions named. Then what the range stands for: the XLA FFI API
that jaxlib's handlers were built against and the one the engine speaks,
each read from the libraries themselves (a handler's metadata call; the
engine's registration of a probe handler), judged against the table of
known pairs in C++ (plugin/engine/ffi_api_version.cc), so that a pair
nobody has shown to work is an error at start naming both, never a
custom-call target missing deep in a program.
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


def ffi_versions(jaxlib_handlers: dict) -> dict[str, list[str]]:
  """{FFI API version: [targets]} of jaxlib's handlers, read from each."""
  from jax_plugin import _myplugin
  versions: dict[str, list[str]] = {}
  for name, fn in sorted(jaxlib_handlers.items()):
    versions.setdefault(_myplugin.handler_ffi_api_version(name, fn), []).append(name)
  return versions


def check_ffi(jaxlib_handlers: dict, engine_description: str, versions: dict[str, str] | None = None) -> None:
  """Raises RuntimeError unless every FFI API version among jaxlib's handlers
  forms a known pair with the engine's (read when myplugin's own handlers
  were registered, just before)."""
  from jax_plugin import _myplugin
  engine = _myplugin.engine_ffi_api_version()
  if engine is None:  # the engine did not show it; C++ has warned
    return
  known = {(h, e): adapted for h, e, adapted, _ in _myplugin.ffi_compatible_pairs()}
  versions = installed_versions() if versions is None else versions
  for handler, names in sorted(ffi_versions(jaxlib_handlers).items()):
    if (handler, engine) not in known:
      pairs = ", ".join(f"{h} on {e}" for h, e in sorted(known))
      raise RuntimeError(
          f"myplugin cannot run jaxlib {versions.get('jaxlib')}'s FFI handlers on its engine: they speak XLA FFI "
          f"API {handler} ({len(names)} targets, e.g. {names[0]}), the engine ({engine_description}) speaks "
          f"{engine}, and no known pair covers it (known, handler on engine: {pairs}). Install a jax and jaxlib "
          f"in {declared_ranges().get('jaxlib', 'the supported range')}, or name an engine that speaks {handler} "
          f"with MYPLUGIN_ENGINE=<path>")


def report() -> dict[str, str | None]:
  """The versions that decide what runs: jax, jaxlib, the XLA FFI API of
  the engine and of myplugin's own handlers (after initialization)."""
  from jax_plugin import _myplugin
  out: dict[str, str | None] = dict(installed_versions())
  out["engine_ffi_api"] = _myplugin.engine_ffi_api_version()
  out["myplugin_ffi_api"] = _myplugin.built_ffi_api_version()
  return out
