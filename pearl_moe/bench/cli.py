"""``python -m pearl_moe bench``: check and time grouped-GEMM implementations on this CUDA GPU.

    python -m pearl_moe bench --models glm,v4,k3 --tokens 1,4,16,64,256,1024,4096 \\
        --skewed-tokens 64 --impls loop,grouped_mm,quack,triton --out results/H200/baselines.json

For every problem: measure nothing until every implementation has passed its correctness check on
fresh random inputs; then time each with CUDA-graph replays. The two ceilings (read bandwidth and
bf16 rate) are measured once at the start of the run, on the same GPU. The JSON file is rewritten
after every problem, so an interrupted run keeps what it finished.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import traceback
from pathlib import Path

from ..workloads import MODELS, get_model, make_problem

__all__ = ["main", "parse_args", "build_problems", "format_table", "default_out"]


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _ints(text: str) -> list[int]:
    return [int(t) for t in _csv(text)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m pearl_moe bench",
        description="Check, then time, grouped-GEMM implementations on this machine's CUDA GPU.",
    )
    p.add_argument("--models", default="all", help="comma list of model names, or 'all'")
    p.add_argument("--tokens", default="1,4,16,64,256,1024,4096", help="tokens per GPU, comma list")
    p.add_argument("--routing", default="balanced", help="routing for --tokens (comma list)")
    p.add_argument(
        "--skewed-tokens", default="", help="extra skewed-routing problems at these token counts"
    )
    p.add_argument(
        "--order",
        default="model",
        choices=("model", "tokens"),
        help="iterate model by model, or token count by token count (all models at each)",
    )
    p.add_argument("--ep", type=int, default=8, help="expert-parallel degree")
    p.add_argument("--projection", default="gate_up", choices=("gate_up", "down"))
    p.add_argument(
        "--impls", default="loop,grouped_mm,quack,triton", help="implementations, comma list"
    )
    p.add_argument("--reps", type=int, default=20, help="timed graph replays per implementation")
    p.add_argument("--launches", type=int, default=10, help="calls captured per CUDA graph")
    p.add_argument("--kind", default="baselines", help="run kind: names the output file")
    p.add_argument("--out", default=None, help="output .json file or folder (results/<gpu>/)")
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="start no new problem after this many seconds (what finished is kept)",
    )
    return p.parse_args(argv)


def build_problems(args: argparse.Namespace):
    names = list(MODELS) if args.models == "all" else [get_model(m).name for m in _csv(args.models)]
    cases = [(t, r) for r in _csv(args.routing) for t in _ints(args.tokens)]
    cases += [(t, "skewed") for t in _ints(args.skewed_tokens)]
    if getattr(args, "order", "model") == "tokens":
        # Token count by token count in the order given, so a deadline cuts the last counts.
        order = {t: i for i, t in enumerate(dict.fromkeys(t for t, _ in cases))}
        pairs = [(m, c) for c in sorted(cases, key=lambda c: order[c[0]]) for m in names]
    else:
        pairs = [(m, c) for m in names for c in cases]
    return [make_problem(m, t, args.ep, r, args.projection) for m, (t, r) in pairs]


def _gpu_dir_name(device_name: str) -> str:
    from ..hardware import get_gpu

    try:
        return get_gpu(device_name).name
    except ValueError:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", device_name.replace("NVIDIA", "").strip())


def default_out(device_name: str, kind: str, root: Path | None = None) -> Path:
    root = root or Path("results")
    return root / _gpu_dir_name(device_name) / f"{kind}.json"


def _resolve_out(out: str | None, device_name: str, kind: str) -> Path:
    if out is None:
        return default_out(device_name, kind)
    path = Path(out)
    return path if path.suffix == ".json" else path / f"{kind}.json"


def format_table(run: dict) -> str:
    """One line per problem: floor, then time in us (% of floor) per implementation."""
    impls = []
    for r in run["records"]:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    by_key = {(r["problem"], r["impl"]): r for r in run["records"]}
    head = f"{'model':<16}{'tok':>5} {'routing':<9}{'floor us':>9}"
    head += "".join(f"{i:>20}" for i in impls)
    lines = [head, "-" * len(head)]
    for p in run["problems"]:
        row = f"{p['model']:<16}{p['tokens_per_gpu']:>5} {p['routing']:<9}"
        row += f"{p.get('floor_us', float('nan')):>9.1f}"
        for impl in impls:
            r = by_key.get((p["id"], impl))
            if r is None:
                cell = "-"
            elif r["status"] == "ok":
                cell = f"{r['time']['median_us']:.1f} ({r['metrics']['pct_of_floor']:.0f}%)"
            else:
                cell = r["status"]
            row += f"{cell:>20}"
        lines.append(row)
    return "\n".join(lines)


class _PlainProgress:
    """Stand-in for tqdm: one line per finished case."""

    def __init__(self, total: int, desc: str = "", unit: str = ""):
        self.total, self.done, self.desc, self.postfix = total, 0, desc, ""

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def update(self, n: int = 1) -> None:
        self.done += n
        print(f"{self.desc} {self.done}/{self.total} {self.postfix}", flush=True)

    def close(self) -> None:
        pass


def _bench_one(impl, problem, ceilings, args) -> dict:
    from . import harness
    from .records import problem_id

    record = {"problem": problem_id(problem), "impl": impl.name, "config": impl.config}
    result, config = harness.check(impl, problem)
    record["correctness"] = result.as_dict()
    record["config"] = config
    if not result.ok:
        record["status"] = "incorrect"
        return record
    timing, _ = harness.time_impl(impl, problem, reps=args.reps, launches=args.launches)
    record["time"] = timing.as_dict()
    if timing.outputs_ok is False:  # the timed graph computed something else: not a result
        record["status"] = "incorrect"
        record["correctness"]["ok"] = False
        record["correctness"]["message"] = f"after timing: {timing.outputs_message}"
        return record
    record["metrics"] = harness.metrics(problem, timing.median_s, ceilings)
    record["status"] = "ok"
    return record


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError:  # pragma: no cover
        print("bench needs torch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(
            "error: no CUDA GPU is visible to torch on this machine, so nothing can be measured.\n"
            "`python -m pearl_moe bench` checks and times kernels on a CUDA GPU (H100/H200/B200).\n"
            "On a CPU-only machine, read the committed measurements instead:\n"
            "  python -c 'from pearl_moe import replay; print(replay.table())'",
            file=sys.stderr,
        )
        return 2
    try:
        from tqdm.auto import tqdm
    except ImportError:  # the GPU machine's image may lack tqdm
        tqdm = _PlainProgress

    from . import harness
    from .records import (
        clocks_under_load,
        environment,
        new_run,
        problem_entry,
        raise_read_ceiling,
        write_run,
    )

    def _load_clocks(when: str) -> dict:
        try:
            return clocks_under_load(when)
        except Exception as exc:  # never lose a run over a clock reading
            return {"when": when, "source": f"unavailable ({type(exc).__name__}: {exc})"[:200]}

    problems = build_problems(args)
    device_name = torch.cuda.get_device_name()
    out = _resolve_out(args.out, device_name, args.kind)
    t_start = time.monotonic()
    env = environment(" ".join(["python -m pearl_moe bench", *(argv or sys.argv[1:])]))
    print(f"{device_name}: measuring the ceilings ...", flush=True)
    ceilings = harness.measure_ceilings()
    print(
        f"read {ceilings['read_bytes_per_s'] / 1e12:.2f} TB/s, "
        f"bf16 {ceilings['bf16_flops_per_s'] / 1e12:.0f} TFLOP/s",
        flush=True,
    )
    env["clocks_under_load"] = [_load_clocks("after the ceilings (warmed up)")]
    print(f"clocks under load: {env['clocks_under_load'][0]}", flush=True)
    run = new_run(args.kind, env, ceilings)
    run["method"] = {
        "check": "fresh random inputs (A ~ N(0,1), W ~ N(0,1/k)), output poisoned with NaN, "
        "max abs error vs a float32 reference <= 2 x torch bf16 error + 1e-3, every row written; "
        "after timing, the graph's output for every input set is checked the same way",
        "timing": f"CUDA graph of >= {args.launches} calls over rotating input sets (enough sets "
        f"to cycle >= 4x L2), {args.reps} replays; time per call = replay time / calls",
        "clocks": "env.clocks: idle, before any GPU work; env.clocks_under_load: nvidia-smi "
        "while a bf16 matmul loop ran, after the ceilings and after the last problem",
        "floor": "max(bytes_moved / read ceiling, flops / bf16 ceiling), bytes_moved = weights of "
        "experts with rows + A + out",
    }

    impls = {}
    for name in _csv(args.impls):
        try:
            impls[name] = harness.get_impl(name)
        except harness.ImplementationUnavailable as exc:
            print(f"{name}: unavailable: {exc}", flush=True)
            impls[name] = exc
    skipped = []
    bar = tqdm(total=len(problems) * len(impls), desc="bench", unit="case")
    for problem in problems:
        if args.deadline_s is not None and time.monotonic() - t_start > args.deadline_s:
            skipped.append(problem.name)
            continue
        run["problems"].append(problem_entry(problem, ceilings))
        for name, impl in impls.items():
            bar.set_postfix_str(f"{problem.name[:40]} | {name}")
            if isinstance(impl, Exception):
                from .records import problem_id

                run["records"].append(
                    {
                        "problem": problem_id(problem),
                        "impl": name,
                        "status": "unavailable",
                        "config": {},
                        "error": str(impl),
                    }
                )
            else:
                try:
                    rec = _bench_one(impl, problem, ceilings, args)
                except Exception as exc:
                    from .records import problem_id

                    traceback.print_exc()
                    rec = {
                        "problem": problem_id(problem),
                        "impl": name,
                        "status": "error",
                        "config": {},
                        "error": f"{type(exc).__name__}: {exc}"[:500],
                    }
                    torch.cuda.synchronize()
                if rec["status"] != "ok":
                    print(f"\n{name} on {problem.name}: {rec['status']}", flush=True)
                run["records"].append(rec)
            bar.update(1)
            torch.cuda.empty_cache()
        run["env"]["elapsed_s"] = round(time.monotonic() - t_start, 1)
        run["env"]["skipped_problems"] = skipped
        write_run(raise_read_ceiling(run), out)
    bar.close()
    run["env"]["clocks_under_load"].append(_load_clocks("after the last problem"))
    run["env"]["elapsed_s"] = round(time.monotonic() - t_start, 1)
    run["env"]["skipped_problems"] = skipped
    write_run(raise_read_ceiling(run), out)
    print()
    print(format_table(run))
    print(f"\nwrote {out}" + (f"; skipped (deadline): {skipped}" if skipped else ""))
    bad = [r for r in run["records"] if r["status"] in ("incorrect", "error")]
    return 1 if bad else 0
