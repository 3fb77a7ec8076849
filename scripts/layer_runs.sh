#!/usr/bin/env bash
# The runs behind the MoE layer's table, sized for device calls of 10 minutes: the whole layer
# forward (pearl, pearl-fused, pearl-gather with the token gather in the gate+up kernel, the torch
# composition, quack's pieces) on the course's three layers (EP=8) and issue 40's five (Qwen3-30B-A3B,
# Qwen1.5-MoE-A2.7B, DeepSeek-V2 under EP=8, GLM-5 under EP=8, Mixtral-8x7B), 1-4096 tokens per GPU
# and skewed routing at 64, interleaved rounds in CUDA graphs. IMPLS=... times a subset.
#
#   bash .device/run.sh bash scripts/layer_runs.sh        # -> $OUT/moe_layer.json.gz
#
# Each call continues from results/<GPU>/moe_layer.json.gz in the working tree (--resume; <GPU> is
# the folder the bench names this GPU's runs by): between calls copy $OUT/moe_layer.json.gz there
# (written gzipped, reproducibly) and commit it; repeat until it reports nothing left. Further
# arguments go to `python -m pearl_moe layer` (for example --remeasure ID,ID --why "..." to measure
# problems again after a default changed). Exit status 3: a kernel faulted (the run names the
# implementation and keeps what it measured); rerun with IMPLS set to the others.
#
#   bash .device/run.sh bash scripts/layer_runs.sh steps  # the step profile at 1, 16 and 256 tokens
#                                                         # on the same layers: each step of our
#                                                         # forward and the whole pearl-fused layer
#                                                         # in graphs of their own, timed and traced
#                                                         # -> $OUT/moe_layer_steps.json.gz, a table
#                                                         # last; one call (no resume)
#   bash .device_sonic/run.sh bash scripts/layer_runs.sh sonic   # SonicMoE, its own run and
#                                                                # environment (carry .device_sonic,
#                                                                # built by scripts/sonic_bundle.sh)
#                                                                # -> $OUT/moe_layer_sonic.json.gz
set -euo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
DEADLINE_S=${DEADLINE_S:-470}
NAME=moe_layer
IMPLS=${IMPLS:-pearl,pearl-fused,pearl-serial,pearl-gather,torch,quack}
RESUME=--resume
case "${1:-}" in
  sonic) NAME=moe_layer_sonic IMPLS=sonic; shift ;;
  steps) NAME=moe_layer_steps IMPLS=pearl-fused RESUME="--steps"; shift ;;
esac
if [ "$RESUME" = --resume ]; then
  COMMITTED=$(python3 -c "import sys, torch; from pearl_moe.bench.cli import default_out; \
print(default_out(torch.cuda.get_device_name(), sys.argv[1]))" "$NAME").gz
  if [ -f "$COMMITTED" ]; then
    cp "$COMMITTED" "$OUT/$NAME.json.gz"
  fi
fi
python3 -m pearl_moe layer --impls "$IMPLS" $RESUME \
  --deadline-s "$DEADLINE_S" --out "$OUT/$NAME.json.gz" "$@"
