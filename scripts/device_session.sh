#!/usr/bin/env bash
# One device call on a 2-GPU machine (run from the checkout root on the GPU machine):
#   bash .device/run.sh bash scripts/device_session.sh
# GPU 0: scripts/h200_session.py (tune, compare of the default call with the baselines, ablation of
# stages 3-7, first call), files under $OUT. GPU 1, at the same time: the GPU tests of the kernel
# options and of the benchmark pieces. Extra arguments go to h200_session.py.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
(
  CUDA_VISIBLE_DEVICES=1 timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider \
    tests/test_kernels_sm90_gpu.py -k "variants or bad_offsets or edge" \
    tests/test_compile_cache_gpu.py tests/test_bench_gpu.py > "$OUT/pytest_gpu1.log" 2>&1
  echo "pytest exit $?" >> "$OUT/pytest_gpu1.log"
) &
CUDA_VISIBLE_DEVICES=0 timeout 560 python3 scripts/h200_session.py --out "$OUT" "$@" > "$OUT/session.log" 2>&1
echo "session exit $?" >> "$OUT/session.log"
wait
tail -n 4 "$OUT/pytest_gpu1.log"
tail -n 45 "$OUT/session.log"
