#!/usr/bin/env bash
# Decides whether the trial build (uniform_consumer.patch: the consumer warpgroup's index from
# the warp-uniform warpgroup number) goes into the package: the held-out set's 4096-token layers
# (every prefill loss of the compare run is a ping-pong tile there), ours against quack's default
# in interleaved rounds, once with the committed kernel and once with the patch applied to this
# machine's copy of the tree, and the sm_90a kernel tests on the patched kernel in between. The
# decision reads ours / quack in each run (a ratio within a run), not the times across runs.
#
#   bash .device/run.sh bash experiments/down_profile/device_uniform_ab.sh   # -> $OUT/...
#
# Estimated at 8-10 minutes on an H200 (two compile passes of 20 layers, 67 GPU tests; not yet
# run): on a cold compile cache it may need the bench deadlines cut. Its result is
# `python experiments/down_profile/uniform_ab.py $OUT/committed.json $OUT/patched.json`.
# AB_SET / AB_TOKENS choose other layers (the course's, whose worst loss is Kimi K3's gate+up at
# 1024 tokens on a 64 x 256 ping-pong tile: AB_SET=course AB_TOKENS=1024,4096).
set -uo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
here=experiments/down_profile
bench() {  # $1: the run's name
  timeout 170 python3 -m pearl_moe bench --set "${AB_SET:-held-out}" --tokens "${AB_TOKENS:-4096}" \
    --impls pearl,quack \
    --rounds 6 --kind "uniform_ab_$1" --deadline-s 140 --out "$OUT/$1.json" 2>&1 | tail -4
}
bench committed
patch -p1 < "$here/uniform_consumer.patch" || exit 3
# the ping-pong kernels (option variants, the ring-position edge cases) and the held-out picks
timeout 220 python3 -m pytest -m gpu -q -x -k "pingpong or general" tests/test_kernels_sm90_gpu.py \
  tests/test_default_general_gpu.py 2>&1 | tail -3 | tee "$OUT/patched_gpu_tests.txt"
bench patched
patch -R -p1 < "$here/uniform_consumer.patch"
