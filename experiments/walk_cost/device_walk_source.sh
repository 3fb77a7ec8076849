#!/usr/bin/env bash
# Where the warp-parallel walk's extra cycles go (GLM 5.3, 4096 tokens, stage 6):
#   bash experiments/walk_cost/device_walk_source.sh
# Nsight Compute source counters (executed instructions, L2 requests and warp stalls per SASS
# instruction) of stage 6 with each walk, exported per instruction as CSV.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
NCU=/usr/local/cuda/bin/ncu
i=0
for impl in pearl-s6 pearl-s6:walk=serial; do
  i=$((i + 1))
  timeout 200 $NCU --profile-from-start off --clock-control none --section SourceCounters \
    --section WarpStateStats --section SchedulerStats --section LaunchStats -o "$OUT/walk$i" \
    python3 scripts/ncu_kernels.py "GLM 5.3" 4096 "$impl" > "$OUT/ncu$i.log" 2>&1
  echo "ncu $impl exit $?" >> "$OUT/ncu$i.log"
  $NCU --import "$OUT/walk$i.ncu-rep" --page source --csv --print-source sass \
    > "$OUT/source$i.csv" 2>> "$OUT/ncu$i.log"
  $NCU --import "$OUT/walk$i.ncu-rep" --page details --csv > "$OUT/details$i.csv" 2>> "$OUT/ncu$i.log"
  rm -f "$OUT/walk$i.ncu-rep"
done
tail -n 3 "$OUT"/ncu*.log; wc -l "$OUT"/*.csv
