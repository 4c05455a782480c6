#!/usr/bin/env bash
# The GPU compile matrix: on a CPU-only machine, compile the GPU programs
# (tests/programs/gpu_compile_programs.py: the examples' collectives, the
# training step, a model-parallel layer, tests/gpu's arithmetic, a
# custom_partitioning op and a Pallas kernel over the mesh) for every
# named GPU type through myplugin's compile-only topologies, with our NCCL
# handlers registered, and check each compiled program's collectives
# (kind, reduction, device groups, operand shape) against those that XLA's
# SPMD partitioner inserts for the same program on jax's CPU backend. Then
# tests/test_gpu_compile.py, with the gpu-compile wheels (cuDNN's too: its
# attention over a mesh) required. Between them, bench/gpu_schedule.py: the
# training programs' schedules beside jax's own CUDA backend's (no GPU),
# failing where myplugin would move more bytes.
#
#   ci/gpu_compile_matrix.sh [--out DIR] [--gpus "a100 l4 h100 b200"] [--reuse-venv] [--wheel WHEEL]
#
# --wheel installs myplugin from a cp312 wheel of this checkout (.ci/run's,
# built and checked already) instead of building it again.
#
# Installs what it needs into a fresh venv (pip's cache serves the wheels;
# the build has NCCL's and CUDA's headers, so the NCCL handlers are built,
# and it goes through ccache when there is one). Needs Python 3.12
# ($PYTHON312, else pyenv's 3.12.1, else python3.12). Each step has a
# deadline; the whole run is held to 15 minutes.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/build-gpu-compile/results"
gpus="a100 l4 h100 b200"
reuse=0
wheel=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --gpus) gpus="$2"; shift 2 ;;
    --reuse-venv) reuse=1; shift ;;
    --wheel) wheel="$(readlink -f "$2")"; shift 2 ;;
    *) echo "usage: $0 [--out DIR] [--gpus LIST] [--reuse-venv] [--wheel WHEEL]" >&2; exit 2 ;;
  esac
done
work="$root/build-gpu-compile"
mkdir -p "$work" "$out"
start=$(date +%s)
step() { echo "== $(($(date +%s) - start)) s: $*"; }

py="${PYTHON312:-}"
if [ -z "$py" ]; then
  py="$(pyenv root 2>/dev/null)/versions/3.12.1/bin/python"
  [ -x "$py" ] || py="$(command -v python3.12 || true)"
fi
[ -x "$py" ] || { echo "gpu_compile_matrix: no Python 3.12 (set PYTHON312)" >&2; exit 2; }

venv="$work/venv"
vpy="$venv/bin/python"
if [ "$reuse" = 0 ] || [ ! -x "$vpy" ]; then
  step "venv and wheels"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  # The plugin as a user installs it, with the test and gpu-compile-cudnn
  # extras: an isolated build (NCCL's and CUDA's headers are build
  # requirements, so the NCCL handlers are built; ccache serves it), the
  # newest jax the supported range allows, the CUDA engine of its release
  # and cuDNN.
  step "build myplugin"
  timeout 900 "$vpy" -m pip install -q "${wheel:-$root}[test,gpu-compile-cudnn]"
fi
"$vpy" -c "from jax_plugin import _myplugin; assert _myplugin.nccl_ffi_targets(), 'built without the NCCL handlers'"
"$vpy" -c "import importlib.metadata as m; print('versions:', *(f'{d} {m.version(d)}' for d in ('jax', 'jaxlib', 'jax-cuda13-pjrt', 'nvidia-cuda-nvcc', 'nvidia-cudnn-cu13')))"

export JAX_PLATFORMS=myplugin
programs="$root/tests/programs/gpu_compile_programs.py"
cd "$work"  # the installed jax_plugin, not the checkout's
step "reference: XLA's partition on jax's CPU backend"
JAX_PLATFORMS=cpu JAX_NUM_CPU_DEVICES=8 timeout 300 "$vpy" "$programs" reference --devices 4 --out "$out/reference-4.json"
JAX_PLATFORMS=cpu JAX_NUM_CPU_DEVICES=8 timeout 300 "$vpy" "$programs" reference --devices 8 --out "$out/reference-8.json"
for gpu in $gpus; do
  step "$gpu: 1x2x2 (2 processes x 2 GPUs)"
  timeout 300 "$vpy" "$programs" myplugin --gpu "$gpu" --topology 1x2x2 --out "$out/$gpu-1x2x2.json" \
    --serialize-dir "$work"
done
step "h100: 1x2x4 (2 processes x 4 GPUs)"
timeout 300 "$vpy" "$programs" myplugin --gpu h100 --topology 1x2x4 --out "$out/h100-1x2x4.json"

step "compare"
"$vpy" - "$out" $gpus <<'EOF'
import json, os, sys
out, gpus = sys.argv[1], sys.argv[2:]
runs = [(f"{g}-1x2x2", "reference-4") for g in gpus] + [("h100-1x2x4", "reference-8")]
bad, lines = [], []
for run, ref_name in runs:
  ours = json.load(open(os.path.join(out, run + ".json")))
  ref = json.load(open(os.path.join(out, ref_name + ".json")))
  for name, got in sorted(ours.items()):
    ok = got["collectives"] == ref[name]["collectives"] and not got["xla_collectives"]
    lines.append(f"{run:12} {name:18} {got['seconds']:6.2f} s  {len(got['collectives'])} collectives "
                 f"in {got.get('calls', len(got['collectives']))} calls  "
                 f"{'same as XLA' if ok else 'DIFFERENT'}")
    if not ok:
      bad.append(f"{run} {name}: ours {got['collectives']} {got['xla_collectives']}, XLA {ref[name]['collectives']}")
open(os.path.join(out, "summary.txt"), "w").write("\n".join(lines + bad) + "\n")
print("\n".join(lines))
if bad:
  sys.exit("collectives differ from XLA's partition:\n" + "\n".join(bad))
EOF

step "schedules against jax's own CUDA backend (bench/gpu_schedule.py: compile-only)"
(cd "$work" && timeout 600 "$vpy" "$root/bench/gpu_schedule.py" --gpu h100 --topology 1x2x4 --check-bytes \
  --out "$out/schedule.md")

step "tests/test_gpu_compile.py"
cd "$root"
MYPLUGIN_REQUIRE_GPU_COMPILE=1 timeout 600 "$venv/bin/pytest" -q -p no:cacheprovider tests/test_gpu_compile.py \
  tests/test_engine_selection.py -k "gpu_compile or test_gpu_compile" --junitxml="$out/gpu-compile-tests.xml"
step "done"
echo "gpu_compile_matrix: $(($(date +%s) - start)) s in all"
