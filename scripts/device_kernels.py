# ruff: noqa: B023  (lambdas are called before the loop variable changes)
"""On the H200: time the sm_90a stages with CUDA-graph replays and write JSON.

    bash .device/run.sh python3 scripts/device_kernels.py OUTDIR

Compares stage 2 with stage 1's per-expert loop and stage 3 with stage 2 at the decode shapes
(GLM 5.3 / DeepSeek V4 Pro / Kimi K3 with 16, 64, 256 tokens per GPU, EP=8, balanced routing) and
one 4096-token case, plus stage 3 with 2..6 pipeline stages at GLM 64 tokens. Each timing is the
median of graph replays (each graph holds one call), checked against torch's bf16 result first.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time

import torch

from pearl_moe.config import GemmConfig
from pearl_moe.kernels import api, grouped_gemm
from pearl_moe.kernels.host import cuda_stream
from pearl_moe.kernels.verify import compare, random_inputs, reference, torch_bf16
from pearl_moe.workloads import make_problem

READ_BW = 4.25e12  # measured read-only HBM bandwidth of this H200 (facts.md)
PEAK = 790e12  # measured dense bf16 matmul rate


def time_graph(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    times.sort()
    return times[len(times) // 2]


def env():
    p = torch.cuda.get_device_properties(0)
    try:
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except Exception as err:  # noqa: BLE001
        smi = f"unavailable: {err}"
    try:
        from importlib.metadata import version

        dsl = version("nvidia-cutlass-dsl")
    except Exception:  # noqa: BLE001
        dsl = "unknown"
    return dict(
        gpu=p.name,
        sms=p.multi_processor_count,
        nvidia_smi=smi,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cutlass_dsl=dsl,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
    )


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    record = dict(env=env(), method="CUDA graph replay of one call, median of 20, us", rows=[])
    print(record["env"], flush=True)
    cases = [(m, t) for m in ("GLM 5.3", "DeepSeek V4 Pro", "Kimi K3") for t in (16, 64, 256)]
    cases.append(("GLM 5.3", 4096))
    W = None
    current = None
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    t0 = time.time()
    for model, tokens in cases:
        p = make_problem(model, tokens, ep=8, routing="balanced")
        if current != model:
            W = None
            torch.cuda.empty_cache()
            A, W, offs = random_inputs(p.counts, p.n, p.k, seed=tokens)
            current = model
        else:
            A, _, offs = random_inputs(p.counts, p.n, p.k, W=W, seed=tokens)
        host = offs.tolist()
        floor = p.floor_seconds(READ_BW, PEAK) * 1e6
        row = dict(
            model=model,
            tokens=tokens,
            experts=p.experts,
            rows=p.rows,
            n=p.n,
            k=p.k,
            floor_us=round(floor, 1),
        )
        ref = reference(A, W, host)
        tb = torch_bf16(A, W, host)
        out = torch.empty(p.rows, p.n, dtype=torch.bfloat16, device="cuda")
        for stage in (1, 2, 3):
            out.fill_(float("nan"))
            grouped_gemm(A, W, offs, out=out, stage=stage)
            torch.cuda.synchronize()
            chk = compare(out, ref, tb)
            row[f"stage{stage}_ok"] = chk["ok"]
            if stage == 1:
                # The per-expert loop needs the offsets on the host: launch the compiled stage
                # directly with them, so the loop of launches can be captured in a graph.
                mod = api.stage_module("sm_90a", 1)
                fn1 = api._compiled(
                    "sm_90a", 1, api.default_config("sm_90a"), p.n, p.k, p.experts, sms
                )
                fn = lambda: mod.launch(fn1, A, W, offs, out, host, cuda_stream())  # noqa: E731
            else:
                fn = lambda s=stage: grouped_gemm(A, W, offs, out=out, stage=s, check=False)  # noqa: E731
            row[f"stage{stage}_us"] = round(time_graph(fn), 1)
        row["torch_grouped_mm_us"] = None
        try:
            Wt = W.transpose(1, 2)
            row["torch_grouped_mm_us"] = round(
                time_graph(lambda: torch._grouped_mm(A, Wt, offs=offs)), 1
            )
        except Exception as err:  # noqa: BLE001
            row["torch_grouped_mm_error"] = str(err)[:200]
        print(row, f"t={time.time() - t0:.0f}s", flush=True)
        record["rows"].append(row)
        json.dump(record, open(os.path.join(outdir, "kernels_sm90.json"), "w"), indent=1)

    # pipeline depth sweep (notebook 04): stage 3 at GLM 5.3, 64 tokens
    p = make_problem("GLM 5.3", 64, ep=8)
    A, W, offs = random_inputs(p.counts, p.n, p.k, seed=64)
    out = torch.empty(p.rows, p.n, dtype=torch.bfloat16, device="cuda")
    sweep = []
    for tile_m in (128, 64):
        for stages in (2, 3, 4, 5, 6):
            cfg = GemmConfig(arch="sm_90a", tile_m=tile_m, tile_n=128, tile_k=64, stages=stages)
            us = time_graph(
                lambda: grouped_gemm(A, W, offs, config=cfg, out=out, stage=3, check=False)
            )
            sweep.append(dict(tile_m=tile_m, tile_n=128, tile_k=64, stages=stages, us=round(us, 1)))
            print(sweep[-1], flush=True)
    record["stage_sweep_glm_64"] = dict(
        floor_us=round(p.floor_seconds(READ_BW, PEAK) * 1e6, 1), rows=sweep
    )
    json.dump(record, open(os.path.join(outdir, "kernels_sm90.json"), "w"), indent=1)
    print("| model | tokens | floor | stage1 loop | stage2 | stage3 | torch._grouped_mm |")
    for r in record["rows"]:
        print(
            f"| {r['model']} | {r['tokens']} | {r['floor_us']} | {r['stage1_us']} | {r['stage2_us']} | "
            f"{r['stage3_us']} | {r['torch_grouped_mm_us']} |"
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out")
