#!/usr/bin/env bash
# The closing device call on a 2-GPU machine (run from the checkout root on the GPU machine):
#   bash .device/run.sh bash scripts/device_final.sh [h200_session.py arguments]
# GPU 0: scripts/h200_session.py with the given arguments (files under $OUT).
# GPU 1, at the same time: every GPU test, then compute-sanitizer memcheck (all stages, unchecked
# bad offsets), racecheck and synccheck (warp-specialized stages); logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SAN=/usr/local/cuda/bin/compute-sanitizer
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 330 python3 -m pytest -m gpu -q -p no:cacheprovider > "$OUT/pytest_gpu.log" 2>&1
  echo "pytest exit $?" >> "$OUT/pytest_gpu.log"
  timeout 150 $SAN --tool memcheck --report-api-errors no python3 scripts/memcheck_kernels.py > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $?" >> "$OUT/memcheck.log"
  for tool in racecheck synccheck; do
    timeout 60 $SAN --tool $tool --report-api-errors no python3 scripts/memcheck_kernels.py 3 4 6 7 > "$OUT/$tool.log" 2>&1
    echo "$tool exit $?" >> "$OUT/$tool.log"
  done
) &
CUDA_VISIBLE_DEVICES=0 timeout 560 python3 scripts/h200_session.py --out "$OUT" "$@" > "$OUT/session.log" 2>&1
echo "session exit $?" >> "$OUT/session.log"
wait
tail -n 3 "$OUT/pytest_gpu.log"
for f in memcheck racecheck synccheck; do grep -E "ERROR SUMMARY|RACECHECK SUMMARY|exit|intact=False|ok': False" "$OUT/$f.log" | tail -n 3; done
tail -n 32 "$OUT/session.log"
