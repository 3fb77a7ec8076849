"""First call of ``grouped_gemm`` in a fresh process, with and without the disk cache of kernels.

    python scripts/first_call.py [--json first_call.json] [--model glm --tokens 64]

Runs three fresh Python processes one after the other, each doing the default call
``grouped_gemm(A, W, offsets)`` on the same problem:

1. ``cache off``: ``PEARL_MOE_KERNEL_CACHE=off``, what every process paid before the cache;
2. ``cache cold``: an empty cache folder (compiles, then stores the kernel);
3. ``cache warm``: the same folder again (loads the kernel, must not compile).

Each reports the time to import torch and initialize CUDA, to import ``pearl_moe.kernels``, to import
the DSL (``cutlass.cute``, which every call needs), of the first call (until
``torch.cuda.synchronize()`` returns: compile or load, CUDA module load, launch) and of the second, the cache counters, and
two checks of the kernel it ran: its output against a float32 reference, and the same call
captured in a CUDA graph and replayed. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(model: str, tokens: int) -> dict:
    t0 = time.perf_counter()
    import torch

    t_import_torch = time.perf_counter() - t0
    torch.cuda.init()
    torch.empty(1, device="cuda")
    t_cuda = time.perf_counter() - t0
    from pearl_moe.bench import harness
    from pearl_moe.kernels import autotune, compile_cache, grouped_gemm
    from pearl_moe.workloads import make_problem

    t_import_kernels = time.perf_counter() - t0
    import cutlass.cute  # noqa: F401  (the DSL: every call needs it; timed apart from the kernel)

    t_import_dsl = time.perf_counter() - t0
    problem = make_problem(model, tokens, ep=8)
    A, W, offsets = harness.make_inputs(problem, "cuda", seed=3)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    out = grouped_gemm(A, W, offsets)
    torch.cuda.synchronize()
    first = time.perf_counter() - t1
    t2 = time.perf_counter()
    grouped_gemm(A, W, offsets, out=out)
    torch.cuda.synchronize()
    second = time.perf_counter() - t2
    counts = list(problem.counts)
    ref = harness.reference_fp32(A, W, counts)
    check = harness.compare(out, ref, harness.torch_bf16_per_expert(A, W, counts))
    graph_out = torch.empty_like(out)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        grouped_gemm(A, W, offsets, out=graph_out, check=False)
    torch.cuda.current_stream().wait_stream(side)
    graph_out.fill_(float("nan"))
    with torch.cuda.graph(graph):
        grouped_gemm(A, W, offsets, out=graph_out, check=False)
    graph.replay()
    torch.cuda.synchronize()
    graph_check = harness.compare(graph_out, ref, harness.torch_bf16_per_expert(A, W, counts))
    choice = autotune.pick(
        "sm_90a" if torch.cuda.get_device_capability()[0] == 9 else "sm_100a",
        problem.n,
        problem.k,
        problem.experts,
        problem.rows,
        autotune.gpu_name("cuda"),
    )
    return {
        "problem": problem.name,
        "kernel": f"stage {choice.stage} {choice.config.describe()} ({choice.source})",
        "import_torch_s": round(t_import_torch, 3),
        "torch_and_cuda_init_s": round(t_cuda, 3),
        "import_pearl_kernels_s": round(t_import_kernels - t_cuda, 3),
        "import_dsl_s": round(t_import_dsl - t_import_kernels, 3),
        "first_call_s": round(first, 3),
        "second_call_s": round(second, 5),
        "cache": os.environ.get("PEARL_MOE_KERNEL_CACHE", "default"),
        "stats": {
            k: round(v, 4) if isinstance(v, float) else v for k, v in compile_cache.STATS.items()
        },
        "output_ok": check.ok,
        "output_message": check.message,
        "graph_ok": graph_check.ok,
        "graph_message": graph_check.message,
    }


def run_child(model: str, tokens: int, cache: str) -> dict:
    env = dict(os.environ, PEARL_MOE_KERNEL_CACHE=cache)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, __file__, "--child", "--model", model, "--tokens", str(tokens)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    wall = time.perf_counter() - t0
    for line in reversed(res.stdout.splitlines()):
        if line.startswith("RESULT="):
            out = json.loads(line[len("RESULT=") :])
            out["process_wall_s"] = round(wall, 2)
            return out
    return {
        "error": f"exit {res.returncode}: {res.stderr[-3000:]}",
        "process_wall_s": round(wall, 2),
    }


def measure(model: str = "glm", tokens: int = 64, cache_dir: str | None = None) -> dict:
    folder = cache_dir or tempfile.mkdtemp(prefix="pearl-moe-first-call-")
    runs = {
        "cache off": run_child(model, tokens, "off"),
        "cache cold": run_child(model, tokens, folder),
        "cache warm": run_child(model, tokens, folder),
    }
    return {"model": model, "tokens": tokens, "cache_dir": folder, "runs": runs}


def format_result(result: dict) -> str:
    lines = [
        f"first call of grouped_gemm(A, W, offsets), {result['model']} {result['tokens']} "
        "tokens, each in a fresh process",
        f"{'':<12}{'torch+CUDA s':>13}{'import s':>10}{'DSL s':>7}{'1st call s':>11}{'2nd call ms':>12}"
        f"{'process s':>10}  cache hits/misses  output  graph",
    ]
    for name, r in result["runs"].items():
        if "error" in r:
            lines.append(f"{name:<12} ERROR {r['error'][-300:]}")
            continue
        s = r["stats"]
        lines.append(
            f"{name:<12}{r['torch_and_cuda_init_s']:>13.2f}{r['import_pearl_kernels_s']:>10.2f}"
            f"{r['import_dsl_s']:>7.2f}"
            f"{r['first_call_s']:>11.3f}{r['second_call_s'] * 1e3:>12.2f}{r['process_wall_s']:>10.1f}"
            f"  {s['hits']}/{s['misses']:<16}{'ok' if r['output_ok'] else 'FAIL':>6}"
            f"{'ok' if r['graph_ok'] else 'FAIL':>7}"
        )
    kernel = next((r["kernel"] for r in result["runs"].values() if "kernel" in r), "?")
    lines.append(f"kernel: {kernel}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="glm")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--cache-dir", default=None, help="cache folder of the cold/warm runs")
    p.add_argument("--json", default=None, help="write the result here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print("RESULT=" + json.dumps(child(args.model, args.tokens)), flush=True)
        return 0
    result = measure(args.model, args.tokens, args.cache_dir)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(format_result(result))
    warm = result["runs"]["cache warm"]
    ok = all(r.get("output_ok") and r.get("graph_ok") for r in result["runs"].values())
    return 0 if ok and warm.get("stats", {}).get("misses") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
