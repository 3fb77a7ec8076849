"""Is the fused gated activation slower than the plain GEMM at decode, at the same tile? (GPU)

    python3 experiments/fused_decode/fused_ab.py time  OUT.json   # interleaved CUDA-graph rounds
    python3 experiments/fused_decode/fused_ab.py ncu             # one call each, for ncu

For the gate+up GEMM of GLM 5.3 and DeepSeek V4 Pro at 1 token (EP8), the same configuration is
run plain and with ``activation="swiglu"`` on the interleaved weights, at the tile the default
picks and at the other activation-ready widths (64, 128, 192).

``data/fused_ab.json`` was made before a fix: its calls did not bind their case's inputs, so all
21 ran on the last case's (GLM 5.3 at 16 tokens: 128 rows over 32 experts); the labels name the
case whose configurations each call used (its ``note``). ``data/fused_ab_rcp.json`` was made
after it and after SiLU's division became a hardware reciprocal, each case on its own inputs.
"""

from __future__ import annotations

import json
import sys

CASES = (("GLM 5.3", 1), ("DeepSeek V4 Pro", 1), ("GLM 5.3", 16))
WIDTHS = (64, 128, 192)


def variants():
    import torch

    from pearl_moe.bench.harness import make_inputs
    from pearl_moe.kernels import grouped_gemm, interleave_gate_up
    from pearl_moe.kernels.api import with_activation
    from pearl_moe.kernels.autotune import pick
    from pearl_moe.workloads import make_problem

    out = []
    for model, tokens in CASES:
        problem = make_problem(model, tokens, 8, "balanced", "gate_up")
        sets = [make_inputs(problem, "cuda", seed=s) for s in range(2)]
        A, W, offsets = sets[0]
        rows, k = A.shape
        experts, n, _ = W.shape
        base = pick("sm_90a", n, k, experts, rows).config
        fused_base = pick("sm_90a", n, k, experts, rows, fused=True).config
        Wf = [interleave_gate_up(s[1]) for s in sets]
        outs = torch.empty((rows, n), dtype=A.dtype, device="cuda")
        outh = torch.empty((rows, n // 2), dtype=A.dtype, device="cuda")
        configs = {f"plain-pick {base.describe()}": (base, None)}
        for w in WIDTHS:
            c = fused_base.with_(tile_n=w, ring_depth=None).resolved()
            configs[f"plain {c.describe()}"] = (c, None)
            f = with_activation(c, "swiglu")
            configs[f"fused {f.describe()}"] = (f, "swiglu")
        for label, (cfg, act) in configs.items():

            def call(i, cfg=cfg, act=act, sets=sets, Wf=Wf, outs=outs, outh=outh):
                a, w, off = sets[i % 2][0], (Wf[i % 2] if act else sets[i % 2][1]), sets[i % 2][2]
                return grouped_gemm(a, w, off, config=cfg, check=False, activation=act,
                                    out=outh if act else outs)  # fmt: skip

            out.append((f"{model} {tokens} tok | {label}", call))
    return out


def time_all(path):
    import torch

    calls = variants()
    graphs = []
    for name, call in calls:
        for i in range(3):
            call(i)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(20):
                call(i)
        graphs.append((name, g))
    times = {name: [] for name, _ in graphs}
    for r in range(7):
        order = graphs if r % 2 == 0 else graphs[::-1]
        for name, g in order:
            g.replay()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(5):
                g.replay()
            e.record()
            e.synchronize()
            times[name].append(s.elapsed_time(e) * 1e3 / 100)
    result = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    for name, t in result.items():
        print(f"{t:8.1f} us  {name}")
    result["gpu"] = torch.cuda.get_device_name()
    json.dump(result, open(path, "w"), indent=1)


def profile_all():
    import torch

    calls = variants()
    for _, call in calls:
        call(0)
        call(1)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, call in calls:
        torch.cuda.nvtx.range_push(name)
        call(0)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    for name, _ in calls:
        print("profiled", name)


if __name__ == "__main__":
    if sys.argv[1] == "time":
        time_all(sys.argv[2])
    else:
        profile_all()
