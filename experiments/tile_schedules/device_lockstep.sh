#!/usr/bin/env bash
# The lockstep schedule: bash experiments/tile_schedules/device_lockstep.sh
#  1. GPU tests of the lockstep schedule (the option variants, bit-equality with the static
#     schedule on a prefill problem, the counter buffer back at 0, graph replays);
#  2. stages 3-7 with the static and the lockstep schedule (stages 4-6 also dynamic), interleaved
#     rounds, GLM 5.3 / DeepSeek V4 Pro / Kimi K3 at 64, 1024 and 4096 tokens
#     (experiments/tile_schedules/data/lockstep.json.gz).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_kernels_sm90_gpu.py \
  -k "lockstep" > "$OUT/pytest_lockstep.log" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_lockstep.log"
tail -n 3 "$OUT/pytest_lockstep.log"
IMPLS=()
for s in 3 4 5 6 7; do
  IMPLS+=("pearl-s$s" "pearl-s$s:schedule=lockstep")
  if [[ $s == 4 || $s == 5 || $s == 6 ]]; then IMPLS+=("pearl-s$s:schedule=dynamic"); fi
done
LIST=$(IFS=,; echo "${IMPLS[*]}")
timeout 340 python3 -m pearl_moe bench --models all --tokens 64,1024,4096 --order tokens --impls "$LIST" \
  --rounds 6 --warmup-replays 3 --kind lockstep --out "$OUT/lockstep.json" --deadline-s 300 \
  > "$OUT/lockstep.log" 2>&1
echo "bench exit $?" >> "$OUT/lockstep.log"
grep -v "compile" "$OUT/lockstep.log" | tail -n 40
ls -la "$OUT"
