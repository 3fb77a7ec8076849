"""Does the layer's down GEMM gain from prefetching its first weights into L2 before it waits on
the gate+up GEMM (GPU; with ``prefetch_b.patch`` applied)?

    python3 experiments/decode_waves/prefetch_ab.py --out $OUT/prefetch_ab.json \\
        Qwen3-30B-A3B:1:1 Mixtral-8x7B:1:1 DeepSeek-V2:1:8

With programmatic launches the down GEMM's CTAs start on the SMs the gate+up GEMM's CTAs leave,
and wait there for it to end. Its expert offsets come from the routing, two launches back, so they
are complete by then: each CTA can find its first tile and send the B boxes of its first
``PEARL_PREFETCH_B`` k steps to L2 (``cp.async.bulk.prefetch.tensor``) while it waits. The
patch does that in kernels built while the variable is set (with ``pdl``, without a fused
activation). Per problem: the layer's forward with programmatic launches (routing, gate+up,
down, combine; as ``moe_forward`` launches them at decode) with the down GEMM built without and
with the prefetch at each depth, every variant in a CUDA graph of its own (``--reps`` forwards),
interleaved rounds; the output must equal the baseline's bit for bit. Median us per forward.
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
    p.add_argument("problems", nargs="+", help="MODEL:TOKENS:EP")
    p.add_argument("--depths", default="4,8")
    p.add_argument(
        "--down-configs",
        default="",
        help="comma list of pearl-sN:field=value+... down GEMM tiles to time in the layer too "
        "(with pdl, no prefetch); a problem whose shape one does not fit skips it",
    )
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    import torch

    from pearl_moe.bench.baselines import parse_variant, variant_config
    from pearl_moe.bench.layer import LayerProblem, make_layer_inputs
    from pearl_moe.kernels import autotune, grouped_gemm, interleave_gate_up
    from pearl_moe.kernels.api import arch_of, default_choice
    from pearl_moe.kernels.dispatch import stage_module
    from pearl_moe.kernels.host import cuda_stream, device_end_offsets
    from pearl_moe.kernels.targets import persistent_ctas
    from pearl_moe.moe.layer import combine
    from pearl_moe.moe.routing import route_and_gather

    device = torch.device("cuda")
    arch = arch_of(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    depths = [int(d) for d in args.depths.split(",")]
    result = {"gpu": torch.cuda.get_device_name(), "depths": depths, "problems": {}}
    for spec in args.problems:
        model, tokens, ep = spec.split(":")
        problem = LayerProblem(model, int(tokens), int(ep))
        inp = make_layer_inputs(problem)
        w = interleave_gate_up(inp["w_gate_up"])
        w2 = inp["w_down"]
        experts, hidden, inter = w2.shape
        rows = inp["topk_ids"].numel()
        stage, config = default_choice(arch, hidden, inter, experts, rows, autotune.gpu_name())
        builds = {f"pick, prefetch {d}": (stage, config, d) for d in [0, *depths]}
        for name in filter(None, args.down_configs.split(",")):
            s, overrides = parse_variant(name)
            builds[name] = (s, variant_config(arch, s, overrides).resolved(), 0)
        kernels = {}
        for name, (s, c, depth) in builds.items():
            c = c.with_(pdl=True)
            os.environ["PEARL_PREFETCH_B"] = str(depth)
            try:
                module = stage_module(arch, s)
                fn = module.compile_kernel(
                    c, hidden, inter, experts, persistent_ctas(arch, c, sms, device)
                )
            except Exception as exc:
                print(f"{spec}: {name} skipped: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            finally:
                os.environ.pop("PEARL_PREFETCH_B")
            kernels[name] = (module, fn, c.describe())

        def forward(name, inp=inp, w=w, w2=w2, kernels=kernels, experts=experts):
            routing, A = route_and_gather(inp["topk_ids"], inp["topk_weights"], experts,
                                          inp["x"], check=False, pdl=True)  # fmt: skip
            a = grouped_gemm(A, w, routing.offsets, check=False, activation="swiglu", pdl=True)
            y = torch.empty((a.shape[0], w2.shape[1]), dtype=a.dtype, device=a.device)
            ends = device_end_offsets(routing.offsets, experts)
            module, fn, _ = kernels[name]
            module.launch(fn, a, w2, ends, y, None, cuda_stream(device))
            return combine(y, routing, pdl=True)

        variants = {}
        for name in kernels:
            first = forward(name)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(args.reps):
                    out = forward(name)
            g.replay()
            torch.cuda.synchronize()
            variants[name] = (g, out, first, [])
        base = next(iter(variants))
        base_out = variants[base][1]
        same = {d: bool(torch.equal(v[1], base_out) and torch.equal(v[2], base_out))
                for d, v in variants.items()}  # fmt: skip
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        order = list(variants.items())
        for r in range(args.rounds):
            for _d, (g, _o, _f, times) in itertools.islice(
                itertools.cycle(order), r, r + len(order)
            ):
                start.record()
                g.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e3 / args.reps)
        med = {d: statistics.median(v[3]) for d, v in variants.items()}
        result["problems"][spec] = {
            "configs": {name: k[2] for name, k in kernels.items()},
            "median_us": med,
            "rounds_us": {d: v[3] for d, v in variants.items()},
            "bitwise_equal": same,
        }
        print(f"{spec} [pick: {kernels[base][2]}]")
        for name, m in med.items():
            flag = "" if same[name] else "  OUTPUT DIFFERS"
            print(f"  {name:60s} {m:9.2f} us  {m / med[base]:.3f}{flag}", flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
