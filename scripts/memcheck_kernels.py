# ruff: noqa: B023  (lambdas are called before the loop variable changes)
"""Small grouped GEMMs per sm_90a stage, for compute-sanitizer (memcheck, racecheck, synccheck).

Usage, on a Hopper GPU::

    compute-sanitizer --tool memcheck --report-api-errors no python3 scripts/memcheck_kernels.py
    compute-sanitizer --tool racecheck python3 scripts/memcheck_kernels.py 3 7

Arguments: stage numbers (default 1-7), each optionally with config overrides as the bench names
them (``7:tile_m=128+tile_n=128``: stage 7's course configuration with those fields). For each stage it runs one ragged problem with zero-row
experts (checked against a float32 reference) and, for the grouped stages, the unchecked call
(``check=False``) with offsets that break the contract (negative, decreasing, past the rows),
whose writes must stay inside ``out`` (a guard band of sentinel rows around it is compared).
Exit status 1 if any check fails.
"""

import sys

import torch

from pearl_moe.bench.baselines import parse_overrides
from pearl_moe.bench.verify import random_inputs, run_checked
from pearl_moe.kernels import grouped_gemm
from pearl_moe.kernels.ladder import stage_config

counts = (0, 37, 0, 5, 130, 0, 1)
bad_offsets = ([-5, 10, 20, 30], [20, 10, 30, 30], [10, 20, 30, 1000], [-100, -50, 2**31 - 1, 5])
failed = False
for arg in sys.argv[1:] or ["1", "2", "3", "4", "5", "6", "7"]:
    stage_text, _, overrides = arg.partition(":")
    stage = int(stage_text)
    config = (
        stage_config("sm_90a", stage).with_(**parse_overrides(overrides)) if overrides else None
    )
    A, W, offs = random_inputs(counts, 2816, 512, seed=stage)
    res = run_checked(
        lambda A, W, o, out: grouped_gemm(A, W, o, out=out, stage=stage, config=config),
        A, W, offs, offs.tolist(),
    )  # fmt: skip
    print(f"stage {arg}: {res}", flush=True)
    failed |= not res["ok"]
    if stage == 1:
        continue  # the per-expert loop always checks its offsets on the host
    A, W, _ = random_inputs((10, 10, 5, 5), 256, 320, seed=stage)
    for bad in bad_offsets:
        buf = torch.full((64 + 30 + 64, 256), 3.0, dtype=torch.bfloat16, device="cuda")
        grouped_gemm(
            A, W, torch.tensor(bad, dtype=torch.int32, device="cuda"), out=buf[64:94],
            stage=stage, config=config, check=False,
        )  # fmt: skip
        torch.cuda.synchronize()
        inside = bool((buf[:64] == 3.0).all() and (buf[94:] == 3.0).all())
        print(f"stage {arg}: unchecked offsets {bad}: guard band intact={inside}", flush=True)
        failed |= not inside
sys.exit(1 if failed else 0)
