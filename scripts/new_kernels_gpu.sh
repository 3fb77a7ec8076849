#!/usr/bin/env bash
# GPU tests of the newer kernel options, one group at a time, each in a process of its own under a
# time limit: a group that hangs (a barrier that never completes) or faults costs its own limit and
# leaves the other groups' results standing.
#
#   bash .device/run.sh bash scripts/new_kernels_gpu.sh        # -> $OUT/new_kernels_gpu.txt
#   ONLY="tile256 clusterM2" bash .device/run.sh bash scripts/new_kernels_gpu.sh   # other groups
#
# Groups: 256-row tiles, 128 x 192 ping-pong tiles, 192 x 128 ping-pong tiles (rows192), 2-CTA
# clusters along N (A multicast), along M (B multicast), the token gather in the producer
# (gather_a), the layer on our kernels, the grouped tile order (n_group), the layer's Triton glue
# (routing metadata, combine) and fused activation tiles 32 (2 b + 1) wide (fused32). All passed
# on the H200 (results/H200/gpu_checks.txt) but clusterN2's 128 x 192 ping-pong case and rows192,
# added after, which passed on an H100 (results/H100/gpu_checks.txt).
# By default the run takes fused32 and the layer. At most LIMIT_S (default 95) seconds a group: six
# groups fit one device call of 10 minutes. Each line of the summary is
# `group: <pytest summary or "timed out after N s" / exit status>`.
set -uo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
LIMIT_S=${LIMIT_S:-95}
ONLY=${ONLY:-fused32 layer}  # groups to run (all: tile256 pingpong192 rows192 clusterN2 clusterM2 gather_a layer ngroup glue fused32)
SUMMARY="$OUT/new_kernels_gpu.txt"
: > "$SUMMARY"
run_group() {
  local name=$1 selector=$2 files=$3
  case " $ONLY " in *" $name "*) ;; *) return 0 ;; esac
  local log="$OUT/gpu_$name.log"
  # shellcheck disable=SC2086
  timeout "$LIMIT_S" python3 -m pytest -m gpu -q -p no:cacheprovider -rfE $files -k "$selector" \
    > "$log" 2>&1
  local rc=$?
  local line
  if [ $rc -eq 124 ]; then
    line="timed out after $LIMIT_S s (a hang?)"
  else
    line=$(grep -E "passed|failed|error|skipped" "$log" | tail -1)
    line="${line:-exit status $rc}"
  fi
  echo "$name: $line" | tee -a "$SUMMARY"
}
run_group tile256 "256x and not cluster and not gatherA and not gather_a" tests/test_kernels_sm90_gpu.py
run_group pingpong192 "128x192-pingpong and not cluster" tests/test_kernels_sm90_gpu.py
run_group rows192 "192x128 or 192_row or 192-row" tests/test_kernels_sm90_gpu.py
run_group clusterN2 "clusterN2 and not ng2 and not ng8" tests/test_kernels_sm90_gpu.py
run_group clusterM2 "clusterM2 and not ng2 and not ng8" tests/test_kernels_sm90_gpu.py
run_group gather_a "gather_a" tests/test_kernels_sm90_gpu.py
run_group layer "matches_the_reference or match_the_reference or converted_weight" tests/test_moe_layer_gpu.py
run_group ngroup "ng2 or ng8 or grouped_tile_order" tests/test_kernels_sm90_gpu.py
run_group glue "glue or routing_kernels or combine_kernel or out_of_range" tests/test_glue_kernels_gpu.py
run_group fused32 "16x96-shiftA-swiglu or 64x160-geglu or 64x32-swiglu or s5-64x224 or s5-8x96" tests/test_kernels_gpu.py
