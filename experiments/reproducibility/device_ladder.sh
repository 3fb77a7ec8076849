#!/usr/bin/env bash
# Every stage of the course's ladder in one session: bash experiments/reproducibility/device_ladder.sh
# Stages 1-7 (their ladder configurations) at every shape of the stages run, and the ring-depth
# sweep, measured back to back on one machine, so that the calibration has one set of records
# whose differences are the kernels' and not the sessions' (experiments/reproducibility/ shows runs
# of one session agree within a few percent while sessions differ by up to 25%).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu \
  --format=csv,noheader -lms 200 > "$OUT/ladder_clocks.csv" 2>&1 &
SMI=$!
timeout 400 python3 -m pearl_moe bench --models all --tokens 1,16,64,256,1024,4096 --skewed-tokens 64 \
  --order tokens --impls pearl-s1,pearl-s2,pearl-s3,pearl-s4,pearl-s5,pearl-s6,pearl-s7 --rounds 7 \
  --kind ladder --out "$OUT/ladder.json" --deadline-s 360 > "$OUT/ladder.log" 2>&1
echo "bench ladder exit $?" >> "$OUT/ladder.log"
SWEEP=""
for d in 2 3 4 5 6; do SWEEP="$SWEEP,pearl-s3:stages=$d"; done
for d in 2 3 4 5 6 7; do SWEEP="$SWEEP,pearl-s3:tile_m=64+stages=$d"; done
timeout 120 python3 -m pearl_moe bench --models glm --tokens 64 --impls "${SWEEP#,}" --rounds 5 \
  --kind ladder_depth --out "$OUT/ladder_depth.json" --deadline-s 100 > "$OUT/ladder_depth.log" 2>&1
echo "bench depth exit $?" >> "$OUT/ladder_depth.log"
kill $SMI
gzip -9 "$OUT/ladder_clocks.csv"
grep -E "exit|deadline|skip" "$OUT"/ladder*.log | tail; ls -la "$OUT"
