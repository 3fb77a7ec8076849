"""Static against dynamic tile schedules on decode GEMMs (GPU; ``dynamic_tiles.patch`` applied).

    python3 experiments/decode_waves/dynamic_ab.py --out $OUT/dynamic_ab.json \\
        DeepSeek-V2:gate_up:8 1 default pearl-s5:tile_m=8+tile_n=64+ring_depth=24+shift_a_box=1

The CTA traces showed that where each CTA computes one tile of a large decode GEMM, SMs that draw
their bytes faster finish early and wait. With the patch, a kernel built while
``PEARL_DYNAMIC_TILES=1`` is set computes its first tile as before (tile = CTA) and then takes
the next from a counter in global memory (``atomicAdd``), so fast CTAs compute more tiles; the
producer passes each tile's number to the consumers through the ring entry of its first k tile.
For every configuration given (``default``: this GPU's pick), the static and the dynamic kernel
(the latter only where it applies: no wide B entries, clusters, split accumulator or gather) run
the problem in CUDA graphs of ``--reps`` launches each, interleaved rounds; each output is checked
against a float32 reference after the replays, and a dynamic output must equal its static twin's
bits. Median us per launch, and the ratio to the static pick.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("problem", help="MODEL:PROJECTION:EP, e.g. DeepSeek-V2:gate_up:8")
    p.add_argument("tokens", type=int)
    p.add_argument("configs", nargs="+", help="'default' (this GPU's pick) or pearl-sN:...")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    import torch

    from pearl_moe.bench.baselines import parse_variant, variant_config
    from pearl_moe.bench.harness import make_inputs, reference_fp32
    from pearl_moe.kernels import autotune
    from pearl_moe.kernels.api import arch_of
    from pearl_moe.kernels.dispatch import stage_module
    from pearl_moe.kernels.host import cuda_stream, device_end_offsets
    from pearl_moe.workloads import make_problem

    model, projection, ep = args.problem.split(":")
    problem = make_problem(model, args.tokens, int(ep), "balanced", projection)
    device = torch.device("cuda")
    arch = arch_of(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    A, W, offsets = make_inputs(problem, "cuda", seed=0)
    ends = device_end_offsets(offsets, problem.experts)
    ref = reference_fp32(A, W, list(problem.counts))
    tol = 4e-2 * ref.abs().max().item()

    variants = {}
    for spec in args.configs:
        if spec == "default":
            choice = autotune.pick(arch, problem.n, problem.k, problem.experts, problem.rows,
                                   autotune.gpu_name())  # fmt: skip
            stage, config = choice.stage, choice.config.resolved()
        else:
            stage, overrides = parse_variant(spec)
            config = variant_config(arch, stage, overrides).resolved()
        module = stage_module(arch, stage)
        for dynamic in (False, True):
            os.environ["PEARL_DYNAMIC_TILES"] = "1" if dynamic else "0"
            kernel = module.build(config, sms)
            if dynamic and not getattr(kernel, "dynamic", False):
                continue
            fn = module.compile_kernel(config, problem.n, problem.k, problem.experts, sms)
            name = f"{config.describe()}{', dynamic' if dynamic else ''}"
            variants[name] = {"module": module, "fn": fn, "dynamic": dynamic, "times": []}
        os.environ.pop("PEARL_DYNAMIC_TILES")

    for v in variants.values():
        v["out"] = torch.full((A.shape[0], problem.n), float("nan"), dtype=torch.bfloat16,
                              device="cuda")  # fmt: skip
        v["counters"] = torch.zeros(2, dtype=torch.int32, device="cuda")  # zeroed once

        def launch(v=v):
            idx = v["counters"] if v["dynamic"] else None
            v["module"].launch(v["fn"], A, W, ends, v["out"], None, cuda_stream(device),
                               a_index=idx)  # fmt: skip

        launch()
        torch.cuda.synchronize()
        v["graph"] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(v["graph"]):
            for _ in range(args.reps):
                launch()
        v["graph"].replay()
        torch.cuda.synchronize()

    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    order = list(variants.values())
    for r in range(args.rounds):
        for v in itertools.islice(itertools.cycle(order), r, r + len(order)):
            start_ev.record()
            v["graph"].replay()
            end_ev.record()
            end_ev.synchronize()
            v["times"].append(start_ev.elapsed_time(end_ev) * 1e3 / args.reps)

    names = list(variants)
    base = statistics.median(variants[names[0]]["times"])
    result = {"problem": problem.name, "gpu": torch.cuda.get_device_name(), "variants": {}}
    print(problem.name)
    for name, v in variants.items():
        err = (v["out"].float() - ref).abs().max().item()
        twin = variants.get(name.removesuffix(", dynamic"))
        same = bool(torch.equal(v["out"], twin["out"])) if twin is not None else None
        counters = v["counters"].tolist()
        med = statistics.median(v["times"])
        result["variants"][name] = {"median_us": med, "rounds_us": v["times"], "max_err": err,
                                    "ok": err <= tol, "same_bits_as_static": same,
                                    "counters_after": counters}  # fmt: skip
        flag = "" if err <= tol and same is not False and counters == [0, 0] else "  CHECK FAILED"
        print(f"  {name:55s} {med:9.2f} us  {med / base:.3f}  err {err:.3g}{flag}", flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
