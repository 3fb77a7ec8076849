#!/usr/bin/env bash
# The H200 run behind the MoE layer's table, sized for device calls of 10 minutes: the whole layer
# forward (pearl, pearl-fused, pearl-gather with the token gather in the gate+up kernel, the torch
# composition, quack's pieces) on the course's three models, EP=8, 1-4096 tokens per GPU and skewed
# routing at 64, interleaved rounds in CUDA graphs. IMPLS=... times a subset.
#
#   bash .device/run.sh bash scripts/layer_runs.sh        # -> $OUT/moe_layer.json
#
# Each call continues from results/H200/moe_layer.json.gz in the working tree (--resume): between
# calls store $OUT/moe_layer.json there (gzip -9 -n -c $OUT/moe_layer.json > ...) and commit it;
# repeat until it reports nothing left. Further arguments go to `python -m pearl_moe layer`
# (for example --remeasure ID,ID --why "..." to measure problems again after a default changed).
# Exit status 3: a kernel faulted (the run names the implementation and keeps what it measured);
# rerun with IMPLS set to the others.
#
#   bash .device_sonic/run.sh bash scripts/layer_runs.sh sonic   # SonicMoE, its own run and
#                                                                # environment (carry .device_sonic,
#                                                                # built by scripts/sonic_bundle.sh)
#                                                                # -> $OUT/moe_layer_sonic.json
set -euo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
DEADLINE_S=${DEADLINE_S:-470}
NAME=moe_layer
IMPLS=${IMPLS:-pearl,pearl-fused,pearl-gather,torch,quack}
if [ "${1:-}" = sonic ]; then
  NAME=moe_layer_sonic
  IMPLS=sonic
  shift
fi
if [ -f "results/H200/$NAME.json.gz" ]; then
  gzip -dc "results/H200/$NAME.json.gz" > "$OUT/$NAME.json"
fi
python3 -m pearl_moe layer --impls "$IMPLS" --resume \
  --deadline-s "$DEADLINE_S" --out "$OUT/$NAME.json" "$@"
