#!/usr/bin/env bash
# Does a kernel's measured time depend on the other kernels of its run?
#   bash experiments/reproducibility/device_designs.sh
# Two run designs at 1024 and 4096 tokens, alternated A B A B in one session, each in a fresh
# process: A = the replicate design (experiments/reproducibility/device_replicates.sh: stages 3, 5, 6, their dynamic
# twins and a 128 x 256 control), B = the ladder design (experiments/reproducibility/device_ladder.sh: stages 1-7).
# Stages 3, 5 and 6 are in both, so each is timed twice per design.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
A="pearl-s3,pearl-s3:tile_m=128+tile_n=256+ring_depth=4,pearl-s5,pearl-s5:schedule=dynamic,pearl-s6,pearl-s6:schedule=dynamic"
B="pearl-s1,pearl-s2,pearl-s3,pearl-s4,pearl-s5,pearl-s6,pearl-s7"
for step in A1 B1 A2 B2; do
  design=${step:0:1}
  if [ "$design" = A ]; then LIST=$A; ROUNDS=6; else LIST=$B; ROUNDS=7; fi
  echo "== $step $(date -u +%T)" >> "$OUT/designs.log"
  timeout 140 python3 -m pearl_moe bench --models all --tokens 1024,4096 --order tokens \
    --impls "$LIST" --rounds $ROUNDS --kind "design_$design" --out "$OUT/design_$step.json" \
    --deadline-s 120 >> "$OUT/designs.log" 2>&1
  echo "bench $step exit $? $(date -u +%T)" >> "$OUT/designs.log"
done
grep -E "^== |exit" "$OUT/designs.log"; ls -la "$OUT"
