"""Where a decode GEMM's time goes, CTA by CTA (GPU; with ``cta_trace.patch`` applied).

    PEARL_CTA_TRACE=1 python3 experiments/decode_waves/cta_trace.py --out $OUT/trace.json \\
        Mixtral-8x7B:down:1 1 default pearl-s5:tile_m=8+tile_n=64+ring_depth=24+shift_a_box=1

The patch makes the sm_90a persistent kernel write 16 int32 per CTA into the buffer it is given
as its (otherwise unused) row index: the SM it ran on (``%smid``), the global nanosecond timer
(``%globaltimer_lo``) at entry and at the consumer's end, and the SM's cycle counter at entry,
after the prologue (barriers, descriptor prefetch; after the programmatic wait with ``pdl``),
when the producer issued its last load, when the first ring entry landed, when the first tile
was stored and at the end, plus the tiles the CTA computed. For every configuration, on one
problem: ``--launches`` launches one at a time (a synchronize between: each starts on an idle
GPU) and as many queued back to back behind a long kernel (each then starts as the previous ends,
as in a CUDA graph), each with its own buffer and CUDA events.

The summary per configuration (medians over the launches): the kernel's event time; the spread of
the CTAs' entry times; the prologue, the first load's latency, the first tile and the last
tile's end in microseconds from the CTA's entry (cycles over the clock the run measured); the
spread of the working CTAs' end times; and how many SMs worked, by their ``%smid`` halves (TPC).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

WORDS = 16  # the patch's TRACE_WORDS
FIELDS = (
    "smid", "g_entry", "c_entry", "c_setup", "c_last_load", "c_first_data", "c_first_tile",
    "c_end", "g_end", "tiles",
)  # fmt: skip


def _config(spec: str, arch: str, problem):
    from pearl_moe.bench.baselines import parse_variant, variant_config
    from pearl_moe.kernels import autotune

    if spec == "default":
        gpu = autotune.gpu_name()
        choice = autotune.pick(arch, problem.n, problem.k, problem.experts, problem.rows, gpu)
        return choice.stage, choice.config.resolved()
    stage, overrides = parse_variant(spec)
    return stage, variant_config(arch, stage, overrides).resolved()


def _u32(x: int) -> int:
    return x & 0xFFFFFFFF


def _c31(a: int, b: int) -> int:
    """Cycles from ``a`` to ``b`` (the patch keeps 31 bits of the counter)."""
    return (b - a) & 0x7FFFFFFF


def summarize(rows: list[list[int]], ns_per_cycle: float | None) -> dict:
    """One launch's CTA records -> times in microseconds (cycles at the measured clock)."""
    work = [r for r in rows if r[9] > 0]
    g0 = min(r[1] for r in rows)
    out = {
        "ctas": len(rows),
        "working": len(work),
        "tpcs": len({r[0] // 2 for r in work}),
        "entry_spread_us": (max(_u32(r[1] - g0) for r in rows)) / 1e3,
        "end_spread_us": (max(_u32(r[8] - g0) for r in work) - min(_u32(r[8] - g0) for r in work))
        / 1e3
        if work
        else 0.0,
        "span_us": max(_u32(r[8] - g0) for r in work) / 1e3 if work else 0.0,
        "tiles_max": max((r[9] for r in rows), default=0),
    }
    cycles = [(_c31(r[2], r[7]), _u32(r[8] - r[1])) for r in work if _u32(r[8] - r[1]) > 0]
    ghz = statistics.median(c / ns for c, ns in cycles) if cycles else None
    out["clock_ghz"] = ghz
    scale = ns_per_cycle or (1.0 / ghz if ghz else None)
    if scale and work:
        for name, i in (("setup", 3), ("first_data", 5), ("first_tile", 6), ("end", 7)):
            out[f"{name}_us"] = statistics.median(_c31(r[2], r[i]) for r in work) * scale / 1e3
        out["last_load_us"] = statistics.median(_c31(r[2], r[4]) for r in work) * scale / 1e3
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("problem", help="MODEL:PROJECTION:EP, e.g. Mixtral-8x7B:down:1")
    p.add_argument("tokens", type=int)
    p.add_argument(
        "configs", nargs="+", help="'default' (this GPU's pick) or pearl-sN:field=value+..."
    )
    p.add_argument("--launches", type=int, default=20)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if os.environ.get("PEARL_CTA_TRACE") != "1":
        raise SystemExit("set PEARL_CTA_TRACE=1 (and apply cta_trace.patch)")

    import torch

    from pearl_moe.bench.harness import make_inputs, reference_fp32
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
    stream = cuda_stream(device)
    big = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    result = {"problem": problem.name, "gpu": torch.cuda.get_device_name(), "sms": sms, "runs": {}}
    for spec in args.configs:
        stage, config = _config(spec, arch, problem)
        module = stage_module(arch, stage)
        fn = module.compile_kernel(config, problem.n, problem.k, problem.experts, sms)
        out = torch.full((A.shape[0], problem.n), float("nan"), dtype=torch.bfloat16, device="cuda")
        bufs = [
            torch.zeros(sms * WORDS, dtype=torch.int32, device="cuda") for _ in range(args.launches)
        ]
        ev = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in bufs
        ]

        def one(i, module=module, fn=fn, out=out, bufs=bufs, ev=ev):
            ev[i][0].record()
            module.launch(fn, A, W, ends, out, None, stream, a_index=bufs[i])
            ev[i][1].record()

        one(0)
        torch.cuda.synchronize()
        err = (out.float() - ref).abs().max().item()
        modes = {}
        for mode in ("idle", "queued"):
            for b in bufs:
                b.zero_()
            torch.cuda.synchronize()
            if mode == "queued":
                big.add_(1)  # a long kernel ahead, so the launches queue behind it
            for i in range(args.launches):
                one(i)
                if mode == "idle":
                    torch.cuda.synchronize()
            torch.cuda.synchronize()
            launches = []
            for i, b in enumerate(bufs):
                rows = b.view(sms, WORDS)[:, : len(FIELDS)].tolist()
                s = summarize(rows, None)
                s["event_us"] = ev[i][0].elapsed_time(ev[i][1]) * 1e3
                launches.append({"summary": s, "ctas": rows})
            keys = [k for k, v in launches[0]["summary"].items() if isinstance(v, (int, float))]
            med = {
                k: statistics.median(
                    x["summary"][k] for x in launches if x["summary"].get(k) is not None
                )
                for k in keys
            }
            modes[mode] = {"median": med, "launches": launches}
            print(
                f"{spec} [{config.describe()}] {mode}: max err {err:.3g}; "
                + ", ".join(f"{k} {v:.3g}" for k, v in med.items()),
                flush=True,
            )
        result["runs"][spec] = {
            "stage": stage,
            "config": config.describe(),
            "max_err": err,
            **modes,
        }
    import gzip

    with gzip.open(args.out, "wt") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
