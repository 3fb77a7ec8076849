#!/usr/bin/env bash
# The A/B that decided whether the trial build (uniform_consumer.patch: the consumer warpgroup's
# index from the warp-uniform warpgroup number; each ping-pong warpgroup's ring over the other's
# tile in one step) went into the package. It is in the package now, so the `before` run reverts
# it on this machine's copy of the tree and the `after` run puts it back: the held-out set's
# 4096-token layers (every prefill loss of the compare run was a ping-pong tile there), ours
# against quack's default in interleaved rounds, and the sm_90a ping-pong and held-out GPU tests
# on the patched kernel in between. The decision reads ours / quack within each run, not the
# times across runs.
#
#   bash .device/run.sh bash experiments/down_profile/device_uniform_ab.sh   # -> $OUT/...
#   python experiments/down_profile/uniform_ab.py $OUT/before.json $OUT/after.json
#
# About 2.5 minutes on an H100 on a cold compile cache (two passes of 20 layers, 67 GPU tests).
# AB_SET / AB_TOKENS choose other layers (the course's at 1024 and 4096 tokens, whose worst loss
# runs a 64 x 256 ping-pong tile: AB_SET=course AB_TOKENS=1024,4096). The runs of 2026-12-06 are
# data/uniform_ab_{heldout,course}_{before,after}.json.gz.
set -uo pipefail
: "${OUT:?run on the device machine, where \$OUT is set}"
here=experiments/down_profile
bench() {  # $1: the run's name
  timeout 170 python3 -m pearl_moe bench --set "${AB_SET:-held-out}" --tokens "${AB_TOKENS:-4096}" \
    --impls pearl,quack \
    --rounds 6 --kind "uniform_ab_$1" --deadline-s 140 --out "$OUT/$1.json" 2>&1 | tail -4
}
patch -R -p1 < "$here/uniform_consumer.patch" || exit 3
bench before
patch -p1 < "$here/uniform_consumer.patch" || exit 3
# the ping-pong kernels (option variants, the ring-position edge cases) and the held-out picks
timeout 220 python3 -m pytest -m gpu -q -x -k "pingpong or general" tests/test_kernels_sm90_gpu.py \
  tests/test_default_general_gpu.py 2>&1 | tail -3 | tee "$OUT/after_gpu_tests.txt"
bench after
