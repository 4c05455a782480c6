"""Writes jax_plugin/spmd/collective_table.py: the collectives' custom-call
targets and their attributes, read from the C++ table
(plugin/collectives/collective_table.h) through the installed
_myplugin.collective_table(). The rewrite imports the module rather than
_myplugin because it also runs where no built module is: the Atheris
fuzzer (ci/fuzz.sh) imports the checkout's jax_plugin/.

  python ci/gen_collective_table.py           # rewrite the module
  python ci/gen_collective_table.py --check   # exit 1 if the module is stale

Run it with the Python where myplugin is installed. tests/test_collective_table.py
runs the same check.
"""
from __future__ import annotations

import argparse
import os
import sys

MODULE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jax_plugin", "spmd",
                      "collective_table.py")

_HEAD = '''# Written by ci/gen_collective_table.py from _myplugin.collective_table();
# edit plugin/collectives/collective_table.h and rerun it, not this file.
"""The collectives' custom-call targets, as the C++ table that binds and
registers their handlers defines them: the names and attribute keys the
rewrite emits. Attribute types: str (a quoted string), i64 (`N : i64`),
i64[] (`dense<[...]> : tensor<Nxi64>`). Operands: any_number (one or more
data operands), one, none, ragged (a ragged all-to-all's six: the output
it updates, the data, input offsets, send sizes, the senders' (output
offset, size) pairs, recv sizes); every form with data also takes operands
after it that it does not read (they order the call). Results:
one_per_operand, one, aliased (the first operand, in place)."""
from __future__ import annotations

from typing import NamedTuple


class Attribute(NamedTuple):
  key: str
  type: str


class Target(NamedTuple):
  name: str
  replaces: str  # the HLO instruction the rewrite turns into this call; "" for none
  operands: str
  results: str
  attributes: tuple[Attribute, ...]
  engines: tuple[str, ...]  # the engines with a handler for it


'''


def _tuple(items: list[str]) -> str:
  return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _str(text: str) -> str:
  return '"' + text + '"'  # the table's names are words: nothing to escape


def render(table: dict) -> str:
  lines = [_HEAD]
  for ident, a in table["attributes"].items():
    lines.append(f"{ident} = Attribute({_str(a['key'])}, {_str(a['type'])})\n")
  lines.append("\n")
  for t in table["targets"]:
    lines.append(f"{t['id']} = Target({_str(t['name'])}, {_str(t['replaces'])}, {_str(t['operands'])}, "
                 f"{_str(t['results'])},\n{' ' * (len(t['id']) + 10)}{_tuple(t['attributes'])}, "
                 f"{_tuple([_str(e) for e in t['engines']])})\n")
  lines.append("\nTARGETS = (\n" + "".join(f"    {t['id']},\n" for t in table["targets"]) + ")\n")
  lines.append("\n# The names the reduction attribute takes.\n")
  lines.append(f"REDUCTIONS = {_tuple([_str(r) for r in table['reductions']])}\n")
  return "".join(lines)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--check", action="store_true", help="exit 1 if the module is not the one this writes")
  args = parser.parse_args()
  from jax_plugin import _myplugin
  text = render(_myplugin.collective_table())
  if args.check:
    with open(MODULE) as f:
      if f.read() != text:
        print(f"{MODULE} is stale: run python ci/gen_collective_table.py", file=sys.stderr)
        return 1
    return 0
  with open(MODULE, "w") as f:
    f.write(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
