#!/usr/bin/env bash
# The next device call, prepared and not yet run (about five minutes): static against dynamic tile
# schedules on the large 1-token GEMMs (dynamic_tiles.patch applied for that step only); the
# per-CTA trace of the layer's other 1-token picks (Mixtral-8x7B's down, 64 working CTAs; GLM
# 5.3's gate+up; DeepSeek-V2's down); Nsight Compute on Qwen3-30B-A3B's 1-token down GEMM (one
# launch, clocks left alone).
#
#   bash .device/run.sh bash experiments/decode_waves/device_call_b.sh     # -> $OUT/...
set -uo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
HERE=experiments/decode_waves
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version,power.limit --format=csv > "$OUT/gpu.txt"
if patch -p1 < $HERE/dynamic_tiles.patch > /dev/null; then
  S5=pearl-s5:tile_m=8+shift_a_box=1
  timeout 70 python3 $HERE/dynamic_ab.py --out "$OUT/dynamic_dsv2.json" DeepSeek-V2:gate_up:8 1 \
    default "$S5+tile_n=160+ring_depth=10" "$S5+tile_n=96+ring_depth=16" \
    "$S5+tile_n=64+ring_depth=24" "$S5+tile_n=32+ring_depth=43" 2>&1 | grep -v Warning
  timeout 70 python3 $HERE/dynamic_ab.py --out "$OUT/dynamic_mixtral.json" Mixtral-8x7B:down:1 1 \
    default "$S5+tile_n=128+ring_depth=12" "$S5+tile_n=64+ring_depth=24" \
    "$S5+tile_n=32+ring_depth=43" 2>&1 | grep -v Warning
  timeout 50 python3 $HERE/dynamic_ab.py --out "$OUT/dynamic_glm.json" "GLM 5.3:gate_up:8" 1 \
    default "$S5+tile_n=128+ring_depth=12" "$S5+tile_n=64+ring_depth=24" 2>&1 | grep -v Warning
  patch -R -p1 < $HERE/dynamic_tiles.patch > /dev/null
fi
if patch -p1 < $HERE/cta_trace.patch > /dev/null; then
  export PEARL_CTA_TRACE=1
  timeout 40 python3 $HERE/cta_trace.py --out "$OUT/trace_mixtral_down_pick.json.gz" \
    Mixtral-8x7B:down:1 1 default 2>&1 | grep -v Warning
  timeout 40 python3 $HERE/cta_trace.py --out "$OUT/trace_glm.json.gz" "GLM 5.3:gate_up:8" 1 \
    default 2>&1 | grep -v Warning
  timeout 40 python3 $HERE/cta_trace.py --out "$OUT/trace_dsv2_down.json.gz" DeepSeek-V2:down:8 1 \
    default 2>&1 | grep -v Warning
  unset PEARL_CTA_TRACE
  patch -R -p1 < $HERE/cta_trace.patch > /dev/null
fi
NCU=/usr/local/cuda/bin/ncu
timeout 80 $NCU --profile-from-start off --clock-control none --set full --import-source no \
  -o "$OUT/qwen3_down" python3 scripts/ncu_kernels.py Qwen3-30B-A3B:down:1 1 pearl > "$OUT/ncu.log" 2>&1
echo "ncu exit $?"
$NCU -i "$OUT/qwen3_down.ncu-rep" --csv --page details > "$OUT/qwen3_down_details.csv" 2>&1
grep -i '"Duration"\|"Elapsed Cycles"\|"SM Active Cycles"\|"DRAM Throughput"\|"Dynamic Shared' \
  "$OUT/qwen3_down_details.csv" | cut -c1-200
rm -f "$OUT/qwen3_down.ncu-rep"
echo "== done $(date -u +%T)"
