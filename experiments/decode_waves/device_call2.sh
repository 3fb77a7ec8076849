#!/usr/bin/env bash
# The second device call: the down GEMM's L2 prefetch before its programmatic wait and two other
# down tiles, A/B in the layer's forward (prefetch_b.patch applied for that step only); then the layer's step profile on
# the five vLLM-comparison layers at 1, 16 and 256 tokens with the table in the working tree.
#
#   bash .device/run.sh bash experiments/decode_waves/device_call2.sh     # -> $OUT/...
set -uo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
HERE=experiments/decode_waves
echo "== prefetch $(date -u +%T)"
if patch -p1 < $HERE/prefetch_b.patch > /dev/null; then
  timeout 240 python3 $HERE/prefetch_ab.py --out "$OUT/prefetch_ab.json" --depths 4,8 \
    --down-configs pearl-s5:tile_m=8+tile_n=64+ring_depth=24+shift_a_box=1,pearl-s6:tile_m=8+tile_n=128+ring_depth=12+shift_a_box=1 \
    Mixtral-8x7B:1:1 Qwen3-30B-A3B:1:1 DeepSeek-V2:1:8 "GLM 5.3:1:8" Qwen3-30B-A3B:16:1 \
    2>&1 | grep -v Warning
  patch -R -p1 < $HERE/prefetch_b.patch > /dev/null
else
  echo "patch failed"
fi
echo "== steps $(date -u +%T)"
timeout 200 python3 -m pearl_moe layer --steps --models vllm --tokens 1,16,256 --deadline-s 150 \
  --out "$OUT/moe_layer_steps.json.gz" > "$OUT/steps.log" 2>&1
echo "steps exit $?"; tail -32 "$OUT/steps.log"
echo "== done $(date -u +%T)"
