#!/usr/bin/env bash
# One device call (under ten minutes): the layer's GPU tests on the tree as it stands; the down
# GEMM's L2 prefetch before its programmatic wait and two other down tiles, A/B inside the layer's
# forward (prefetch_b.patch applied for that step only); the per-CTA trace of 1-token GEMMs
# (cta_trace.patch applied for that step only).
#
#   bash .device/run.sh bash experiments/decode_waves/device_call.sh     # -> $OUT/...
set -uo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
HERE=experiments/decode_waves
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version,power.limit --format=csv > "$OUT/gpu.txt"
date -u +%FT%TZ >> "$OUT/gpu.txt"
echo "== tests $(date -u +%T)"
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 tests/test_glue_kernels_gpu.py \
  tests/test_moe_layer_gpu.py tests/test_moe_masked.py -k "not bench" > "$OUT/gpu_tests.txt" 2>&1
echo "tests exit $?"; tail -3 "$OUT/gpu_tests.txt"
echo "== prefetch $(date -u +%T)"
if patch -p1 < $HERE/prefetch_b.patch > /dev/null; then
  timeout 200 python3 $HERE/prefetch_ab.py --out "$OUT/prefetch_ab.json" --depths 4,8 --rounds 7 \
    --down-configs pearl-s5:tile_m=8+tile_n=64+ring_depth=24+shift_a_box=1 \
    Mixtral-8x7B:1:1 Qwen3-30B-A3B:1:1 DeepSeek-V2:1:8 "GLM 5.3:1:8" 2>&1 | grep -v Warning
  patch -R -p1 < $HERE/prefetch_b.patch > /dev/null
else
  echo "patch failed"
fi
echo "== trace $(date -u +%T)"
if patch -p1 < $HERE/cta_trace.patch > /dev/null; then
  export PEARL_CTA_TRACE=1
  timeout 45 python3 $HERE/cta_trace.py --out "$OUT/trace_mixtral_down.json.gz" Mixtral-8x7B:down:1 1 \
    default pearl-s5:tile_m=8+tile_n=64+ring_depth=24+shift_a_box=1 2>&1 | grep -v Warning
  timeout 35 python3 $HERE/cta_trace.py --out "$OUT/trace_qwen3.json.gz" Qwen3-30B-A3B:gate_up:1 1 \
    default 2>&1 | grep -v Warning
  timeout 35 python3 $HERE/cta_trace.py --out "$OUT/trace_qwen3_down.json.gz" Qwen3-30B-A3B:down:1 1 \
    default 2>&1 | grep -v Warning
  timeout 40 python3 $HERE/cta_trace.py --out "$OUT/trace_dsv2.json.gz" DeepSeek-V2:gate_up:8 1 \
    default pearl-s5:tile_m=8+tile_n=96+ring_depth=16+shift_a_box=1 2>&1 | grep -v Warning
  unset PEARL_CTA_TRACE
  patch -R -p1 < $HERE/cta_trace.patch > /dev/null
else
  echo "patch failed"
fi
echo "== done $(date -u +%T)"
