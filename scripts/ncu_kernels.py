"""Run implementations once each inside a profiler range, for Nsight Compute (GPU machine).

    ncu --profile-from-start off --clock-control none --metrics ... \\
        python3 scripts/ncu_kernels.py "GLM 5.3" 1024 grouped_mm pearl pearl-s7:tile_m=128+tile_n=128
        python3 scripts/ncu_kernels.py MiniMax-M2:down:8 4096 pearl quack-tuned   # projection, EP

Every implementation is prepared and run twice outside the range first (compiles, autotuners,
workspace), so the profiled range holds only each one's forward call. ``--clock-control none``
leaves the card's clocks as they are (ncu would otherwise lock them to base), so the numbers
include the clock the kernel really ran at (``sm__cycles_elapsed.avg.per_second``).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    import torch

    from pearl_moe.bench.harness import make_inputs
    from pearl_moe.bench.registry import get_impl
    from pearl_moe.workloads import make_problem

    model, tokens, *names = argv
    routing, projection, ep = "balanced", "gate_up", 8
    if ":" in tokens:  # 4096:skewed
        tokens, routing = tokens.split(":")
    if ":" in model:  # "MiniMax-M2:down" or "MiniMax-M2:down:1" (projection, EP degree)
        model, projection, *rest = model.split(":")
        ep = int(rest[0]) if rest else ep
    problem = make_problem(model, int(tokens), ep, routing, projection)
    A, W, offsets = make_inputs(problem, "cuda", seed=0)
    out = torch.empty((A.shape[0], W.shape[1]), dtype=A.dtype, device="cuda")
    runs = []
    for name in names:
        prepared = get_impl(name).prepare(A, W, offsets, list(problem.counts))
        for _ in range(2):
            prepared.run(out)
        runs.append((name, prepared))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, prepared in runs:
        torch.cuda.nvtx.range_push(name)
        prepared.run(out)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    for name, _ in runs:
        print("profiled", problem.name, name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
