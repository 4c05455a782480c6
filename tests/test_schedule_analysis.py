"""bench/schedule_analysis.py, which reads a compiled GPU program's
schedule (bench/gpu_schedule.py, CI's GPU compile matrix), on hand-written
scheduled modules with known answers: collectives and their ring bytes,
async pairs, and the GEMM FLOPs issued while a collective is in flight."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import schedule_analysis  # noqa: E402

GEMM = """%gemm_comp.{i} (a.{i}: bf16[64,32], b.{i}: bf16[32,16]) -> bf16[64,16] {{
  %a.{i} = bf16[64,32]{{1,0}} parameter(0)
  %b.{i} = bf16[32,16]{{1,0}} parameter(1)
  ROOT %dot.{i} = bf16[64,16]{{1,0}} dot(%a.{i}, %b.{i}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
FLOPS = 2 * 64 * 16 * 32


def gemm(i, x="%x", w="%w"):
  return (f"  %gemm_fusion_dot.{i} = bf16[64,16]{{1,0}} fusion({x}, {w}), kind=kCustom, "
          f"calls=%gemm_comp.{i}, backend_config={{\"kind\":\"__triton_nested_gemm_fusion\"}}")


def module(body, comps=""):
  gemms = "".join(GEMM.format(i=i) for i in range(4))
  return (f"HloModule jit_step, is_scheduled=true\n\n{gemms}{comps}"
          f"ENTRY %main (x: bf16[64,32], w: bf16[32,16], g: bf16[1024,64]) -> bf16[64,16] {{\n"
          "  %x = bf16[64,32]{1,0} parameter(0)\n  %w = bf16[32,16]{1,0} parameter(1)\n"
          "  %g = bf16[1024,64]{1,0} parameter(2)\n" + body + "\n}\n")


def test_xla_async_pairs_their_bytes_and_the_gemms_between_them():
  # An all-gather of 128 KiB results over 8 devices in flight across two of
  # four GEMMs; a scalar all-reduce in flight across the rest counts as no overlap.
  text = module("\n".join([
      gemm(0),
      "  %ag-start = ((bf16[128,64]{1,0}), bf16[1024,64]{1,0}) all-gather-start(%g), channel_id=1, "
      "replica_groups=[1,8]<=[8], dimensions={0}, use_global_device_ids=true",
      gemm(1), gemm(2),
      "  %ag-done = bf16[1024,64]{1,0} all-gather-done(%ag-start)",
      "  %s = f32[] constant(0)",
      "  %ar-start = ((f32[]), f32[]) all-reduce-start(%s), channel_id=2, replica_groups=[1,8]<=[8], "
      "use_global_device_ids=true, to_apply=%add",
      gemm(3),
      "  ROOT %ar-done = f32[] all-reduce-done(%ar-start)"]))
  s = schedule_analysis.analyse(text, 8)
  assert (s.collectives, s.async_pairs) == (2, 2)
  assert s.kinds == {"all-gather": 1, "all-reduce": 1}
  assert s.ring_bytes == pytest.approx(7 / 8 * 1024 * 64 * 2 + 2 * 7 / 8 * 4)
  assert s.gemm_flops == 4 * FLOPS and s.in_flight_share == pytest.approx(0.5)


def test_our_calls_on_the_collective_stream_and_a_loop_of_known_trips():
  """A reduce-scatter call of ours inside a call-start/call-done pair (its
  operand's bytes, its group size from group_size), the GEMM beside it; a
  loop of 3 trips whose body has a synchronous permute of ours and a GEMM."""
  comps = (
      "%on_stream (o: bf16[1024,64]) -> bf16[128,64] {\n  %o = bf16[1024,64]{1,0} parameter(0)\n"
      "  ROOT %rs = bf16[128,64]{1,0} custom-call(%o), custom_call_target=\"myplugin_reduce_scatter\", "
      "api_version=API_VERSION_TYPED_FFI, backend_config={group_size = 8 : i64, reduction = \"sum\"}\n"
      "}, execution_thread=\"parallel\"\n\n"
      "%body (c: bf16[64,32]) -> bf16[64,32] {\n  %c = bf16[64,32]{1,0} parameter(0)\n"
      "  %perm = bf16[64,32]{1,0} custom-call(%c), custom_call_target=\"myplugin_collective_permute\", "
      "api_version=API_VERSION_TYPED_FFI, backend_config={}\n"
      + gemm(3, "%perm", "%w").replace("%w)", "%perm)") + "\n  ROOT %r = bf16[64,32]{1,0} copy(%perm)\n}\n\n")
  text = module("\n".join([
      "  %call-start = ((bf16[1024,64]{1,0}), bf16[128,64]{1,0}) call-start(%g), to_apply=%on_stream, "
      "frontend_attributes={_xla_stream_annotation=\"1\"}",
      gemm(0),
      "  %call-done = bf16[128,64]{1,0} call-done(%call-start)",
      gemm(1),
      "  %loop = bf16[64,32]{1,0} while(%x), condition=%cond, body=%body, "
      "backend_config={\"known_trip_count\":{\"n\":\"3\"}}",
      "  ROOT %out = bf16[64,16]{1,0} copy(%gemm_fusion_dot.1)"]), comps)
  s = schedule_analysis.analyse(text, 8)
  assert s.kinds == {"reduce-scatter": 1, "collective-permute": 3} and s.async_pairs == 1
  assert s.ring_bytes == pytest.approx(7 / 8 * 1024 * 64 * 2 + 3 * 64 * 32 * 2)
  assert s.gemm_flops == 5 * FLOPS and s.in_flight_share == pytest.approx(1 / 5)


def test_ragged_all_to_all_counts_its_data_operand():
  """XLA's ragged-all-to-all reads its data first; our call reads the
  output it updates first and the data second: both count (n-1)/n of the
  data operand (the routing's real bytes are the run's)."""
  idx = "s32[8]{0}"
  xla = module("\n".join([
      f"  %i = {idx} parameter(3)",
      "  %o = bf16[2048,64]{1,0} parameter(4)",
      "  %r = bf16[2048,64]{1,0} ragged-all-to-all(%g, %o, %i, %i, %i, /*index=5*/%i), channel_id=1, "
      "replica_groups={{0,1,2,3,4,5,6,7}}",
      "  ROOT %out = bf16[64,16]{1,0} copy(%gemm_fusion_dot.0)"]))
  ours = xla.replace("ragged-all-to-all(%g, %o,", "custom-call(%o, %g,").replace(
      "channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}",
      "custom_call_target=\"myplugin_ragged_all_to_all\", backend_config={group_size = 8 : i64}")
  for text in (xla, ours):
    s = schedule_analysis.analyse(text, 8)
    assert s.kinds == {"ragged-all-to-all": 1}, text
    assert s.ring_bytes == pytest.approx(7 / 8 * 1024 * 64 * 2)
