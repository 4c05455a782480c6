"""The modules of jax_plugin/ import one another without a circle: each
one's dependencies run one way (the jax client adapter on the runtime, not
the reverse), so a module can be read, and changed, knowing only what is
below it. The graph is built from the sources, function-level imports
included, since those are where a circle hides."""
import ast
from pathlib import Path

import pytest

PACKAGE = "jax_plugin"
SOURCES = Path(__file__).resolve().parents[1] / PACKAGE


def _module_name(path: Path, root: Path) -> str:
  parts = list(path.relative_to(root.parent).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def _modules(root: Path) -> dict[str, Path]:
  return {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
  """The modules of `known` that an import statement inside `module` loads."""
  if isinstance(node, ast.Import):
    return {a.name for a in node.names if a.name in known}
  if not isinstance(node, ast.ImportFrom):
    return set()
  if node.level:
    # Relative: one level is the module's own package.
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    source = ".".join(base + ([node.module] if node.module else []))
  else:
    source = node.module or ""
  found = set()
  for alias in node.names:
    submodule = f"{source}.{alias.name}"
    if submodule in known:
      found.add(submodule)  # `from package import module`
    elif source in known and not (module + ".").startswith(source + "."):
      # `from module import name`. A module's own packages are loaded before
      # it whatever it imports, so naming one (for a compiled submodule
      # such as _myplugin, say) adds no edge.
      found.add(source)
  return found


def import_graph(root: Path) -> dict[str, set[str]]:
  modules = _modules(root)
  known = set(modules)
  graph = {}
  for name, path in modules.items():
    tree = ast.parse(path.read_text(), filename=str(path))
    edges = set()
    for node in ast.walk(tree):
      edges |= _imported(node, name, path.name == "__init__.py", known)
    edges.discard(name)
    graph[name] = edges
  return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """One circle through each strongly connected component that has one
  (Tarjan's algorithm, then a path back to the component's first member)."""
  index, low, on_stack, stack, components = {}, {}, set(), [], []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        components.append(set(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  found = []
  for component in components:
    start = min(component)
    path, seen = [start], {start}
    while True:  # walk inside the component until a step closes the circle
      nxt = sorted(w for w in graph[path[-1]] if w in component)
      if start in nxt:
        break
      step = next(w for w in nxt if w not in seen)
      path.append(step)
      seen.add(step)
    found.append(path + [start])
  return found


def test_jax_plugin_has_no_import_cycle():
  graph = import_graph(SOURCES)
  assert "jax_plugin.distributed" in graph and "jax_plugin.jax_client" in graph
  assert cycles(graph) == [], "import circles: " + "; ".join(" -> ".join(c) for c in cycles(graph))


def test_the_jax_client_adapter_depends_on_the_runtime():
  graph = import_graph(SOURCES)
  assert "jax_plugin.distributed" in graph["jax_plugin.jax_client"]
  assert "jax_plugin.jax_client" not in graph["jax_plugin.distributed"]


@pytest.mark.parametrize("source, circle", [
    ({"a.py": "from pkg import b\n", "b.py": "def f():\n  from pkg import a\n"}, True),
    ({"a.py": "from pkg.b import x\n", "b.py": "def f():\n  from . import c\n", "c.py": "import pkg.a\n"}, True),
    ({"a.py": "from pkg import b\n", "b.py": "from pkg import c\n", "c.py": "import os\n"}, False),
    ({"__init__.py": "def f():\n  from pkg import a\n", "a.py": "X = 1\n"}, False),
    # A compiled submodule has no source: naming it through its package is no edge to the package.
    ({"__init__.py": "from pkg import a\n", "a.py": "from pkg import _compiled\n"}, False),
])
def test_the_check_sees_function_level_and_relative_imports(tmp_path, source, circle):
  root = tmp_path / "pkg"
  root.mkdir()
  (root / "__init__.py").write_text("")
  for name, text in source.items():
    (root / name).write_text(text)
  assert bool(cycles(import_graph(root))) == circle
