#!/usr/bin/env bash
# The runs behind the shape-general default on the GPU they run on (its table
# pearl_moe/tuning/<GPU>.json, its results in results/<GPU>/), each sized for one device call
# (10 minutes). `tune`, `prefill8192` and `compare` continue where the previous call stopped;
# repeat them until they report nothing left.
#
#   bash .device/run.sh bash scripts/general_runs.sh tune      # the tuning set -> $OUT/<GPU>.json
#   bash .device/run.sh bash scripts/general_runs.sh prefill8192  # its 8192-token shapes
#   bash .device/run.sh bash scripts/general_runs.sh prefill   # its 1024/4096-token shapes again
#   bash .device/run.sh bash scripts/general_runs.sh midsize   # 128-256 rows per expert again
#   bash .device/run.sh bash scripts/general_runs.sh compare   # held-out + course -> $OUT/compare_general.json
#
# `tune` measures the shapes the table lacks up to 4096 tokens; `prefill8192` the tuning set's
# 8192-token shapes (added after the H200's tuning: its largest rows per expert), continuing where
# a call cut short by its deadline stopped; `prefill` re-times the tuning set's prefill shapes
# (more than 256 rows per expert) over the whole candidate space as it is now (48 configurations
# a shape: the 128 x 128 and 128 x 192 ping-pong tiles, the 256-row tiles and the 2-CTA clusters
# among them, quack's default Hopper configuration and the 128 x 192 ping-pong tile in clusters
# along N too; --limit 49 leaves one slot for a serial-walk twin) at 1024 and 4096 tokens; it
# re-times all 14 each time (211 s on the H200 with 48 candidates), so give it a call of its own
# or a deadline that lets it finish. `midsize` re-times the course's and the tuning set's shapes
# with more than 64 and at most 256 rows per expert (candidates.CLUSTER_ROWS: from there on the
# space also holds the 128 x 192 ping-pong tile and the 2-CTA clusters; the course's 1024-token
# layers are there), 49 candidates a shape, the entries they had replaced: 3 + 18 shapes, the
# course's first (about 15 s a shape on the H200); it continues where a call cut short stopped
# (entries tuned since MIDSIZE_SINCE, when the band's candidates changed, are not tuned again).
# Its space pairs every tile along N (A shared), 128 x 192 among them, and holds the 192 x 128
# ping-pong tile where it pads an expert's rows less (Kimi K3's 146 rows): on a GPU where their
# GPU tests have not run, run `ONLY="clusterN2 rows192" bash scripts/new_kernels_gpu.sh` first.
# COMPARE_SET=held-out (default held-out,course) times one set.
# `compare` first drops the problems whose default pick changed since they were timed, then times
# them again with the problems not yet measured. After a kernel change that leaves the picks
# alone, name the configurations it changed, for instance those with two consumer warpgroups
# (the uniform warpgroup index of 2026-12-06):
#   general_runs.sh compare --remeasure-ours 'pingpong|sm_90a (128|256)x' --why "..."
#
# Between calls, copy $OUT/<GPU>.json over pearl_moe/tuning/<GPU>.json and store
# $OUT/compare_general.json as results/<GPU>/compare_general.json.gz (gzip -9 -n -c ... >, it keeps
# the tree small) and commit them: the next call starts from the files in the working tree.
# The tuner never sees the held-out set (tune refuses it for the package's table).
# The candidate space includes the newer kernel options (2-CTA clusters, 256-row and 128 x 192
# ping-pong tiles at prefill); they have passed their GPU tests on the H200 and the H100
# (scripts/new_kernels_gpu.sh, results/<GPU>/gpu_checks.txt), but for the 128 x 192 ping-pong tile
# along N and the 192 x 128 ping-pong tile, which have passed them on an H100 only. On a new GPU,
# or after changing one of them, run that script first, so that a kernel that hangs or faults is
# found there and not in the middle of a tuning run.
set -euo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
mode=${1:-}
case "$mode" in
  tune | prefill8192 | prefill | midsize | compare) shift ;;  # the rest goes to the command
  *)
    echo "usage: scripts/general_runs.sh tune|prefill8192|prefill|midsize|compare [ARGS...]" >&2
    exit 2
    ;;
esac
# A GPU's runs extend its own table and results only (tune refuses another GPU's table, or one
# of its name with another SM count; bench --resume another GPU's run): the files are named
# after the GPU this runs on.
gpu=$(python3 -c "import torch; from pearl_moe.kernels.autotune import short_gpu_name; print(short_gpu_name(torch.cuda.get_device_name(0)))")
table="pearl_moe/tuning/$gpu.json"
if [ "$mode" != compare ] && [ -f "$table" ]; then  # the tuner extends the table in $OUT
  cp "$table" "$OUT/$gpu.json"
fi
DEADLINE_S=${DEADLINE_S:-470}
# midsize: the band's candidates changed on this date; entries tuned since are not tuned again
MIDSIZE_SINCE=${MIDSIZE_SINCE:-2026-12-06T12:20:00+00:00}
case "$mode" in
  tune)
    python3 -m pearl_moe tune --set tuning --tokens 1,4096,16,256,64,1024 --skip-tuned \
      --limit 24 --rounds 3 --refine-within 0 --skew-tokens 16,64 \
      --deadline-s "$DEADLINE_S" --out "$OUT/$gpu.json" "$@"
    ;;
  prefill8192)
    python3 -m pearl_moe tune --set tuning --tokens 8192 --above-rows-per-expert 256 --skip-tuned \
      --limit 49 --rounds 3 --refine-within 0 --skew-tokens 16,64 \
      --deadline-s "$DEADLINE_S" --out "$OUT/$gpu.json" "$@"
    ;;
  prefill)
    python3 -m pearl_moe tune --set tuning --tokens 4096,1024 --above-rows-per-expert 256 \
      --limit 49 --rounds 3 --refine-within 0 --skew-tokens 16,64 \
      --deadline-s "$DEADLINE_S" --out "$OUT/$gpu.json" "$@"
    ;;
  midsize)
    for set in course tuning; do  # the course's three layers first: its bar is the stricter
      deadline=$([ "$set" = course ] && echo 100 || echo "$((DEADLINE_S - 100))")
      python3 -m pearl_moe tune --set "$set" --above-rows-per-expert 64 \
        --at-most-rows-per-expert 256 --skip-tuned-since "$MIDSIZE_SINCE" --limit 49 --rounds 3 \
        --refine-within 0 --skew-tokens 16,64 --deadline-s "$deadline" --out "$OUT/$gpu.json" "$@"
    done
    ;;
  compare)
    if [ -f "results/$gpu/compare_general.json.gz" ]; then
      gzip -dc "results/$gpu/compare_general.json.gz" > "$OUT/compare_general.json"
    fi
    python3 -m pearl_moe bench --set "${COMPARE_SET:-held-out,course}" \
      --impls pearl,triton,grouped_mm,quack,quack-tuned --kind compare_general --compare \
      --resume --remeasure-changed --deadline-s "$DEADLINE_S" --out "$OUT/compare_general.json" "$@"
    ;;
esac
