#!/usr/bin/env bash
# The first-GPU check (issue 42): on a machine whose JAX sees a GPU, in at
# most 8 minutes, runs
#   1. the JAX numerics tests on the GPU (float32; float16 and bfloat16
#      inputs with float32 statistics; both statistic storages; training
#      and inference; the bytes-accessed test with the GPU's least traffic),
#   2. benchmarks/jax_bench.py (export vs the hand-written anchor, mode JAX
#      vs export),
#   3. benchmarks/jax_bandwidth.py (the BN kernels' achieved bandwidth
#      against a plain copy on the same device),
# and writes one report to benchmarks/results/gpu.md.  On a machine without
# a GPU it prints "no GPU" and exits 0, installing nothing.
#
# The machine may start bare: unless GPU_PYTHON names a Python whose JAX
# already sees the GPU, it makes a venv (GPU_VENV, default .gpu-venv) and
# installs this package with jax[cuda12] into it.  pip honours
# PIP_FIND_LINKS / PIP_INDEX_URL for a machine without the internet.
#
# Run:  bash benchmarks/gpu_check.sh
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${GPU_CHECK_OUT:-benchmarks/results/gpu.md}
# GPU_CHECK_PLATFORM=cpu (with GPU_PYTHON and a stand-in nvidia-smi) runs
# the whole check on a CPU: a test of this script, not a GPU figure
PLATFORM=${GPU_CHECK_PLATFORM:-gpu}
DEADLINE=$((SECONDS + ${GPU_CHECK_SECONDS:-470}))  # 8 minutes, less a margin

left() { echo $((DEADLINE - SECONDS)); }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "no GPU"
    exit 0
fi

sees_gpu() {
    "$1" -c "import jax, sys; sys.exit(jax.devices()[0].platform != '$PLATFORM')" >/dev/null 2>&1
}

PY=${GPU_PYTHON:-}
if [ -z "$PY" ] || ! sees_gpu "$PY"; then
    VENV=${GPU_VENV:-$ROOT/.gpu-venv}
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV" || { echo "gpu_check: cannot make a venv at $VENV"; exit 1; }
    fi
    PY=$VENV/bin/python
    if ! sees_gpu "$PY"; then
        echo "gpu_check: installing jax[cuda12] and this package into $VENV"
        timeout $(( $(left) / 2 )) "$PY" -m pip install -q --upgrade pip >/dev/null 2>&1
        timeout $(( $(left) / 2 )) "$PY" -m pip install -q -e . 'jax[cuda12]' optax \
            pytest hypothesis || { echo "gpu_check: pip install failed (no index reachable?)"; exit 1; }
        "$PY" -m pip install -q flax >/dev/null 2>&1 || echo "gpu_check: no flax: jax_bench uses its lax anchor"
    fi
fi
if ! sees_gpu "$PY"; then
    echo "no GPU"  # a GPU, but JAX cannot use it
    "$PY" -c 'import jax; print("jax sees:", jax.devices())' 2>&1 | tail -1
    exit 0
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # several processes share the GPU in the tests

# 1. numerics: every JAX-mode and export test (their ids or modules name jax)
TESTS="tests/ops/test_bn_numerics.py tests/ops/test_moments.py tests/ops/test_bn_api.py
tests/ops/test_running_average.py tests/ops/test_jax_traffic.py tests/layers/test_normalization.py
tests/test_jax_export.py"
# shellcheck disable=SC2086
timeout $(( $(left) * 45 / 100 )) "$PY" -m pytest -p no:cacheprovider -n 0 -q -k "jax or JAX" \
    $TESTS >"$TMP/tests.txt" 2>&1
TESTS_RC=$?

# 2. the network benchmark (export, anchor, mode JAX)
timeout $(( $(left) * 55 / 100 )) "$PY" benchmarks/jax_bench.py --batch 8 64 256 --reps 20 \
    --no-bandwidth >"$TMP/jax_bench.txt" 2>&1
BENCH_RC=$?

# 3. bandwidth against a copy
timeout $(( $(left) > 10 ? $(left) - 5 : 5 )) "$PY" benchmarks/jax_bandwidth.py --reps 20 \
    >"$TMP/bandwidth.txt" 2>&1
BW_RC=$?

{
    echo "# benchmarks/gpu_check.sh"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'),"
    echo "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1),"
    echo "$("$PY" -c 'import jax; print("jax", jax.__version__)')."
    echo
    echo "## BN kernels' bandwidth (benchmarks/jax_bandwidth.py, exit $BW_RC)"
    echo
    cat "$TMP/bandwidth.txt"
    echo
    echo "## JAX numerics tests on the GPU (exit $TESTS_RC)"
    echo
    echo '```'
    [ "$TESTS_RC" -eq 124 ] && echo "(stopped at its share of the 8 minutes)"
    if grep -qE "passed|failed|error" "$TMP/tests.txt"; then
        grep -E "passed|failed|error|FAILED|ERROR" "$TMP/tests.txt" | tail -40
    else
        tail -20 "$TMP/tests.txt"
    fi
    echo '```'
    echo
    echo "## benchmarks/jax_bench.py (exit $BENCH_RC)"
    echo
    echo '```'
    tail -40 "$TMP/jax_bench.txt"
    echo '```'
} >"$OUT"
cat "$OUT"
echo "gpu_check: wrote $OUT in ${SECONDS}s"
[ "$TESTS_RC" -eq 0 ] && [ "$BENCH_RC" -eq 0 ] && [ "$BW_RC" -eq 0 ]
