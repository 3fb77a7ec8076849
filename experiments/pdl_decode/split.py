"""Which programmatic launch costs the Mixtral-8x7B layer at 256 tokens: the layer's four
kernels (routing, gate+up, down, combine) with ``pdl`` switched per kernel, each variant in a
CUDA graph of its own, interleaved rounds (median us)."""

import itertools
import statistics
import sys

import torch

from pearl_moe.bench.layer import LayerProblem, make_layer_inputs
from pearl_moe.kernels import grouped_gemm, interleave_gate_up
from pearl_moe.moe.layer import combine
from pearl_moe.moe.routing import route_and_gather


def forward(inp, w, flags):
    route, up, down, comb = flags
    routing, A = route_and_gather(inp["topk_ids"], inp["topk_weights"], w.shape[0], inp["x"],
                                  check=False, pdl=route)  # fmt: skip
    a = grouped_gemm(A, w, routing.offsets, check=False, activation="swiglu", pdl=up)
    y = grouped_gemm(a, inp["w_down"], routing.offsets, check=False, pdl=down)
    return combine(y, routing, pdl=comb)


def main(model="Mixtral-8x7B", tokens=256, ep=1, rounds=7, reps=20):
    inp = make_layer_inputs(LayerProblem(model, tokens, ep))
    w = interleave_gate_up(inp["w_gate_up"])
    variants = {}
    for flags in [(0, 0, 0, 0), (1, 1, 1, 1), (1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0),
                  (0, 0, 0, 1), (0, 1, 1, 0)]:  # fmt: skip
        flags = tuple(bool(f) for f in flags)
        ref = forward(inp, w, flags)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                out = forward(inp, w, flags)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, ref)
        variants[flags] = (g, [])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for r in range(rounds):
        for _flags, (g, times) in itertools.islice(itertools.cycle(variants.items()), r,
                                                  r + len(variants)):  # fmt: skip
            start.record()
            g.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / reps)
    base = statistics.median(variants[(False,) * 4][1])
    print(f"{model} {tokens} tokens; pdl per kernel (route, gate+up, down, combine)")
    for flags, (_, times) in variants.items():
        med = statistics.median(times)
        print(f"  {''.join('1' if f else '0' for f in flags)}  {med:8.1f} us  {med / base:.3f}")


if __name__ == "__main__":
    main(*(sys.argv[1:2] or ["Mixtral-8x7B"]), *(int(a) for a in sys.argv[2:4]))
