# ruff: noqa: B023  (lambdas are called before the loop variable changes)
"""One small ragged grouped GEMM per sm_90a stage (for compute-sanitizer memcheck).

Usage, on a Hopper GPU: ``compute-sanitizer --tool memcheck --report-api-errors no python3
scripts/memcheck_kernels.py [STAGE ...]`` (default stages: 1 2 3).
"""

import sys

from pearl_moe.kernels import grouped_gemm
from pearl_moe.kernels.verify import random_inputs, run_checked

counts = (0, 37, 0, 5, 130, 0, 1)
failed = False
for stage in [int(s) for s in sys.argv[1:]] or [1, 2, 3]:
    A, W, offs = random_inputs(counts, 2816, 512, seed=stage)
    res = run_checked(
        lambda A, W, o, out: grouped_gemm(A, W, o, out=out, stage=stage), A, W, offs, offs.tolist()
    )
    print(f"stage {stage}: {res}", flush=True)
    failed |= not res["ok"]
sys.exit(1 if failed else 0)
