#!/usr/bin/env bash
# Attention and token bitmask kernels on a GPU, in under 9 minutes: build the extension
# with nvcc (sm_90), run every kernel test on CUDA (tests/kernels holds both), then
# bench/attention.py and bench/token_bitmask.py.  With $OUT set, the benchmark tables land
# in $OUT/attention.md and $OUT/token_bitmask.md and each stage's log beside them.  Exits
# non-zero if any stage failed; later stages still run so one broken piece does not hide
# the others.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python3 || command -v python)}
OUT_DIR=${OUT:-/tmp/zllm_gpu_check}
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
failed=()

stage() {  # stage NAME SECONDS CMD...: run with a time limit, log to $OUT_DIR/NAME.log
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s)"
  local start=$SECONDS
  if timeout "$limit" "$@" 2>&1 | tee "$OUT_DIR/$name.log"; then
    echo "== $name ok in $((SECONDS - start))s"
  else
    echo "== $name FAILED after $((SECONDS - start))s"
    failed+=("$name")
  fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT_DIR/gpu.txt"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
stage build 120 bash -c "cmake -S . -B build/gpu ${generator[*]} -DPython_EXECUTABLE=$(command -v "$PY") \
  -Dpybind11_DIR=\$($PY -m pybind11 --cmakedir) -DZLLM_CUDA=ON && cmake --build build/gpu -j \
  && $PY -c 'import zllm_core._native as n; assert n.with_cuda and hasattr(n, \"paged_decode_cuda\") \
  and hasattr(n, \"apply_token_bitmask_cuda\")'"
stage tests 210 "$PY" -m pytest -q -rs tests/kernels
stage bench 150 "$PY" bench/attention.py --out "$OUT_DIR/attention.md"
stage bench_bitmask 45 "$PY" bench/token_bitmask.py --out "$OUT_DIR/token_bitmask.md"

if ((${#failed[@]})); then
  echo "failed stages: ${failed[*]}"
  exit 1
fi
echo "all stages passed; tables: $OUT_DIR/attention.md, $OUT_DIR/token_bitmask.md"
