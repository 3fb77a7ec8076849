#!/usr/bin/env bash
# One device call: the layer's GPU tests on the tree as it stands; the per-CTA trace of the 1-token
# GEMMs (cta_trace.patch applied for that step only); the DeepSeek-V2 (EP=8) layer's own shapes
# tuned at decode (both projections, 1 and 16 tokens) into a copy of the committed table.
#
#   bash .device/run.sh bash experiments/decode_waves/device_call1.sh     # -> $OUT/...
set -uo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
HERE=experiments/decode_waves
GPU=$(python3 -c "import torch; from pearl_moe.kernels.autotune import short_gpu_name as s; print(s(torch.cuda.get_device_name()))")
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version,power.limit --format=csv > "$OUT/gpu.txt"
date -u +%FT%TZ >> "$OUT/gpu.txt"
echo "== tests $(date -u +%T)"
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 tests/test_glue_kernels_gpu.py \
  tests/test_moe_layer_gpu.py tests/test_moe_masked.py -k "not bench" > "$OUT/gpu_tests.txt" 2>&1
echo "tests exit $?"; tail -3 "$OUT/gpu_tests.txt"
echo "== trace $(date -u +%T)"
if patch -p1 < $HERE/cta_trace.patch > /dev/null; then
  export PEARL_CTA_TRACE=1
  timeout 45 python3 $HERE/cta_trace.py --out "$OUT/trace_mixtral_down.json.gz" Mixtral-8x7B:down:1 1 \
    default pearl-s5:tile_m=8+tile_n=64+ring_depth=24+shift_a_box=1 2>&1 | grep -v Warning
  timeout 45 python3 $HERE/cta_trace.py --out "$OUT/trace_qwen3.json.gz" Qwen3-30B-A3B:gate_up:1 1 \
    default 2>&1 | grep -v Warning
  timeout 40 python3 $HERE/cta_trace.py --out "$OUT/trace_qwen3_down.json.gz" Qwen3-30B-A3B:down:1 1 \
    default 2>&1 | grep -v Warning
  timeout 60 python3 $HERE/cta_trace.py --out "$OUT/trace_dsv2.json.gz" DeepSeek-V2:gate_up:8 1 \
    default pearl-s5:tile_m=8+tile_n=96+ring_depth=16+shift_a_box=1 \
    pearl-s6:tile_m=8+tile_n=128+ring_depth=12+shift_a_box=1 2>&1 | grep -v Warning
  unset PEARL_CTA_TRACE
  patch -R -p1 < $HERE/cta_trace.patch > /dev/null
else
  echo "patch failed"
fi
echo "== tune $(date -u +%T)"
cp "pearl_moe/tuning/$GPU.json" "$OUT/$GPU.json"
timeout 150 python3 -m pearl_moe tune --model DeepSeek-V2 --ep 8 --projection both \
  --tokens 1,16 --skew-tokens "" --limit 32 --rounds 5 --deadline-s 110 \
  --out "$OUT/$GPU.json" > "$OUT/tune.log" 2>&1
echo "tune exit $?"; tail -5 "$OUT/tune.log"
echo "== done $(date -u +%T)"
