"""The HLO rewrite of the multi-process compile, on hand-written modules:
replica-group forms, collective modes, device ids, transposes, the order
chain, and what it refuses. Every rewritten module must parse with jaxlib's
own HLO parser."""
import re

import numpy as np

import pytest

from jax_plugin.spmd import replica_groups as rg
from jax_plugin.spmd.hlo_text import HloTextError, matching, parse_instruction, split_top_level
from jax_plugin.spmd.rewrite import UnsupportedProgram, rewrite_module

ADD = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""
MAX = ADD.replace("%add ", "%max ").replace("add(%a, %b)", "maximum(%a, %b)")


def module(body: str, params="p: f32[4,2]", comps=ADD, header="num_partitions=8") -> str:
  return f"HloModule m, {header}\n\n{comps}\nENTRY %main {{\n{body}\n}}\n"


def parses(text: str) -> None:
  from jax._src.lib import hlo
  hlo.hlo_module_from_text(text)


def entry_lines(text: str) -> list[str]:
  lines = text.splitlines()
  return [l.strip() for l in lines[next(i for i, l in enumerate(lines) if l.startswith("ENTRY")) + 1:]]


def attr_ids(line: str, name: str) -> list[int]:
  m = re.search(name + r" = dense<\[([0-9, -]*)\]>", line)
  assert m, line
  return [int(v) for v in m.group(1).split(",")]


def test_replica_group_forms():
  assert rg.parse("{}") is None
  assert rg.parse("{{0,1},{2,3}}") == [[0, 1], [2, 3]]
  assert rg.parse("[2,4]<=[8]") == [[0, 1, 2, 3], [4, 5, 6, 7]]
  assert rg.parse("[4,2]<=[2,4]T(1,0)") == [[0, 4], [1, 5], [2, 6], [3, 7]]
  assert rg.parse("mesh['x'=2,'y'=4] {'x'}") == [[0, 4], [1, 5], [2, 6], [3, 7]]
  assert rg.parse("mesh['x'=2,'y'=4] {'y'}") == [[0, 1, 2, 3], [4, 5, 6, 7]]
  assert rg.parse("mesh['x'=2,'y'=2,'z'=2] {'z','x'}") == [[0, 4, 1, 5], [2, 6, 3, 7]]
  assert rg.parse_pairs("{{0,1},{1,0}}") == [(0, 1), (1, 0)]
  with pytest.raises(HloTextError):
    rg.parse("[2,4]<=garbage")
  with pytest.raises(HloTextError):
    rg.parse("mesh['x'=2] {'q'}")


def test_instruction_lines():
  inst = parse_instruction('  ROOT %t = (f32[2]{0}, s32[]) tuple(%a, %b), metadata={op_name="x, y"}')
  assert (inst.root, inst.name, inst.opcode, inst.operands) == (True, "%t", "tuple", ["%a", "%b"])
  assert inst.attr("metadata") == '{op_name="x, y"}'
  const = parse_instruction("  %c = s32[3]{0} constant({1, 2, 3})")
  assert const.operands == ["{1, 2, 3}"]
  assert parse_instruction("HloModule m, num_partitions=8") is None


def test_every_collective_names_its_module_as_function():
  """The module's name (jax's name for the jitted function) reaches every
  collective as `function`, for the flight recorder; a name with characters
  outside [A-Za-z0-9_.-] is made safe, and the module still parses."""
  body = ("  %p = f32[4,2]{1,0} parameter(0)\n"
          "  %r = f32[4,2]{1,0} all-reduce(%p), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, "
          "use_global_device_ids=true, to_apply=%add\n"
          "  ROOT %g = f32[4,16]{1,0} all-gather(%r), channel_id=2, replica_groups={{0,1,2,3,4,5,6,7}}, "
          "dimensions={1}, use_global_device_ids=true")
  for name, want in [("jit_train_step", "jit_train_step"), ("pmap_step.3", "pmap_step.3")]:
    out = rewrite_module(module(body).replace("HloModule m,", f"HloModule {name},"), [list(range(8))], 8)
    parses(out)
    calls = [l for l in out.splitlines() if "custom_call_target=\"myplugin_all" in l]
    assert len(calls) == 2 and all(f'function = "{want}"' in l for l in calls), out
  out = rewrite_module(module(body).replace("HloModule m,", 'HloModule "we\\ird",'), [list(range(8))], 8)
  calls = [l for l in out.splitlines() if "custom_call_target=\"myplugin_all" in l]
  assert all('function = "_we_ird_"' in l for l in calls), out


def test_a_reduction_body_seen_through_its_copies():
  """A partly manual shard_map's psum has a sharding constraint in its body,
  which partitioning leaves as a copy of the sum (and of an operand): still a sum."""
  body = ADD.replace("%add ", "%add_copied ").replace(
      "  ROOT %s = f32[] add(%a, %b)", "  %ca = f32[] copy(%a)\n  %s = f32[] add(%ca, %b)\n  ROOT %c = f32[] copy(%s)")
  text = module("  %p = f32[4,2]{1,0} parameter(0), sharding={devices=[2,4]<=[8]}\n"
                "  ROOT %r = f32[4,2]{1,0} all-reduce(%p), channel_id=1, replica_groups=[2,4]<=[8], "
                "use_global_device_ids=true, to_apply=%add_copied", comps=body)
  out = rewrite_module(text, [list(range(8))], 8)
  parses(out)
  line = next(l for l in out.splitlines() if "custom-call" in l)
  assert 'custom_call_target="myplugin_all_reduce"' in line and 'reduction = "sum"' in line


def test_all_reduce_in_flattened_ids_maps_through_the_assignment():
  text = module("  %p = f32[4,2]{1,0} parameter(0), sharding={devices=[2,4]<=[8]}\n"
                "  ROOT %r = f32[4,2]{1,0} all-reduce(%p), channel_id=1, replica_groups=[2,4]<=[8], "
                "use_global_device_ids=true, to_apply=%max", comps=MAX)
  assignment = [[3, 2, 1, 0, 7, 6, 5, 4]]  # one replica, 8 partitions, devices in another order
  out = rewrite_module(text, assignment, 8)
  parses(out)
  line = next(l for l in out.splitlines() if "custom-call" in l)
  assert 'custom_call_target="myplugin_all_reduce"' in line and 'reduction = "max"' in line
  assert attr_ids(line, "replica_groups") == [3, 2, 1, 0, 7, 6, 5, 4]
  assert "group_size = 4 : i64" in line
  assert "sharding=" not in out and "num_partitions" not in out


@pytest.mark.parametrize("char", ["\x0c", "\x1c", "\x1e", "\x85", "\u2028"])
def test_a_line_ends_only_at_a_newline(char):
  """Characters that str.splitlines takes for line ends, inside a string
  attribute (the fuzzer's find: a form feed in metadata), stay in their
  line: the rewritten module parses, its collective rewritten."""
  text = module("  %p = f32[4,2]{1,0} parameter(0)\n"
                f'  %n = f32[4,2]{{1,0}} negate(%p), metadata={{op_name="p{char}sum"}}\n'
                "  ROOT %r = f32[4,2]{1,0} all-reduce(%n), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, "
                "use_global_device_ids=true, to_apply=%add")
  parses(text)
  out = rewrite_module(text, [list(range(8))], 8)
  parses(out)
  assert f'op_name="p{char}sum"' in out and 'custom_call_target="myplugin_all_reduce"' in out


def _module_with_negate_metadata(metadata: str) -> str:
  """An all-reduce of a negate whose metadata is `metadata`."""
  return module("  %p = f32[4,2]{1,0} parameter(0)\n"
                f"  %n = f32[4,2]{{1,0}} negate(%p), metadata={metadata}\n"
                "  ROOT %r = f32[4,2]{1,0} all-reduce(%n), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, "
                "use_global_device_ids=true, to_apply=%add")


def _refused_though_jaxlib_parses(text: str, why: str) -> None:
  parses(text)
  with pytest.raises(HloTextError, match=why):
    rewrite_module(text, [list(range(8))], 8)


def test_a_string_that_spans_lines_is_refused():
  """jaxlib's lexer lets a string run over a newline (XLA never prints one:
  it escapes it); the rewrite, which reads an instruction per line, refuses
  such a module instead of rewriting the first line and leaving the rest
  (the fuzzer's find: the rewritten module did not parse)."""
  text = _module_with_negate_metadata('{op_name="two\nlines"}')
  _refused_though_jaxlib_parses(text, "a string that does not end on its line")
  # Escaped, as XLA writes it, it is one line like any other.
  rewrite_module(text.replace("two\nlines", "two\\nlines"), [list(range(8))], 8)


def test_an_instruction_whose_brackets_close_on_a_later_line_is_refused():
  """jaxlib also reads an attribute whose braces close on the next line; the
  rewrite refuses such a module (the fuzzer's find: it left the rest of the
  instruction behind, and an order fence in the entry named a value of
  another computation)."""
  _refused_though_jaxlib_parses(_module_with_negate_metadata('{op_name="n"\n}'),
                                "an instruction that does not end on its line")


def test_tuple_element_operands_in_the_shorthand_of_newer_xla():
  # jaxlib 0.11's XLA prints an element of a tuple as `%value#index`, with no
  # get-tuple-element instruction (seen in a while body that communicates).
  text = module("  %p = (s32[], (f32[2], f32[4,2]{1,0})) parameter(0)\n"
                "  ROOT %r = f32[4,2]{1,0} all-reduce(%p#1#1), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, "
                "use_global_device_ids=true, to_apply=%add")
  out = rewrite_module(text, [list(range(8))], 8)
  line = next(l for l in out.splitlines() if "custom-call" in l)
  assert 'custom_call_target="myplugin_all_reduce"' in line and "custom-call(%p#1#1" in line
  assert "operand_layout_constraints={f32[4,2]{1,0}}" in line
  try:
    parses(text)
  except Exception:
    return  # this jaxlib's parser predates the shorthand: the rewrite is all there is to check
  parses(out)


def test_cross_replica_groups_of_a_pmap():
  text = module("  %p = f32[4]{0} parameter(0)\n"
                "  ROOT %r = f32[4]{0} all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=%add",
                params="p: f32[4]", header="replica_count=4")
  out = rewrite_module(text, [[10], [11], [12], [13]], 16)
  parses(out)
  line = next(l for l in out.splitlines() if "custom-call" in l)
  assert attr_ids(line, "replica_groups") == [10, 11, 12, 13] and "group_size = 2 : i64" in line


def test_gather_along_a_later_dimension_is_transposed_there_and_back():
  text = module("  %p = f32[4,2]{1,0} parameter(0)\n"
                "  ROOT %g = f32[4,8]{1,0} all-gather(%p), channel_id=1, replica_groups=[2,4]<=[8], "
                "dimensions={1}, use_global_device_ids=true")
  out = rewrite_module(text, [list(range(8))], 8)
  parses(out)
  lines = [l for l in entry_lines(out) if "myplugin" in l or "ROOT" in l]
  assert "transpose(%p), dimensions={1,0}" in lines[0]
  assert lines[1].split(" = ")[1].startswith("f32[8,4]{1,0} custom-call")
  assert lines[2].startswith("ROOT %g = f32[4,8]{1,0} transpose(") and lines[2].endswith("dimensions={1,0}")


def test_collectives_are_chained_in_program_order():
  text = module("  %p = f32[4]{0} parameter(0)\n"
                "  %a = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups={}, use_global_device_ids=true, "
                "to_apply=%add\n"
                "  %q = f32[4]{0} negate(%p)\n"
                "  ROOT %b = f32[4]{0} all-reduce(%q), channel_id=2, replica_groups={}, use_global_device_ids=true, "
                "to_apply=%add", params="p: f32[4]")
  out = rewrite_module(text, [list(range(8))], 8)
  parses(out)
  b = next(l for l in entry_lines(out) if l.startswith("ROOT"))
  assert "custom-call(%q, %a)" in b  # b also reads a's result: it runs after a


def test_partition_and_replica_ids_look_up_the_local_replica():
  """The local program's replica r runs global device local_order[r]: the
  global program's ids come from a table indexed by the local replica id."""
  text = module("  %p = f32[] parameter(0)\n  ROOT %i = u32[] partition-id()", params="p: f32[]")
  out = rewrite_module(text, [[5, 4, 7, 6]], 8, local_order=[7, 6])
  parses(out)
  lines = entry_lines(out)
  assert any("replica-id()" in l for l in lines)
  assert any("u32[2]{0} constant({2, 3})" in l for l in lines), out
  assert lines[-2].startswith("ROOT %i = u32[] reshape(")
  pmap = module("  %p = f32[] parameter(0)\n  ROOT %i = u32[] replica-id()", params="p: f32[]")
  out = rewrite_module(pmap, [[3], [2], [1], [0]], 4, local_order=[1, 0])
  parses(out)
  assert any("u32[2]{0} constant({2, 3})" in l for l in entry_lines(out)), out


@pytest.mark.parametrize("body,what", [
    ("  ROOT %r = f32[4]{0} collective-broadcast(%p), replica_groups={}", "collective-broadcast"),
    ("  ROOT %r = (f32[4]{0}, f32[4]{0}) all-to-all(%p, %p), channel_id=1, replica_groups={{0,1}}", "tuple form"),
    ("  ROOT %r = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups={}, use_global_device_ids=true, "
     "to_apply=%sub", "its root: subtract"),
    ("  ROOT %r = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups={}, use_global_device_ids=true, "
     "to_apply=%twice", "its root: add"),
    ("  ROOT %r = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups={}, use_global_device_ids=true, "
     "to_apply=%plus1", "its root: add"),
    ("  ROOT %r = f32[<=4]{0} all-reduce(%p), channel_id=1, replica_groups={}, use_global_device_ids=true, "
     "to_apply=%add", "not dynamic or nested shapes"),
])
def test_what_cannot_run_across_processes_is_refused(body, what):
  sub = ADD.replace("%add ", "%sub ").replace("add(%a, %b)", "subtract(%a, %b)")
  # Not reductions of the two operands: a + a, and a + 1 (with b unused).
  twice = ADD.replace("%add ", "%twice ").replace("add(%a, %b)", "add(%a, %a)")
  plus1 = ADD.replace("%add ", "%plus1 ").replace(
      "  ROOT %s = f32[] add(%a, %b)", "  %one = f32[] constant(1)\n  ROOT %s = f32[] add(%a, %one)")
  text = module("  %p = f32[4]{0} parameter(0)\n" + body, params="p: f32[4]", comps=ADD + sub + twice + plus1)
  with pytest.raises(UnsupportedProgram, match=what):
    rewrite_module(text, [[0, 1]], 2)


# -- every replica-group form the engine's XLA prints ---------------------
#
# The expected groups are enumerated device by device from mesh coordinates
# (no reshapes): a device's coordinate on a sub-axis (pre)size of an axis of
# size S is (c // (S // (pre * size))) % size; devices that agree on every
# coordinate not named form a group, ordered by the named coordinates (the
# first named the slowest); groups come in row-major order of the rest.


def mesh_groups(sizes, refs, device_ids=None):
  """refs: (axis, None) for a whole axis, (axis, (pre, size)) for a sub-axis."""
  import itertools
  ids = list(range(int(np.prod(sizes)))) if device_ids is None else list(device_ids)
  coords = list(itertools.product(*[range(s) for s in sizes]))  # row-major, like the ids

  def digit(c, ref):
    axis, sub = ref
    if sub is None:
      return c[axis]
    pre, size = sub
    return (c[axis] // (sizes[axis] // (pre * size))) % size

  def rest(c):
    """The coordinate with every named part taken out, as a row-major key."""
    key = []
    for axis, s in enumerate(sizes):
      named = [sub for a, sub in refs if a == axis]
      if not named:
        key.append(c[axis])
      elif None not in named:
        # The factors of the axis that no sub-axis names, major to minor.
        taken, v = sorted(named), c[axis]
        prefix = 1
        for pre, size in taken:
          key.append((v // (s // pre)) % (pre // prefix))
          prefix = pre * size
        key.append(v % (s // prefix))
    return tuple(key)

  groups = {}
  for c, d in zip(coords, ids):
    groups.setdefault(rest(c), []).append((tuple(digit(c, r) for r in refs), d))
  return [[d for _, d in sorted(g)] for _, g in sorted(groups.items())]


@pytest.mark.parametrize("text,sizes,refs,ids", [
    # forms dumped from resharding programs on the engine (8 devices)
    ("mesh['axis_0'=2,'axis_1'=4] {'axis_0'}", [2, 4], [(0, None)], None),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_1'}", [4, 2], [(1, None)], None),
    ("mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], device_ids=(0,2,4,6,1,3,5,7) {'axis_2'}", [4, 1, 2], [(2, None)],
     [0, 2, 4, 6, 1, 3, 5, 7]),
    ("mesh['axis_0'=8,'axis_1'=1], device_ids=(7,6,5,4,3,2,1,0) {'axis_0'}", [8, 1], [(0, None)],
     [7, 6, 5, 4, 3, 2, 1, 0]),
    ("mesh['axis_0'=1,'axis_1'=8], device_ids=(0,2,4,6,1,3,5,7) {'axis_1'}", [1, 8], [(1, None)],
     [0, 2, 4, 6, 1, 3, 5, 7]),
    ("mesh['axis_0'=2,'axis_1'=4,'axis_2'=1], device_ids=(7,3,5,1,6,2,4,0) {'axis_1'}", [2, 4, 1], [(1, None)],
     [7, 3, 5, 1, 6, 2, 4, 0]),
    ("mesh['axis_0'=2,'axis_1'=4] {'axis_1':(2)2}", [2, 4], [(1, (2, 2))], None),
    ("mesh['axis_0'=2,'axis_1'=4], device_ids=(0,1,4,5,2,3,6,7) {'axis_1':(2)2}", [2, 4], [(1, (2, 2))],
     [0, 1, 4, 5, 2, 3, 6, 7]),
    ("mesh['axis_0'=4,'axis_1'=2], device_ids=(0,4,2,6,1,5,3,7) {'axis_0':(2)2}", [4, 2], [(0, (2, 2))],
     [0, 4, 2, 6, 1, 5, 3, 7]),
    # what the printer can also write: several axes in any order, sub-axes
    # at every position and together, bare names, ids as an iota, no axis
    ("mesh['x'=2,'y'=2,'z'=2] {'z','x'}", [2, 2, 2], [(2, None), (0, None)], None),
    ("mesh['a'=8] {'a':(1)2}", [8], [(0, (1, 2))], None),
    ("mesh['a'=8] {'a':(4)2}", [8], [(0, (4, 2))], None),
    ("mesh['a'=8] {'a':(4)2,'a':(1)2}", [8], [(0, (4, 2)), (0, (1, 2))], None),
    ("mesh['a'=16,'b'=2] {'b','a':(2)4}", [16, 2], [(1, None), (0, (2, 4))], None),
    ("mesh[a=4,b=2] {b}", [4, 2], [(1, None)], None),
    ("mesh['a'=4,'b'=2], device_ids=([4,2]<=[2,4]T(1,0)) {'a'}", [4, 2], [(0, None)], [0, 4, 1, 5, 2, 6, 3, 7]),
    ("mesh['a'=4,'b'=2] {}", [4, 2], [], None),
])
def test_mesh_axes_forms(text, sizes, refs, ids):
  assert rg.parse(text) == mesh_groups(sizes, refs, ids)


def test_mesh_groups_reference_on_known_values():
  """The enumeration above, against groups worked out by hand."""
  assert mesh_groups([2, 4], [(0, None)]) == [[0, 4], [1, 5], [2, 6], [3, 7]]
  assert mesh_groups([8], [(0, (2, 2))]) == [[0, 2], [1, 3], [4, 6], [5, 7]]
  assert mesh_groups([8], [(0, (4, 2)), (0, (1, 2))]) == [[0, 4, 1, 5], [2, 6, 3, 7]]
  assert mesh_groups([4, 2], [(1, None)], [0, 4, 2, 6, 1, 5, 3, 7]) == [[0, 4], [2, 6], [1, 5], [3, 7]]


@pytest.mark.parametrize("text,groups", [
    ("{}", None),
    ("{{0,1,2,3,4,5,6,7}}", [list(range(8))]),
    ("{{0},{1},{2},{3}}", [[0], [1], [2], [3]]),
    ("{{3,1},{2,0}}", [[3, 1], [2, 0]]),
    ("[1,8]<=[8]", [list(range(8))]),
    ("[8,1]<=[8]", [[i] for i in range(8)]),
    ("[2,4]<=[4,2]T(1,0)", [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("[4,2]<=[2,2,2]T(2,1,0)", [[0, 4], [2, 6], [1, 5], [3, 7]]),
    ("[2,4]<=[2,2,2]T(1,0,2)", [[0, 1, 4, 5], [2, 3, 6, 7]]),
    ("maximal_mesh[device_id=3] {}", [[3]]),
])
def test_explicit_and_iota_forms(text, groups):
  """Iota lists worked out by hand: [2,4]<=[2,2,2]T(1,0,2) is the ids
  0..7 as a 2x2x2 block, its first two axes swapped, read in rows of 4."""
  assert rg.parse(text) == groups


@pytest.mark.parametrize("text,what", [
    ("[2,4]<=garbage", "does not know"),
    ("[3,4]<=[8]", "does not hold"),
    ("[2,4]<=[2,4]T(0,0)", "not a permutation"),
    ("mesh['x'=2] {'q'}", "not an axis"),
    ("mesh['x'=2,'y'=2], device_ids=(0,1,1,3) {'x'}", "not a permutation"),
    ("mesh['a'=8] {'a':(2)4,'a':(4)2}", "overlap"),
    ("mesh['a'=8] {'a','a':(2)2}", "named whole and again"),
    ("{{0,1},{2,x}}", "cannot read the group"),
])
def test_unreadable_forms_are_unsupported(text, what):
  with pytest.raises(UnsupportedProgram, match=re.escape(what)):
    rg.parse(text)


def test_mesh_form_with_device_ids_in_an_instruction():
  """The device ids follow a comma of their own: the instruction still
  reads them as part of replica_groups, and the rewrite maps them."""
  text = module("  %p = f32[4,2]{1,0} parameter(0)\n"
                "  ROOT %r = f32[4,2]{1,0} all-reduce(%p), channel_id=1, "
                "replica_groups=mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], device_ids=(0,2,4,6,1,3,5,7) {'axis_2'}, "
                "use_global_device_ids=true, to_apply=%add")
  inst = parse_instruction(text.splitlines()[-2])
  assert inst.attr("replica_groups").endswith("device_ids=(0,2,4,6,1,3,5,7) {'axis_2'}")
  out = rewrite_module(text, [[10, 11, 12, 13, 14, 15, 16, 17]], 18)
  parses(out)
  line = next(l for l in out.splitlines() if "custom-call" in l)
  assert attr_ids(line, "replica_groups") == [10, 12, 14, 16, 11, 13, 15, 17] and "group_size = 2 : i64" in line


def test_groups_that_name_missing_or_repeated_ids_are_refused():
  for groups in ("{{0,1},{2,9}}", "{{0,1},{1,2}}"):
    text = module("  %p = f32[4]{0} parameter(0)\n"
                  f"  ROOT %r = f32[4]{{0}} all-reduce(%p), channel_id=1, replica_groups={groups}, "
                  "use_global_device_ids=true, to_apply=%add", params="p: f32[4]")
    with pytest.raises(UnsupportedProgram, match=r"outside 0\.\.7 \(the flattened ids of this program\) or one"):
      rewrite_module(text, [list(range(8))], 8)
def test_tuple_element_operand_of_a_collective():
  """Newer XLA prints a one-result custom call's output used directly as
  `%t#0` (a pure_callback before a psum): the collective's operand shape is
  that tuple element."""
  text = module("""  %p = f32[4,2]{1,0} parameter(0)
  %cb = (f32[4,2]{1,0}) custom-call(%p), custom_call_target="xla_ffi_python_cpu_callback", api_version=API_VERSION_TYPED_FFI, backend_config={callback_id = 1 : ui64}
  ROOT %r = f32[4,2]{1,0} all-reduce(%cb#0), channel_id=1, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%add""")
  out = rewrite_module(text, [list(range(8))], 8)
  lines = entry_lines(out)
  assert any("xla_ffi_python_cpu_callback" in l and "callback_id = 1" in l for l in lines)
  call = next(l for l in lines if "myplugin_all_reduce" in l)
  assert "custom-call(%cb#0)" in call and "operand_layout_constraints={f32[4,2]{1,0}}" in call


# Findings of fuzz/hlo_rewrite_fuzzer.py (mutated partitioned modules): each
# ended in an IndexError, ValueError, AttributeError, MemoryError,
# ZeroDivisionError or OverflowError, or in text that jaxlib cannot parse or
# that names devices the job lacks. Each is now a refusal of the rewrite's own.
_P = "  %p = f32[4,2]{1,0} parameter(0)\n"
_GATHER = "  ROOT %g = f32[4,16]{1,0} all-gather(%p), channel_id=1, replica_groups=[1,8]<=[8], use_global_device_ids=true, "
_REDUCE = "  ROOT %r = f32[4,2]{1,0} all-reduce(%p), channel_id=1, use_global_device_ids=true, to_apply=%add, replica_groups="


@pytest.mark.parametrize("body, header, what", [
    (_P + _GATHER + "dimensions={1}x", "num_partitions=8", r"dimensions=\{1\}x is not one dimension"),
    (_P + _GATHER + "dimensions={\u00b9}", "num_partitions=8", "is not one dimension"),  # int() reads no '¹'
    (_P + _GATHER + "dimensions={5}", "num_partitions=8", "along dimension 5 of f32"),
    (_P + "  ROOT %r = f32[4,2]{1,0} all-reduce(), channel_id=1, replica_groups=[1,8]<=[8], "
     "use_global_device_ids=true, to_apply=%add",
     "num_partitions=8", "has 0 operands"),
    (_P + "  ROOT %r = (f32[4,2]{1,0}, f32[4,2]{1,0}) all-reduce(%p), channel_id=1, replica_groups=[1,8]<=[8], "
     "use_global_device_ids=true, to_apply=%add", "num_partitions=8", "has 1 operands and a result of"),
    (_P + "  ROOT %r = (f32[4,2]{1,0}) all-to-all(%p), channel_id=1, replica_groups=[1,8]<=[8], dimensions={0}",
     "num_partitions=8", r"has a result of \(f32\[4,2\]\{1,0\}\), not an array"),
    (_P + "  ROOT %r = f32[4,2]{1,0} collective-permute(%p), channel_id=1, source_target_pairs={{0,9},{1,0}}",
     "num_partitions=8", r"names an id outside 0\.\.7"),
    (_P + "  ROOT %r = f32[4,2]{1,0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{2,1}}",
     "num_partitions=8", "a source or target twice"),
    ("  ROOT %i = s32[] partition-id()", "num_partitions=8", "XLA's partition-id is u32"),
    (_P + _REDUCE + "[100000,100000]<=[100000,100000]", "num_partitions=8", "more than 65536 ids"),
    (_P + _REDUCE + "mesh['a'=8] {'a':(0)2}", "num_partitions=8", "has a size of 0"),
    (_P + _REDUCE + "mesh['a'=2], device_ids=(99999999999999999999999,0) {'a'}", "num_partitions=8",
     "is not a permutation of the mesh's 2 devices"),
    (_P + "  ROOT %r = f32[4,2]{1,0} all-reduce(%p), replica_groups={{}}, to_apply=%add", "replica_count=8",
     "replica groups that are empty"),
    ("  %p = f32[" + "9" * 5000 + "]{0} parameter(0)\n  ROOT %r = f32[4,2]{1,0} all-reduce(%p), replica_groups={}, "
     "to_apply=%add", "replica_count=8", "an operand that is not an array"),
], ids=["dimensions-garbage", "dimensions-unicode-digit", "dimension-past-rank", "no-operand", "tuple-for-one-operand",
        "all-to-all-tuple", "permute-outside-device-group", "permute-target-twice", "partition-id-s32", "iota-too-many",
        "mesh-sub-axis-0", "mesh-id-past-int64", "empty-group", "5000-digit-dimension"])
def test_mutated_modules_are_refused_with_the_rewrites_error(body, header, what):
  text = module(body, header=header)
  assignment = [list(range(8))] if "num_partitions" in header else [[d] for d in range(8)]
  for runtime_device_ids in (False, True):
    with pytest.raises(UnsupportedProgram, match=what):
      rewrite_module(text, assignment, 8, runtime_device_ids=runtime_device_ids)


def test_new_names_are_fresh_and_never_a_tuple_element():
  """A fence before a loop whose first operand is a tuple element `%t#0`
  took the name `%t#0.myplugin.N` (not a name jaxlib reads); and a new name
  must not be one the module already has."""
  loop = """%cond (c: f32[4,2]) -> pred[] {
  %c = f32[4,2]{1,0} parameter(0)
  ROOT %f = pred[] constant(false)
}
%body (b: f32[4,2]) -> f32[4,2] {
  %b = f32[4,2]{1,0} parameter(0)
  ROOT %s = f32[4,2]{1,0} all-reduce(%b), channel_id=2, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%add
}
"""
  text = module(_P + "  %p.myplugin.1 = f32[4,2]{1,0} copy(%p)\n"
                "  %r = f32[4,2]{1,0} all-reduce(%p.myplugin.1), channel_id=1, replica_groups=[1,8]<=[8], "
                "use_global_device_ids=true, to_apply=%add\n"
                "  %t = (f32[4,2]{1,0}) tuple(%r)\n"
                "  ROOT %w = f32[4,2]{1,0} while(%t#0), condition=%cond, body=%body", comps=ADD + loop)
  out = rewrite_module(text, [list(range(8))], 8)
  names = [l.split("=")[0].replace("ROOT", "").strip() for l in entry_lines(out) if " = " in l]
  assert not any("#" in n for n in names), names
  assert len(names) == len(set(names)), names
  fence = next(l for l in entry_lines(out) if "myplugin_order_fence" in l)
  assert "custom-call(%t#0, %r)" in fence
  try:
    parses(text)
  except Exception:
    return  # this jaxlib's parser predates the `#index` shorthand
  parses(out)


def test_top_level_split_and_brackets_skip_string_literals():
  # Commas and brackets inside a string (with escaped quotes, or one left
  # open to the end) neither split nor close; a backslash outside a string
  # is an ordinary character.
  assert split_top_level('a, "b,\\" c", d') == ["a", '"b,\\" c"', "d"]
  assert split_top_level('f(x, "y)"), g') == ['f(x, "y)")', "g"]
  assert split_top_level('a, "b, c') == ["a", '"b, c']
  assert split_top_level('a, "b\\') == ["a", '"b\\']
  assert split_top_level("x\\, y") == ["x\\", "y"]
  assert split_top_level("a,,b, ") == ["a", "", "b"]
  assert matching('(a, "(", b) c', 0) == 11
  assert matching('[x{"]"}] y', 0) == 8
  with pytest.raises(HloTextError, match="unbalanced"):
    matching('(a, ")"', 0)


def test_a_cached_instruction_is_a_fresh_copy():
  # The rewrite edits parsed instructions in place; the same line read
  # again must come back as written.
  line = "  %s = f32[4]{0} all-reduce(%p), channel_id=1, to_apply=%add"
  first = parse_instruction(line)
  first.operands[0] = "%other"
  first.attrs.append("x=1")
  again = parse_instruction(line)
  assert again.operands == ["%p"] and again.attrs == ["channel_id=1", "to_apply=%add"]
  assert again.line() == line


def test_the_stop_mark_goes_first_into_a_portable_artifact_and_only_there():
  """The shadow's stop mark: placed, with its one-device sharding, first in
  main of a StableHLO portable artifact (the form jaxlib hands a plugin);
  anything else is left alone (the shadow then compiles in full)."""
  import jax
  import jax.numpy as jnp
  from jax._src.interpreters import mlir
  from jax._src.lib import xla_client as xc
  from jax_plugin.spmd import compile_hooks

  assert compile_hooks._with_stop_mark(b"not a portable artifact", True) is None
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  on_mesh = NamedSharding(Mesh(np.array(jax.devices()[:1]), ("d",)), P("d"))
  lowered = jax.jit(lambda v: jnp.sin(v) + 1, in_shardings=on_mesh).lower(jnp.ones((4,), jnp.float32))
  from jax._src.lib.mlir.dialects import hlo as stablehlo
  version = stablehlo.get_current_version()  # as jaxlib writes it for a plugin
  with mlir.make_ir_context():
    module = jax._src.lib.mlir.ir.Module.parse(lowered.as_text())
    # mixed: Shardy's dialect kept, as jaxlib writes a program for a plugin
    artifact = xc._xla.mlir.serialize_portable_artifact(module, version, use_mixed_serialization=True)
  for shardy in (True, False):
    marked = compile_hooks._with_stop_mark(artifact, shardy)
    assert marked is not None and marked.startswith(f"StableHLO_v{version}\x00".encode(), 5)
    with mlir.make_ir_context():
      text = str(xc._xla.mlir.deserialize_portable_artifact(marked))
    main = text.index("func.func public @main")
    mark = text.index("stablehlo.custom_call @xla_ffi_python_cpu_callback()")
    assert main < mark < text.index("stablehlo.sine"), text
    assert 'myplugin_shadow_stop = ""' in text, text
    if shardy:  # in the dialect's own form, as it came (not as frontend attributes)
      assert "sdy.sharding = #sdy.sharding_per_value<[<@myplugin_shadow_stop_mesh, []>]>" in text, text
      assert "sdy.mesh @myplugin_shadow_stop_mesh = <[], device_ids=[0]>" in text and "xla.sdy" not in text, text
    else:
      assert 'mhlo.sharding = "{maximal device=0}"' in text and "myplugin_shadow_stop_mesh" not in text, text


def test_the_stop_mark_becomes_an_empty_tuple():
  """After partitioning the mark sits in a conditional on the partition id;
  the local program gets an empty tuple in its place, and nothing else changes."""
  from jax_plugin.spmd import compile_hooks
  true_branch = ("%true_computation (p: ()) -> () {\n  %p = () parameter(0)\n"
                 '  ROOT %custom-call.2 = () custom-call(), custom_call_target="xla_ffi_python_cpu_callback", '
                 'custom_call_has_side_effect=true, frontend_attributes={myplugin_shadow_stop=""}\n}\n')
  other = '  %cc = f32[4] custom-call(%p), custom_call_target="mine", frontend_attributes={x="1"}\n'
  around = ('  %t = () tuple(), frontend_attributes={myplugin_shadow_stop=""}, metadata={op_name="c"}\n'
            '  %u = () tuple(), frontend_attributes={a="1",myplugin_shadow_stop=""}\n'
            '  %v = () tuple(), frontend_attributes={myplugin_shadow_stop="",b="2"}\n')
  text, count = compile_hooks._without_stop_mark(true_branch + other + around)
  assert count == 1
  assert text == ("%true_computation (p: ()) -> () {\n  %p = () parameter(0)\n  ROOT %custom-call.2 = () tuple()\n}\n"
                  + other + '  %t = () tuple(), metadata={op_name="c"}\n  %u = () tuple(), frontend_attributes={a="1"}\n'
                  '  %v = () tuple(), frontend_attributes={b="2"}\n')


def test_a_shadow_that_ended_inside_the_partitioner_is_never_read_as_partitioned(tmp_path):
  """A stopped shadow that failed in the partitioner itself (not at the
  mark) leaves no module after partitioning: its module before
  optimizations is the whole program, which must never be taken for this
  process's part. A program of replicas only (pmap) is never partitioned:
  its module before optimizations is the one."""
  from jax_plugin.spmd import compile_hooks
  before = tmp_path / "module_0001.jit_f.before_optimizations.txt"
  before.write_text("HloModule jit_f, num_partitions=4\n\nENTRY %main () -> f32[] {}\n")
  with pytest.raises(RuntimeError, match="ended before SPMD partitioning finished: no partitioned module of the 4"):
    compile_hooks._partitioned_dump(str(tmp_path))
  before.write_text("HloModule pmap_f, replica_count=4\n\nENTRY %main () -> f32[] {}\n")
  assert compile_hooks._partitioned_dump(str(tmp_path)) == str(before)[:-len(".txt")]
  after = tmp_path / "module_0001.jit_f.0006.spmd-partitioner.after_spmd-partitioning.before_x.txt"
  after.write_text("HloModule jit_f, num_partitions=4\n")
  before.write_text("HloModule jit_f, num_partitions=4\n")
  assert compile_hooks._partitioned_dump(str(tmp_path)) == str(after)[:-len(".txt")]


# -- one call per bucket (buckets.py) ---------------------------------------

_AR = ("  %{name} = {shape} all-reduce({x}), channel_id={ch}, replica_groups=[1,8]<=[8], use_global_device_ids=true, "
       "to_apply=%{op}")
_BIG = 30 << 20


def calls(text: str, target="myplugin_all_reduce") -> list[str]:
  return [l.strip() for l in text.splitlines() if f'custom_call_target="{target}"' in l]


def test_independent_all_reduces_of_any_types_become_one_call():
  """Three gradients (f32, s32, bf16), a user of the first between them:
  one call with a tuple result; each all-reduce's name is its element, and
  the user moved after the call. With the threshold 0, one call each, as
  before."""
  text = module("  %p = f32[4,2]{1,0} parameter(0)\n  %q = s32[3]{0} parameter(1)\n  %h = bf16[5]{0} parameter(2)\n"
                + _AR.format(name="a", shape="f32[4,2]{1,0}", x="%p", ch=1, op="add") + "\n"
                "  %use = f32[4,2]{1,0} negate(%a)\n"
                + _AR.format(name="b", shape="s32[3]{0}", x="%q", ch=2, op="add") + "\n"
                + _AR.format(name="c", shape="bf16[5]{0}", x="%h", ch=3, op="add") + "\n"
                "  ROOT %t = (f32[4,2]{1,0}, s32[3]{0}, bf16[5]{0}) tuple(%use, %b, %c)",
                comps=ADD + ADD.replace("%add ", "%iadd ").replace("f32", "s32")
                + ADD.replace("%add ", "%hadd ").replace("f32", "bf16"))
  text = text.replace("to_apply=%add", "to_apply=%iadd", 2).replace("to_apply=%iadd", "to_apply=%add", 1)
  text = text.replace("channel_id=3, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%add",
                      "channel_id=3, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%hadd")
  parses(text)
  # (bf16 as it is: as on GPUs; on the CPU engine it is summed in f32, below.)
  out = rewrite_module(text, [list(range(8))], 8, combine_threshold=_BIG, widen_narrow_sums=False)
  parses(out)
  [call] = calls(out)
  assert call.split(" = ")[1].startswith("(f32[4,2]{1,0}, s32[3]{0}, bf16[5]{0}) custom-call(%p, %q, %h)"), call
  lines = entry_lines(out)
  index = {l.split(" = ")[0]: i for i, l in enumerate(lines) if " = " in l}
  assert lines[index["%a"]] == "%a = f32[4,2]{1,0} get-tuple-element(" + call.split(" = ")[0] + "), index=0"
  assert index["%use"] > index["%a"] > index[call.split(" = ")[0]]
  separate = rewrite_module(text, [list(range(8))], 8, combine_threshold=0)
  assert len(calls(separate)) == 3
  assert separate == rewrite_module(text, [list(range(8))], 8)


def _one_collective(opcode_line: str, dtype: str, reducer: str = "add") -> str:
  comp = ADD.replace("f32", dtype).replace("add(%a, %b)", f"{reducer}(%a, %b)")
  return module(f"  %p = {dtype}[8,2]{{1,0}} parameter(0)\n" + opcode_line, params=f"p: {dtype}[8,2]", comps=comp)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_narrow_float_sums_run_in_f32_on_the_cpu_engine(dtype):
  """As XLA's CPU engine sums them (carried_types.py): converted to f32, one
  call, converted back, rounded once; on GPUs (widen off) they stay as they are."""
  text = _one_collective(f"  ROOT %r = {dtype}[8,2]{{1,0}} all-reduce(%p), channel_id=1, replica_groups=[1,8]<=[8], "
                         "use_global_device_ids=true, to_apply=%add", dtype)
  out = rewrite_module(text, [list(range(8))], 8)
  parses(out)
  lines = entry_lines(out)
  [call] = calls(out)
  assert call.split(" = ")[1].startswith("f32[8,2]{1,0} custom-call(%p.myplugin."), call
  assert any(l.endswith(" = f32[8,2]{1,0} convert(%p)") for l in lines), lines
  assert lines[-2].startswith(f"ROOT %r = {dtype}[8,2]{{1,0}} convert(%r.myplugin."), lines
  narrow = rewrite_module(text, [list(range(8))], 8, widen_narrow_sums=False)
  assert calls(narrow)[0].split(" = ")[1].startswith(f"{dtype}[8,2]{{1,0}} custom-call(%p)")


def test_narrow_float_maxima_stay_narrow():
  text = _one_collective("  ROOT %r = bf16[8,2]{1,0} all-reduce(%p), channel_id=1, replica_groups=[1,8]<=[8], "
                         "use_global_device_ids=true, to_apply=%add", "bf16", reducer="maximum")
  out = rewrite_module(text, [list(range(8))], 8)
  assert "convert" not in out and calls(out)[0].split(" = ")[1].startswith("bf16[8,2]{1,0} custom-call(%p)")


def test_float8_is_reduced_in_f32_and_moved_as_bytes():
  """Our handlers have no float8 arithmetic: a float8 maximum runs in f32
  (exact), and a float8 gather moves the same bytes as u8."""
  text = _one_collective("  ROOT %r = f8e4m3fn[8,2]{1,0} all-reduce(%p), channel_id=1, replica_groups=[1,8]<=[8], "
                         "use_global_device_ids=true, to_apply=%add", "f8e4m3fn", reducer="maximum")
  out = rewrite_module(text, [list(range(8))], 8, widen_narrow_sums=False)
  parses(out)
  assert calls(out)[0].split(" = ")[1].startswith("f32[8,2]{1,0} custom-call(")
  gather = _one_collective("  ROOT %r = f8e5m2[64,2]{1,0} all-gather(%p), channel_id=1, replica_groups=[1,8]<=[8], "
                           "dimensions={0}, use_global_device_ids=true", "f8e5m2")
  out = rewrite_module(gather, [list(range(8))], 8)
  parses(out)
  lines = entry_lines(out)
  assert calls(out, "myplugin_all_gather")[0].split(" = ")[1].startswith("u8[64,2]{1,0} custom-call(")
  assert any("u8[8,2]{1,0} bitcast-convert(%p)" in l for l in lines), lines
  assert lines[-2].startswith("ROOT %r = f8e5m2[64,2]{1,0} bitcast-convert("), lines


def test_a_tuple_all_reduce_widens_its_narrow_elements_only():
  comps = ADD.replace("f32", "bf16")
  text = module("  %p = bf16[4]{0} parameter(0)\n  %q = s32[3]{0} parameter(1)\n"
                "  ROOT %r = (bf16[4]{0}, s32[3]{0}) all-reduce(%p, %q), channel_id=1, replica_groups=[1,8]<=[8], "
                "use_global_device_ids=true, to_apply=%add", params="p: bf16[4], q: s32[3]", comps=comps)
  out = rewrite_module(text, [list(range(8))], 8)
  parses(out)
  [first, second] = calls(out)
  assert first.split(" = ")[1].startswith("f32[4]{0} custom-call(%p.myplugin.")
  assert second.split(" = ")[1].startswith("s32[3]{0} custom-call(%q")
  assert entry_lines(out)[-2].startswith("ROOT %r = (bf16[4]{0}, s32[3]{0}) tuple(")


def test_a_collective_that_depends_on_a_bucket_does_not_join_it():
  """b reads a's result (through a negate): two calls, b after a. And the
  dependence through another bucket counts: sb reads mb, whose bucket (ma,
  mb) reads sa, so sb cannot join sa (one call for sa and sb would wait on
  itself); ma and mb are independent and share one."""
  dep = module("  %p = f32[4]{0} parameter(0)\n"
               + _AR.format(name="a", shape="f32[4]{0}", x="%p", ch=1, op="add") + "\n"
               "  %n = f32[4]{0} negate(%a)\n"
               + _AR.format(name="b", shape="f32[4]{0}", x="%n", ch=2, op="add").replace("%b =", "ROOT %b ="))
  out = rewrite_module(dep, [list(range(8))], 8, combine_threshold=_BIG)
  parses(out)
  a, b = calls(out)
  assert a.startswith("%a = f32[4]{0} custom-call(%p)") and "custom-call(%n, %a)" in b
  through = module("  %p = f32[4]{0} parameter(0)\n  %p2 = f32[4]{0} parameter(1)\n"
                   + _AR.format(name="sa", shape="f32[4]{0}", x="%p", ch=1, op="add") + "\n"
                   "  %na = f32[4]{0} negate(%sa)\n"
                   + _AR.format(name="ma", shape="f32[4]{0}", x="%na", ch=2, op="max") + "\n"
                   + _AR.format(name="mb", shape="f32[4]{0}", x="%p2", ch=3, op="max") + "\n"
                   "  %nb = f32[4]{0} negate(%mb)\n"
                   + _AR.format(name="sb", shape="f32[4]{0}", x="%nb", ch=4, op="add") + "\n"
                   "  ROOT %t = (f32[4]{0}, f32[4]{0}) tuple(%ma, %sb)", comps=ADD + MAX)
  parses(through)
  out = rewrite_module(through, [list(range(8))], 8, combine_threshold=_BIG)
  parses(out)
  found = calls(out)
  assert len(found) == 3, out
  assert 'reduction = "sum"' in found[0] and "custom-call(%p)" in found[0]
  assert 'reduction = "max"' in found[1] and "custom-call(%na, %p2, %sa)" in found[1]
  assert 'reduction = "sum"' in found[2] and "custom-call(%nb, " in found[2]


def test_buckets_hold_at_most_the_threshold_and_one_reduction_and_group_each():
  body = "  %p = f32[8]{0} parameter(0)\n" + "\n".join(
      _AR.format(name=f"r{i}", shape="f32[8]{0}", x="%p", ch=i + 1, op="add") for i in range(5))
  body += "\n" + _AR.format(name="m", shape="f32[8]{0}", x="%p", ch=9, op="max")
  body += "\n" + _AR.format(name="g", shape="f32[8]{0}", x="%p", ch=10, op="add").replace("[1,8]<=[8]", "[2,4]<=[8]")
  body += "\n  ROOT %t = (f32[8]{0}, f32[8]{0}, f32[8]{0}) tuple(%r4, %m, %g)"
  text = module(body, comps=ADD + MAX)
  out = rewrite_module(text, [list(range(8))], 8, combine_threshold=64)  # two f32[8] per call
  parses(out)
  sizes = [c.split(" custom-call(")[1].split(")")[0].count("%p") for c in calls(out)]
  assert sizes == [2, 2, 1, 1, 1], calls(out)


def test_a_loop_that_communicates_closes_the_buckets():
  """The collectives before a communicating loop run before it, those after
  it after it: none share a call across it, and the call after it is
  ordered after the loop."""
  loop = """%cond (c: f32[4]) -> pred[] {
  %c = f32[4]{0} parameter(0)
  ROOT %f = pred[] constant(false)
}
%body (b: f32[4]) -> f32[4] {
  %b = f32[4]{0} parameter(0)
  ROOT %s = f32[4]{0} all-reduce(%b), channel_id=9, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%add
}
"""
  text = module("  %p = f32[4]{0} parameter(0)\n  %q = f32[4]{0} parameter(1)\n"
                + _AR.format(name="a", shape="f32[4]{0}", x="%p", ch=1, op="add") + "\n"
                "  %w = f32[4]{0} while(%q), condition=%cond, body=%body\n"
                + _AR.format(name="b", shape="f32[4]{0}", x="%p", ch=2, op="add") + "\n"
                + _AR.format(name="c", shape="f32[4]{0}", x="%q", ch=3, op="add") + "\n"
                "  ROOT %t = (f32[4]{0}, f32[4]{0}, f32[4]{0}, f32[4]{0}) tuple(%a, %w, %b, %c)", comps=ADD + loop)
  out = rewrite_module(text, [list(range(8))], 8, combine_threshold=_BIG)
  parses(out)
  lines = entry_lines(out)
  entry = [l for l in lines if "myplugin_all_reduce" in l or "while(" in l]
  assert entry[0].startswith("%a = f32[4]{0} custom-call(%p)")
  assert "while(" in entry[1]
  assert "custom-call(%p, %q, %w)" in entry[2], entry  # b and c together, after the loop


def test_gathers_and_scatters_share_a_call_along_their_own_dimensions():
  """Two all-gathers (dimension 1 and 0) become one call on axis-0 operands,
  transposed there and back; two reduce-scatters one call; the root, a
  gather too, stays a call of its own and the computation's last line."""
  body = ("  %p = f32[4,2]{1,0} parameter(0)\n  %v = s32[3]{0} parameter(1)\n  %w = f32[16]{0} parameter(2)\n"
          "  %ga = f32[4,16]{1,0} all-gather(%p), channel_id=1, replica_groups=[1,8]<=[8], dimensions={1}, "
          "use_global_device_ids=true\n"
          "  %gb = s32[24]{0} all-gather(%v), channel_id=2, replica_groups=[1,8]<=[8], dimensions={0}, "
          "use_global_device_ids=true\n"
          "  %sa = f32[2]{0} reduce-scatter(%w), channel_id=3, replica_groups=[1,8]<=[8], dimensions={0}, "
          "use_global_device_ids=true, to_apply=%add\n"
          "  %sb = f32[2]{0} reduce-scatter(%w), channel_id=4, replica_groups=[1,8]<=[8], dimensions={0}, "
          "use_global_device_ids=true, to_apply=%add\n"
          "  %t = (f32[4,16]{1,0}, s32[24]{0}, f32[2]{0}) tuple(%ga, %gb, %sa)\n"
          "  ROOT %gc = f32[64]{0} all-gather(%w), channel_id=5, replica_groups=[1,8]<=[8], dimensions={0}, "
          "use_global_device_ids=true")
  text = module(body)
  parses(text)
  out = rewrite_module(text, [list(range(8))], 8, combine_threshold=_BIG)
  parses(out)
  gather, root = calls(out, "myplugin_all_gather")
  assert gather.split(" = ")[1].startswith("(f32[16,4]{1,0}, s32[24]{0}) custom-call(")
  [scatter] = calls(out, "myplugin_reduce_scatter")
  assert scatter.split(" = ")[1].startswith("(f32[2]{0}, f32[2]{0}) custom-call(%w, %w")
  lines = entry_lines(out)
  assert root.startswith("ROOT %gc = f32[64]{0} custom-call(%w, ") and lines[-2] == root and lines[-1] == "}"
  assert any(l.startswith("%ga = f32[4,16]{1,0} transpose(") for l in lines)


def test_a_control_predecessor_is_a_dependence():
  """b runs after a's user by a control edge alone: b does not join a's
  bucket, and the user stays before b."""
  text = module("  %p = f32[4]{0} parameter(0)\n"
                + _AR.format(name="a", shape="f32[4]{0}", x="%p", ch=1, op="add") + "\n"
                "  %n = f32[4]{0} negate(%a)\n"
                + _AR.format(name="b", shape="f32[4]{0}", x="%p", ch=2, op="add") + ", control-predecessors={%n}\n"
                "  ROOT %t = (f32[4]{0}, f32[4]{0}) tuple(%n, %b)")
  parses(text)
  out = rewrite_module(text, [list(range(8))], 8, combine_threshold=_BIG)
  parses(out)
  assert len(calls(out)) == 2
  lines = entry_lines(out)
  assert [l.split(" = ")[0] for l in lines if " = " in l] == ["%p", "%a", "%n", "%b", "ROOT %t"]


# -- reduce-scatters formed from an all-reduce and each device's slice ------

def _scattered(offset_lines: str, offset: str, groups="[1,4]<=[4]", extra="", cols=8, block=2) -> str:
  """A module of 4 partitions: an all-reduce of f32[8,COLS] (columns summed
  over `groups`), transposed and copied, then sliced to BLOCK rows of the
  transposed value (columns of the sum) at `offset` (an instruction the
  OFFSET_LINES define)."""
  return module(
      f"  %p = f32[8,{cols}]{{1,0}} parameter(0)\n"
      f"  %ar = f32[8,{cols}]{{1,0}} all-reduce(%p), channel_id=1, replica_groups={groups}, "
      "use_global_device_ids=true, to_apply=%add\n"
      f"  %t = f32[{cols},8]{{0,1}} transpose(%ar), dimensions={{1,0}}\n"
      f"  %c = f32[{cols},8]{{0,1}} copy(%t)\n"
      f"{offset_lines}"
      "  %zero = s32[] constant(0)\n"
      f"  %ds = f32[{block},8]{{0,1}} dynamic-slice(%c, {offset}, %zero), dynamic_slice_sizes={{{block},8}}\n"
      f"{extra}"
      f"  ROOT %r = f32[{block},8]{{0,1}} negate(%ds)", header="num_partitions=4")


_TABLE = ("  %table = s32[4]{0} constant({0, 2, 4, 6})\n  %pid = u32[] partition-id()\n"
          "  %at = s32[1]{0} dynamic-slice(%table, %pid), dynamic_slice_sizes={1}\n  %off = s32[] reshape(%at)\n")


def test_an_all_reduce_that_each_device_slices_its_block_of_becomes_a_reduce_scatter():
  """The partitioner's form (a table of offsets by partition-id): one
  reduce-scatter along the all-reduce's columns (the dimension the slice
  cuts, through the transpose) of the device groups, its block carried
  through the transpose and the copy, the slice a copy; no all-reduce is
  left. The same module with forming off keeps the all-reduce."""
  text = _scattered(_TABLE, "%off")
  parses(text)
  out = rewrite_module(text, [[10, 11, 12, 13]], 16)
  parses(out)
  assert calls(out) == []
  [rs] = calls(out, "myplugin_reduce_scatter")
  assert rs.split(" = ")[1].startswith("f32[2,8]{1,0} custom-call("), rs  # columns moved to axis 0, a block of 2
  assert attr_ids(rs, "replica_groups") == [10, 11, 12, 13]
  lines = entry_lines(out)
  assert "%ar = f32[8,2]{1,0} transpose(" in "\n".join(lines)
  assert "%t = f32[2,8]{0,1} transpose(%ar), dimensions={1,0}" in lines
  assert "%c = f32[2,8]{0,1} copy(%t)" in lines
  assert "%ds = f32[2,8]{0,1} copy(%c)" in lines
  kept = rewrite_module(text, [[10, 11, 12, 13]], 16, form_reduce_scatters=False)
  assert len(calls(kept)) == 1 and calls(kept, "myplugin_reduce_scatter") == []


@pytest.mark.parametrize("offset_lines,offset", [
    # arithmetic on the partition id, not a table
    ("  %pid = u32[] partition-id()\n  %s = s32[] convert(%pid)\n  %two = s32[] constant(2)\n"
     "  %off = s32[] multiply(%s, %two)\n", "%off"),
    # a table of 2-D and a bitcast, as other partitioner versions write it
    ("  %table = s32[4,1]{1,0} constant({ {0}, {2}, {4}, {6} })\n  %pid = u32[] partition-id()\n"
     "  %zero1 = u32[] constant(0)\n"
     "  %at = s32[1,1]{1,0} dynamic-slice(%table, %pid, %zero1), dynamic_slice_sizes={1,1}\n"
     "  %off = s32[] bitcast(%at)\n", "%off"),
])
def test_offsets_are_worked_out_from_the_modules_arithmetic(offset_lines, offset):
  out = rewrite_module(_scattered(offset_lines, offset), [[0, 1, 2, 3]], 4)
  parses(out)
  assert calls(out) == [] and len(calls(out, "myplugin_reduce_scatter")) == 1


def test_groups_of_a_2d_mesh_take_each_devices_position_in_its_group():
  """Columns summed over groups {0,2} and {1,3} (partitions of a 2x2 mesh's
  first axis): the offset must be the position in the group (partition // 2),
  not the partition id."""
  groups = "[2,2]<=[2,2]T(1,0)"
  by_group = ("  %pid = u32[] partition-id()\n  %s = s32[] convert(%pid)\n  %two = s32[] constant(2)\n"
              "  %g = s32[] divide(%s, %two)\n  %four = s32[] constant(4)\n  %off = s32[] multiply(%g, %four)\n")
  table = ("  %table = s32[4]{0} constant({0, 0, 4, 4})\n  %pid = u32[] partition-id()\n"
           "  %at = s32[1]{0} dynamic-slice(%table, %pid), dynamic_slice_sizes={1}\n  %off = s32[] reshape(%at)\n")
  wrong = table.replace("{0, 0, 4, 4}", "{0, 4, 0, 4}")
  formed = rewrite_module(_scattered(table, "%off", groups, block=4), [[0, 1, 2, 3]], 4)
  parses(formed)
  [rs] = calls(formed, "myplugin_reduce_scatter")
  assert attr_ids(rs, "replica_groups") == [0, 2, 1, 3]
  assert len(calls(rewrite_module(_scattered(wrong, "%off", groups, block=4), [[0, 1, 2, 3]], 4))) == 1
  # divide is not read: left as it was (an all-reduce), never guessed
  assert len(calls(rewrite_module(_scattered(by_group, "%off", groups, block=4), [[0, 1, 2, 3]], 4))) == 1


@pytest.mark.parametrize("offset_lines,offset,extra,block", [
    (_TABLE.replace("{0, 2, 4, 6}", "{6, 4, 2, 0}"), "%off", "", 2),  # blocks in another order
    (_TABLE.replace("{0, 2, 4, 6}", "{0, 1, 2, 3}"), "%off", "", 2),  # overlapping blocks
    (_TABLE, "%off", "  %other = f32[8,8]{0,1} negate(%c)\n", 2),  # the whole sum is used too
    (_TABLE, "%off", "", 4),  # blocks of 4 rows over 4 devices: not a split of 8
    ("  %pid = u32[] partition-id()\n  %p2 = f32[] parameter(1)\n  %off = s32[] convert(%p2)\n", "%off", "", 2),
])
def test_what_is_not_each_devices_own_block_stays_an_all_reduce(offset_lines, offset, extra, block):
  text = _scattered(offset_lines, offset, extra=extra, block=block)
  parses(text)
  out = rewrite_module(text, [[0, 1, 2, 3]], 4)
  parses(out)
  assert len(calls(out)) == 1 and calls(out, "myplugin_reduce_scatter") == []


# -- GPU collectives on a stream of their own --------------------------------

def stream_pairs(out: str) -> list[tuple[str, list[str]]]:
  """Each async pair's start in the entry, with the arrays its operands
  flatten (the reshapes' sources)."""
  entry = entry_lines(out)
  by_name = {l.replace("ROOT ", "").split(" = ")[0]: l for l in entry}
  pairs = []
  for start in (l for l in entry if " async-start(" in l):
    operands = re.search(r"async-start\(([^)]*)\)", start).group(1).split(", ")
    pairs.append((start, [re.search(r" reshape\((\S+)\)", by_name[o]).group(1) for o in operands]))
  return pairs


def test_on_gpus_each_collective_call_runs_on_the_collective_stream_unchained():
  """With streams (the CUDA engine), every collective call is an async pair
  of ours (async-start/async-done on the "parallel" thread, annotated with
  the collective stream) that starts a computation calling the one our
  custom call is in, between bitcasts; the pair passes rank-1 arrays
  (reshapes of the operands and of the result), written before the
  computation that uses it; the calls read no earlier collective's result
  (no chain), a combined one included; partition-id stays our handler's
  call, on the compute stream."""
  text = module("  %p = f32[4,2]{1,0} parameter(0)\n  %q = f32[3]{0} parameter(1)\n"
                + _AR.format(name="a", shape="f32[4,2]{1,0}", x="%p", ch=1, op="add") + "\n"
                + _AR.format(name="b", shape="f32[3]{0}", x="%q", ch=2, op="add") + "\n"
                "  %n = f32[4,2]{1,0} negate(%a)\n"
                + _AR.format(name="c", shape="f32[4,2]{1,0}", x="%n", ch=3, op="add") + "\n"
                "  %pid = u32[] partition-id()\n"
                "  ROOT %t = (f32[4,2]{1,0}, f32[3]{0}, u32[]) tuple(%c, %b, %pid)")
  parses(text)
  out = rewrite_module(text, [list(range(8))], 8, fences=False, runtime_device_ids=True, streams=True,
                       combine_threshold=_BIG)
  parses(out)
  lines = entry_lines(out)
  pairs = stream_pairs(out)
  assert len(pairs) == 2, lines  # (a, b) combined, then c
  assert [sources for _, sources in pairs] == [["%p", "%q"], ["%n"]]  # no earlier collective's result
  for start, _ in pairs:
    assert 'async_execution_thread="parallel"' in start and \
        'frontend_attributes={_xla_stream_annotation="1"}' in start, start
  assert pairs[0][0].split(" = ")[1].startswith("((f32[8]{0}, f32[3]{0}), (f32[8]{0}, f32[3]{0})) async-start(")
  dones = [l for l in lines if " async-done(" in l]
  assert len(dones) == 2 and all('_xla_stream_annotation="1"' in l for l in dones)
  # The results, shaped back: the combined pair's elements (a tuple of them), then c.
  by_name = {l.replace("ROOT ", "").split(" = ")[0]: l for l in lines}
  combined = re.search(r"get-tuple-element\((\S+)\)", by_name["%a"]).group(1)
  elements = re.search(r" tuple\(([^)]*)\)", by_name[combined]).group(1).split(", ")
  assert [by_name[e].split(" = ")[1].split(" reshape(")[0] for e in elements] == ["f32[4,2]{1,0}", "f32[3]{0}"]
  assert by_name["%c"].startswith("%c = f32[4,2]{1,0} reshape(")
  assert next(l for l in lines if l.startswith("ROOT %t")).startswith("ROOT %t = (f32[4,2]{1,0}, f32[3]{0}, u32[]) "
                                                                      "tuple(%c, %b, %pid")
  # Each started computation calls the one our custom call is in, both before the entry.
  started = {re.search(r"calls=(\S+?),", start).group(1) for start, _ in pairs}
  inner = {l.split()[0] for l in out.splitlines() if l.startswith("%on_stream")}
  assert len(started) == 2 and len(inner) == 2
  assert out.index("ENTRY") > max(out.index(c + " ") for c in started | inner)
  assert len(calls(out)) == 2
  for c in calls(out):
    assert re.match(r"%\S+ = .* custom-call\(%shaped", c), c
  assert [l for l in lines if "myplugin_partition_id" in l and " async-start(" not in l]
  chained = rewrite_module(text, [list(range(8))], 8, fences=False, runtime_device_ids=True, combine_threshold=_BIG)
  assert " async-start(" not in chained and "custom-call(%n, %" in chained  # without streams: the chain, as before


def _shard_map_module(calls_of_body: int) -> str:
  """ENTRY calls a shard_map-like body (an all-reduce) `calls_of_body` times."""
  body = ("%body (bp: f32[4,2]) -> f32[4,2] {\n  %bp = f32[4,2]{1,0} parameter(0)\n"
          + _AR.format(name="ar", shape="f32[4,2]{1,0}", x="%bp", ch=1, op="add") + "\n"
          "  ROOT %neg = f32[4,2]{1,0} negate(%ar)\n}\n")
  entry = "  %p = f32[4,2]{1,0} parameter(0)\n"
  for i in range(calls_of_body):
    entry += f"  %c{i} = f32[4,2]{{1,0}} call(%p), to_apply=%body\n"
  entry += f"  ROOT %t = ({', '.join(['f32[4,2]{1,0}'] * calls_of_body)}) tuple(" + \
      ", ".join(f"%c{i}" for i in range(calls_of_body)) + ")"
  return module(entry, comps=ADD + "\n" + body)


def test_on_gpus_a_shard_map_body_is_inlined_before_its_collectives_become_pairs():
  """XLA's call inliner would clone a pair of ours out of a shard_map body
  (a `call` it inlines) but leave the computation the pair starts with two
  callers, which its copy insertion refuses: the rewrite inlines such a
  body first (its parameter becomes the call's operand, its root the
  call's name), then writes the pair in the caller. A body called twice
  keeps its calls, and its collective the annotated `call` that XLA makes
  a pair of after inlining."""
  once = _shard_map_module(1)
  parses(once)
  out = rewrite_module(once, [list(range(8))], 8, fences=False, runtime_device_ids=True, streams=True)
  parses(out)
  assert "%body" not in out and "to_apply=%body" not in out
  (start, sources), = stream_pairs(out)
  assert sources == ["%p"]
  lines = entry_lines(out)
  assert "%c0 = f32[4,2]{1,0} negate(%ar)" in lines
  assert next(l for l in lines if l.startswith("%ar = ")).startswith("%ar = f32[4,2]{1,0} reshape(")
  twice = _shard_map_module(2)
  parses(twice)
  out = rewrite_module(twice, [list(range(8))], 8, fences=False, runtime_device_ids=True, streams=True)
  parses(out)
  assert out.count("to_apply=%body") == 2 and not stream_pairs(out)
  ar = next(l.strip() for l in out.splitlines() if l.strip().startswith("%ar = "))
  assert " call(%bp), to_apply=%on_stream" in ar and \
      'frontend_attributes={_xla_stream_annotation="1",inlineable="false"}' in ar
  # Without streams (the CPU engine) nothing is inlined.
  host = rewrite_module(once, [list(range(8))], 8, runtime_device_ids=True)
  assert "to_apply=%body" in host


def test_on_gpus_an_all_reduce_pair_is_grouped_with_the_next_independent_matmul():
  """On GPUs each all-reduce pair shares XLA's scheduling group with the
  first matmul after it that does not need its result
  (scheduling_groups.py): here the matmul of another input, not the one of
  the all-reduce's result before it; an all-reduce with no such matmul
  after it, and an all-gather, stay ungrouped; without streams, none."""
  text = module("  %p = f32[4,4]{1,0} parameter(0)\n  %q = f32[4,4]{1,0} parameter(1)\n"
                + _AR.format(name="a", shape="f32[4,4]{1,0}", x="%p", ch=1, op="add") + "\n"
                "  %uses = f32[4,4]{1,0} dot(%a, %q), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                "  %free = f32[4,4]{1,0} dot(%q, %q), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                + _AR.format(name="b", shape="f32[4,4]{1,0}", x="%free", ch=2, op="add") + "\n"
                "  %g = f32[32,4]{1,0} all-gather(%q), channel_id=3, replica_groups=[1,8]<=[8], dimensions={0}, "
                "use_global_device_ids=true\n"
                "  %after = f32[4,4]{1,0} dot(%p, %p), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                "  ROOT %t = (f32[4,4]{1,0}, f32[4,4]{1,0}, f32[32,4]{1,0}, f32[4,4]{1,0}) tuple(%uses, %b, %g, %after)",
                comps=ADD)
  parses(text)
  out = rewrite_module(text, [list(range(8))], 8, fences=False, runtime_device_ids=True, streams=True)
  parses(out)
  lines = entry_lines(out)
  grouped = {}
  for l in lines:
    m = re.search(r'_scheduling_group_id="(\d+)"', l)
    if m:
      grouped.setdefault(m.group(1), []).append(l.split(" = ")[0].replace("ROOT ", ""))
  starts = [start.split(" = ")[0] for start, _ in stream_pairs(out)]
  a_start = next(s for s in starts if s.startswith("%a"))
  b_start = next(s for s in starts if s.startswith("%b"))
  g_start = next(s for s in starts if s.startswith("%g"))
  assert len(grouped) == 2, grouped
  a_group = next(v for v in grouped.values() if a_start in v)
  b_group = next(v for v in grouped.values() if b_start in v)
  def done_of(start):
    return next(l for l in lines if f" async-done({start})" in l).split(" = ")[0]
  assert sorted(a_group) == sorted([a_start, done_of(a_start), "%free"]), a_group
  assert sorted(b_group) == sorted([b_start, done_of(b_start), "%after"]), b_group
  assert not any(g_start in v for v in grouped.values())
  host = rewrite_module(text, [list(range(8))], 8, runtime_device_ids=True)
  assert "_scheduling_group_id" not in host


def test_on_gpus_a_matmul_closes_the_buckets():
  """Two independent all-reduces with a matmul between them: one call on
  the CPU engine (a bucket), two with streams, where the first would
  otherwise wait for the matmul instead of running beside it."""
  text = module("  %p = f32[4,2]{1,0} parameter(0)\n  %q = f32[2,2]{1,0} parameter(1)\n"
                + _AR.format(name="a", shape="f32[4,2]{1,0}", x="%p", ch=1, op="add") + "\n"
                "  %d = f32[4,2]{1,0} dot(%p, %q), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                + _AR.format(name="b", shape="f32[4,2]{1,0}", x="%d", ch=2, op="add") + "\n"
                "  ROOT %t = (f32[4,2]{1,0}, f32[4,2]{1,0}) tuple(%a, %b)")
  parses(text)
  host = rewrite_module(text, [list(range(8))], 8, runtime_device_ids=True, combine_threshold=_BIG)
  gpu = rewrite_module(text, [list(range(8))], 8, fences=False, runtime_device_ids=True, streams=True,
                       combine_threshold=_BIG)
  parses(host)
  parses(gpu)
  assert len(calls(host)) == 1 and len(calls(gpu)) == 2


def _ragged_module(index="s32", k=4, rows="f32[6,3]{1,0}", groups="{{0,1},{2,3}}") -> str:
  p = (f"  %x = f32[5,3]{{1,0}} parameter(0)\n  %o = {rows} parameter(1)\n"
       + "".join(f"  %{a} = {index}[{k}]{{0}} parameter({i + 2})\n" for i, a in enumerate(("io", "ss", "oo", "rs"))))
  # As the printer writes six operands: the sixth marked with its index.
  return module(p + f"  ROOT %r = {rows} ragged-all-to-all(%x, %o, %io, %ss, %oo, /*index=5*/%rs), channel_id=1, "
                f"replica_groups={groups}", header="num_partitions=4")


def test_ragged_all_to_all_on_gpus():
  """lax.ragged_all_to_all across processes on the CUDA engine: an
  all-to-all of each device's (output offset, send size) pairs, over the
  ragged call's groups, then our call on the output (in place), the data,
  the input offsets, the send sizes, those pairs and the recv sizes, on the
  collective stream; each device's part is checked and moved by the NCCL
  handler (tests/cpp/ragged_all_to_all_tests.cc runs it against a stand-in
  NCCL, every byte)."""
  for index in ("s32", "s64"):
    out = rewrite_module(_ragged_module(index), [[3, 2, 1, 0]], 4, runtime_device_ids=True, streams=True,
                         widen_narrow_sums=False, engine="cuda")
    parses(out)
    assert "ragged-all-to-all" not in out
    lines = [l.strip() for l in out.splitlines()]
    exchange = next(l for l in lines if 'custom_call_target="myplugin_all_to_all"' in l)
    ragged = next(l for l in lines if 'custom_call_target="myplugin_ragged_all_to_all"' in l)
    # Partition ids {0,1},{2,3} are global devices {3,2},{1,0}.
    for line in (exchange, ragged):
      assert attr_ids(line, "replica_groups") == [3, 2, 1, 0] and "group_size = 2 : i64" in line
    assert exchange.split(" = ")[1].startswith(f"{index}[4,2]{{1,0}} custom-call(")
    assert "output_to_operand_aliasing={{}: (0, {})}" in ragged
    assert f"operand_layout_constraints={{f32[6,3]{{1,0}}, f32[5,3]{{1,0}}, {index}[4]{{0}}, {index}[4]{{0}}, " \
           f"{index}[4,2]{{1,0}}, {index}[4]{{0}}}}" in ragged
    # The pairs: the output offsets beside the send sizes, as [K, 2].
    entry = entry_lines(out)
    concat = next(l for l in entry if " concatenate(" in l)
    cols = re.search(r"concatenate\((\S+), (\S+)\), dimensions=\{1\}", concat).groups()
    assert [next(l for l in entry if l.startswith(c + " ")).split("reshape(")[1] for c in cols] == ["%oo)", "%ss)"]
    # The call reads the output, the data, the input offsets, the send sizes, the exchanged pairs, recv sizes.
    assert next(l for l in entry if l.startswith("ROOT %r = ")).startswith(f"ROOT %r = {'f32[6,3]{1,0}'} reshape(")
    exchange_pair, ragged_pair = stream_pairs(out)
    operands = ragged_pair[1]
    assert operands[:4] == ["%o", "%x", "%io", "%ss"] and operands[5] == "%rs"
    assert exchange_pair[1] == [concat.split(" = ")[0]]
    exchange_start = re.search(r"^(\S+) = ", exchange_pair[0]).group(1)
    exchange_done = next(l for l in entry if f" async-done({exchange_start})" in l).split(" = ")[0]
    assert next(l for l in entry if l.startswith(operands[4] + " ")).endswith(f" reshape({exchange_done})")


@pytest.mark.parametrize("text,engine,what", [
    (_ragged_module(), "cpu", r"XLA's CPU engine cannot run \(jax's CPU backend refuses it too\); myplugin runs "
                              r"it on GPUs"),
    (_ragged_module(index="f32"), "cuda", "four 1-D int32 or int64 arrays of one length"),
    (_ragged_module(rows="f32[6,2]{1,0}"), "cuda", "rows like the operand's"),
    (_ragged_module(k=3), "cuda", "3 offsets over groups of 2 devices"),
], ids=["cpu", "float_offsets", "other_rows", "odd_offsets"])
def test_ragged_all_to_all_refusals(text, engine, what):
  with pytest.raises(UnsupportedProgram, match=what):
    rewrite_module(text, [[0, 1, 2, 3]], 4, streams=engine == "cuda", engine=engine)


def test_a_reduction_body_that_copies_itself_is_refused_not_looped_on():
  """The fuzzer's find: a body whose root is a copy of itself (no printer
  writes one, a text can hold one) sent the reducer's walk through copies
  round forever. It is no reducer: refused."""
  selfish = ADD.replace("%add ", "%selfish ").replace("ROOT %s = f32[] add(%a, %b)", "ROOT %s = f32[] copy(%s)")
  text = module("  %p = f32[4]{0} parameter(0)\n  ROOT %r = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups={}, "
                "use_global_device_ids=true, to_apply=%selfish", params="p: f32[4]", comps=ADD + selfish)
  with pytest.raises(UnsupportedProgram, match="its root: copy"):
    rewrite_module(text, [[0, 1]], 2)


def test_a_float8_collective_of_an_operand_that_is_no_array_of_its_type_is_left_to_be_refused():
  """The fuzzer's find: the float8 carrying read an operand's shape text as
  an array's (a ValueError on a tuple). An operand of another shape or type
  is left as it is (no printer writes one): the rewrite refuses what it
  cannot read and leaves the rest to the engine, never fails otherwise."""
  for operand, refused in (("(f8e4m3fn[8,8]{1,0})", True), ("f32[8,8]{1,0}", False)):
    text = module(f"  %p = {operand} parameter(0)\n  ROOT %g = f8e4m3fn[64,8]{{1,0}} all-gather(%p), channel_id=1, "
                  "replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, use_global_device_ids=true",
                  params=f"p: {operand}")
    if refused:
      with pytest.raises(UnsupportedProgram, match="an operand that is not an array"):
        rewrite_module(text, [list(range(8))], 8)
    else:
      assert "bitcast-convert" not in rewrite_module(text, [list(range(8))], 8)


def test_an_instruction_the_rewrite_leaves_is_kept_to_the_letter():
  """The fuzzer's find: a line the rewrite leaves was printed again from
  its parsed fields, and a literal the reader splits into no operands
  (`constant(,)`, which jaxlib reads) came out as `constant()`, which it
  does not. Such a line is now kept as written, less its sharding."""
  text = module("  %p = f32[4]{0} parameter(0), sharding={replicated}\n  %c = s32[] constant(,)\n"
                "  ROOT %r = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups={}, use_global_device_ids=true, "
                "to_apply=%add", params="p: f32[4]")
  out = rewrite_module(text, [[0, 1]], 2)
  assert "  %c = s32[] constant(,)" in out.splitlines()
  assert "  %p = f32[4]{0} parameter(0)" in out.splitlines()


def test_a_computation_end_with_more_on_its_line_is_refused():
  """The fuzzer's find: a closing brace with the next computation's header
  on its line (jaxlib reads it; no printer writes it) left the rewrite
  inside the first computation, fencing with a value of another one."""
  text = module("  %p = f32[4]{0} parameter(0)\n  ROOT %r = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups={}, "
                "use_global_device_ids=true, to_apply=%add", params="p: f32[4]")
  with pytest.raises(HloTextError, match="a computation's end with more on its line"):
    rewrite_module(text.replace("}\n\nENTRY", "}ENTRY"), [[0, 1]], 2)
