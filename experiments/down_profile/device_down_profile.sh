#!/usr/bin/env bash
# Why is our 128 x 192 ping-pong kernel (clusters of two along M) slower than quack's own default
# configuration, the same tile, on down projections at prefill (small K, a large output)?
#
#   bash .device/run.sh bash experiments/down_profile/device_down_profile.sh       # -> $OUT/...
#   bash .device/run.sh bash experiments/down_profile/device_down_profile.sh sass  # -> $OUT/sass_*
#
# The first form: Nsight Compute sections, one launch each (clocks left alone), on three down
# layers at 4096 tokens, then the same implementations in interleaved CUDA-graph rounds (about
# 2.5 minutes on an H100, 2026-12-06). The second: executed instructions and warp-stall samples by
# SASS line (SourceCounters) of ours and quack's default on MiniMax-M2's down (under a minute).
# `python experiments/down_profile/extract.py SECTIONS_DIR SASS_DIR` reduces both to the data.
set -uo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
NCU=/usr/local/cuda/bin/ncu
if [ "${1:-}" = sass ]; then
  timeout 240 $NCU --profile-from-start off --clock-control none --set none \
    --section InstructionStats --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight --import-source no -o "$OUT/mm_down" \
    python3 scripts/ncu_kernels.py MiniMax-M2:down:8 4096 pearl quack > "$OUT/ncu_run.log" 2>&1
  echo "ncu exit $?"
  for id in 0 1; do
    $NCU -i "$OUT/mm_down.ncu-rep" --csv --page source --print-source sass --launch-skip $id \
      --launch-count 1 > "$OUT/sass_$id.csv"
  done
  gzip -9 "$OUT"/sass_*.csv
  rm -f "$OUT/mm_down.ncu-rep"
  exit 0
fi
P192="pearl-s7:tile_m=128+tile_n=192+b_k_tiles=1+cluster_m=2"
IMPLS=(pearl "$P192" "$P192+n_group=8" quack)
MODELS=(GLM-4.5-Air:down:8 MiniMax-M2:down:8 Qwen2-57B-A14B:down:8)
for spec in "${MODELS[@]}"; do
  name=${spec%%:*}
  timeout 200 $NCU --profile-from-start off --clock-control none --csv \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy \
    python3 scripts/ncu_kernels.py "$spec" 4096 "${IMPLS[@]}" \
    > "$OUT/ncu_${name}_4096.csv" 2> "$OUT/ncu_${name}.err"
  echo "$spec: ncu exit $?" | tee -a "$OUT/down_profile.txt"
done
timeout 200 python3 -m pearl_moe bench --models GLM-4.5-Air,MiniMax-M2,Qwen2-57B-A14B --ep 8 \
  --projection down --tokens 4096 --rounds 6 --impls "$(IFS=,; echo "${IMPLS[*]}")" \
  --kind down_profile --out "$OUT/down_profile.json" 2>&1 | tail -20 | tee -a "$OUT/down_profile.txt"
