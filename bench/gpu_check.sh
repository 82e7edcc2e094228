#!/usr/bin/env bash
# Attention, token bitmask and tokenizer kernels on a GPU, in under 9 minutes: build the
# extension with nvcc (sm_90), run every kernel test on CUDA (tests/kernels holds both),
# bench/attention.py and bench/token_bitmask.py, then the GPU tokenizer's exactness tests on
# CUDA and bench/tokenize_gpu.py.  With $OUT set, the benchmark tables land in
# $OUT/attention.md, $OUT/token_bitmask.md and $OUT/tokenize_gpu.md and each stage's log
# beside them.  Exits non-zero if any stage failed; later stages still run so one broken
# piece does not hide the others.  Every stage's limit is also cut to what is left of the
# script's 530-second budget, so the script ends in time whatever the stages before did.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python3 || command -v python)}
OUT_DIR=${OUT:-/tmp/zllm_gpu_check}
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
failed=()
BUDGET_END=$((SECONDS + 530))

stage() {  # stage NAME SECONDS CMD...: run with a time limit, log to $OUT_DIR/NAME.log
  local name=$1 limit=$2
  shift 2
  ((limit > BUDGET_END - SECONDS)) && limit=$((BUDGET_END - SECONDS))
  if ((limit < 5)); then
    echo "== $name skipped: the script's time budget is spent"
    failed+=("$name")
    return
  fi
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
  and hasattr(n, \"apply_token_bitmask_cuda\") and hasattr(n, \"GpuTokenizerCuda\")'"
stage tests 210 "$PY" -m pytest -q -rs tests/kernels
stage bench 150 "$PY" bench/attention.py --out "$OUT_DIR/attention.md"
stage bench_bitmask 45 "$PY" bench/token_bitmask.py --out "$OUT_DIR/token_bitmask.md"
# The tokenizer's exactness tests whose kernels run on CUDA (their emulated twins ran in CI),
# then its benchmark: 10K to 4M characters against the CPU path and tiktoken.
stage tokenizer_tests 75 "$PY" -m pytest -q -rs tests/tokenizer/test_gpu_tokenizer.py tests/tokenizer/test_device_route.py -k cuda
stage bench_tokenize 60 "$PY" bench/tokenize_gpu.py --rounds 30 --out "$OUT_DIR/tokenize_gpu.md"

if ((${#failed[@]})); then
  echo "failed stages: ${failed[*]}"
  exit 1
fi
echo "all stages passed; tables: $OUT_DIR/attention.md, $OUT_DIR/token_bitmask.md, $OUT_DIR/tokenize_gpu.md"
