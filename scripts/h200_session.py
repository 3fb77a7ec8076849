"""One GPU session of issue 8's measurements, in one process and one device call (~6-8 minutes).

    bash .device/run.sh python3 scripts/h200_session.py --out $OUT

Phases (``--phases``, in this order; each writes its file under ``--out`` as soon as it has
something, so a run cut short keeps what it finished):

``precompile``  every kernel the session will run, compiled in ``--jobs`` parallel worker processes
                into the disk cache (compiling needs no GPU; the measuring phases then only load)
``tune``        ``python -m pearl_moe tune`` on 3 models x ``--tune-tokens``: the table
                ``tuning_<GPU>.json`` (commit as ``pearl_moe/tuning/<GPU>.json``), then used by the
                phases below in this process
``compare``     the default call (``pearl``) against ``triton``, ``grouped_mm``, ``loop`` on 3 models
                x ``--compare-tokens`` + skewed routing at ``--skewed-tokens``, ``quack-tuned`` at
                ``--quack-tuned-tokens``, interleaved rounds: ``compare.json`` with its ratio table
``ablation``    course stages 3..7 (those that exist) on 3 models x ``--ablation-tokens``:
                ``ablation.json``
``first-call``  ``scripts/first_call.py``: the first call in fresh processes, cache off / cold / warm:
                ``first_call.json``

The ceilings (read bandwidth, bf16 rate) and the clocks under load are measured once and shared by
``compare`` and ``ablation``. ``--budget-s`` bounds the whole session: each phase gets its share
(``--tune-s``, ``--compare-s``, ``--ablation-s``; time a phase leaves unused goes to the next) and
starts no new shape after it. ``session.json`` lists the phases, their times and files. The last
lines printed are the ratio table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PHASES = ("precompile", "tune", "compare", "ablation", "first-call")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="issue 8's measurements in one GPU session")
    p.add_argument("--out", default=os.environ.get("OUT", "session_out"), help="output folder")
    p.add_argument("--phases", default=",".join(PHASES), help="comma list of " + ", ".join(PHASES))
    p.add_argument("--budget-s", type=float, default=500.0, help="wall time for the whole session")
    p.add_argument("--tune-s", type=float, default=150.0)
    p.add_argument("--compare-s", type=float, default=220.0)
    p.add_argument("--ablation-s", type=float, default=90.0)
    p.add_argument("--models", default="all")
    p.add_argument("--tune-tokens", default="1,16,64,256,1024,4096")
    p.add_argument("--compare-tokens", default="1,16,64,256,1024,4096")
    p.add_argument("--skewed-tokens", default="64")
    p.add_argument(
        "--quack-tuned-tokens", default="1,16,64,256,4096", help="'' to leave quack-tuned out"
    )
    p.add_argument("--compare-impls", default="pearl,triton,grouped_mm,loop")
    p.add_argument("--ablation-tokens", default="16,64,256,4096")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="interleaved rounds (compare, ablation; default: one cycle of the round order)",
    )
    p.add_argument("--reps", type=int, default=5, help="timed replays per impl per round")
    p.add_argument("--tune-rounds", type=int, default=3)
    p.add_argument("--tune-reps", type=int, default=3)
    p.add_argument("--limit", type=int, default=28, help="most tuning candidates per shape")
    p.add_argument("--jobs", type=int, default=12, help="compile worker processes")
    p.add_argument("--table", default=None, help="use this table instead of tuning (no tune)")
    p.add_argument(
        "--merge-table",
        default=None,
        help="start the tune from this table: shapes not in --tune-tokens keep its entries",
    )
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # tests: "cpu"
    p.add_argument(
        "--plan",
        action="store_true",
        help="print what the session would run and an estimate of its time, then exit (no GPU)",
    )
    p.add_argument(
        "--kernel-cache",
        default=os.environ.get("PEARL_MOE_KERNEL_CACHE") or "/tmp/pearl-moe-kernels",
        help="disk cache of compiled kernels for this session",
    )
    return p.parse_args(argv)


class Session:
    def __init__(self, args):
        self.args = args
        self.t0 = time.monotonic()
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = {"phases": {}, "argv": sys.argv[1:], "files": {}}
        self.carry = 0.0  # seconds earlier phases left unused

    def remaining(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.t0)

    def deadline(self, share: float) -> float:
        """Monotonic time after which the phase starts no new shape."""
        budget = min(share + self.carry, self.remaining() - 15)
        return time.monotonic() + max(0.0, budget)

    def phase(self, name, fn, share: float | None = None):
        start = time.monotonic()
        print(f"\n=== {name} (session at {start - self.t0:.0f} s) ===", flush=True)
        entry = {"started_s": round(start - self.t0, 1)}
        try:
            result = fn() if share is None else fn(self.deadline(share))
            entry["ok"] = True
        except Exception as exc:
            traceback.print_exc()
            entry.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:1000])
            result = None
        spent = time.monotonic() - start
        entry["seconds"] = round(spent, 1)
        if share is not None:
            self.carry = max(0.0, share + self.carry - spent)
        self.log["phases"][name] = entry
        self.write_log()
        return result

    def write_log(self):
        self.log["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        (self.out / "session.json").write_text(json.dumps(self.log, indent=1, default=str))


def _csv(text):
    return [t.strip() for t in text.split(",") if t.strip()]


#: Measured on the H200 (shared/reference/facts.md): read ceiling, bf16 rate; our kernels and the
#: baselines run at 70-100 % of the floor, so a call is costed at floor / 0.8.
H200_READ, H200_BF16, FLOOR_EFFICIENCY = 4.25e12, 790e12, 0.8
QUACK_TUNE_S = 17.0  # quack's autotuner per new shape: 13-21 s on the H200
TRITON_TUNE_CALLS = 6 * 20  # ~6 candidate configs, 5 launches x 3 reps + compile warm-up each
COMPILE_S = 2.5  # one new kernel on the GPU machine: 0.5-4 s


def _calls_per_impl(rounds, reps, launches=10, warmup=1):
    """Calls of one implementation on one problem: check, warm-up, capture, rounds."""
    return 1 + 3 + launches * (1 + 2 + rounds * (warmup + reps))


def plan(args) -> str:
    """What the session runs and roughly how long each phase takes on an H200 (CPU only)."""
    from pearl_moe.bench import tune
    from pearl_moe.kernels import autotune
    from pearl_moe.workloads import MODELS, get_model, make_problem

    models = (
        list(MODELS) if args.models == "all" else [get_model(m).name for m in _csv(args.models)]
    )
    arch, sms = "sm_90a", 132

    def probs(tokens, routing="balanced"):
        return [make_problem(m, int(t), 8, routing) for m in models for t in _csv(tokens)]

    def call_s(p):
        return p.floor_seconds(H200_READ, H200_BF16) / FLOOR_EFFICIENCY

    def ref_s(p):  # fp32 reference (no TF32, ~50 TFLOP/s) + inputs (~1 TB/s to generate)
        return p.flops / 50e12 + 6 * (p.rows * p.k + p.experts * p.n * p.k) / 1e12

    lines = [f"session plan ({arch}, {sms} SMs; estimates from the H200 numbers in facts.md)"]
    total = 0.0
    tune_p = probs(args.tune_tokens)
    comp_p = probs(args.compare_tokens) + probs(args.skewed_tokens, "skewed")
    abl_p = probs(args.ablation_tokens)
    abl_impls = [s for s in range(3, 8) if autotune.stage_available(arch, s)]
    reqs = tune.compile_requests(tune_p, arch, sms, args.limit)
    reqs += tune.compile_requests(abl_p, arch, sms, 0, ablation=True)
    reqs = list(dict.fromkeys(reqs))
    est = len(reqs) * COMPILE_S / max(1, args.jobs) + 8
    total += est
    lines.append(f"precompile: {len(reqs)} kernels over {args.jobs} workers ~{est:.0f} s")
    total += 15
    lines.append("ceilings + clocks: ~15 s")
    if not args.table:
        calls = _calls_per_impl(args.tune_rounds, args.tune_reps)
        t = 0.0
        ncand = 0
        for p in tune_p:
            cands = autotune.candidates(arch, p.n, p.k, p.experts, p.rows, args.limit)
            ncand += len(cands)
            t += len(cands) * calls * call_s(p) * 1.15 + ref_s(p) + 0.3
        t = min(t, args.tune_s)
        total += t
        lines.append(
            f"tune: {len(tune_p)} shapes, {ncand} candidates ({ncand / len(tune_p):.1f} per "
            f"shape; stages here: {abl_impls}) ~{t:.0f} s (budget {args.tune_s:.0f})"
        )
    calls = _calls_per_impl(args.rounds or 10, args.reps)  # one cycle: 10 rounds for 5 impls
    impls = _csv(args.compare_impls)
    qt = [int(x) for x in _csv(args.quack_tuned_tokens)]
    t = 0.0
    for p in comp_p:
        n_impl = len(impls) + (p.meta["tokens_per_gpu"] in qt)
        t += n_impl * calls * call_s(p) * 1.1 + ref_s(p) + TRITON_TUNE_CALLS * call_s(p) + 0.5
        if p.meta["tokens_per_gpu"] in qt and p.meta["routing"] == "balanced":
            t += QUACK_TUNE_S
    t = min(t, args.compare_s)
    total += t
    lines.append(
        f"compare: {len(comp_p)} shapes x {impls} + quack-tuned at {qt} ~{t:.0f} s "
        f"(budget {args.compare_s:.0f})"
    )
    t = sum(len(abl_impls) * calls * call_s(p) * 1.1 + ref_s(p) + 0.5 for p in abl_p)
    t = min(t, args.ablation_s)
    total += t
    lines.append(
        f"ablation: {len(abl_p)} shapes x stages {abl_impls} ~{t:.0f} s (budget {args.ablation_s:.0f})"
    )
    total += 30
    lines.append("first-call: 3 fresh processes ~30 s")
    lines.append(
        f"total ~{total:.0f} s of Python (+ ~20 s for .device/run.sh to unpack the DSL); "
        f"session budget {args.budget_s:.0f} s"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ["PEARL_MOE_KERNEL_CACHE"] = args.kernel_cache
    phases = _csv(args.phases)
    unknown = set(phases) - set(PHASES)
    if unknown:
        print(f"unknown phases {sorted(unknown)}; known: {PHASES}", file=sys.stderr)
        return 2
    s = Session(args)

    if args.plan:
        print(plan(args))
        return 0

    import torch

    from pearl_moe.bench import cli, harness, tune
    from pearl_moe.bench.compare import compare_summary, format_compare
    from pearl_moe.bench.records import environment, new_run, raise_read_ceiling, write_run
    from pearl_moe.kernels import autotune, compile_cache
    from pearl_moe.kernels.api import _arch_of
    from pearl_moe.workloads import MODELS, get_model, make_problem

    if not torch.cuda.is_available():
        print("no CUDA GPU visible: this script measures on the GPU", file=sys.stderr)
        return 2
    tqdm = tune._progress()
    arch = _arch_of(torch.device("cuda"))
    gpu = autotune.gpu_name("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    models = (
        list(MODELS) if args.models == "all" else [get_model(m).name for m in _csv(args.models)]
    )
    command = "python scripts/h200_session.py " + " ".join(sys.argv[1:])
    s.log["gpu"], s.log["arch"], s.log["sms"] = gpu, arch, sms

    def problems(tokens, routing="balanced"):
        return [make_problem(m, int(t), 8, routing) for m in models for t in _csv(tokens)]

    tune_problems = problems(args.tune_tokens)
    compare_problems = [
        make_problem(m, int(t), 8, r)
        for t, r in [(t, "balanced") for t in _csv(args.compare_tokens)]
        + [(t, "skewed") for t in _csv(args.skewed_tokens)]
        for m in models
    ]  # token count by token count: a deadline cuts the largest last
    ablation_problems = problems(args.ablation_tokens)
    ablation_impls = [f"pearl-s{st}" for st in range(3, 8) if autotune.stage_available(arch, st)]
    s.log["ablation_stages_here"] = ablation_impls

    # ------------------------------------------------------------------ precompile
    def precompile():
        reqs = []
        if "tune" in phases:
            reqs += tune.compile_requests(tune_problems, arch, sms, args.limit)
        if "ablation" in phases:
            reqs += tune.compile_requests(ablation_problems, arch, sms, 0, ablation=True)
        if "compare" in phases:
            for p in compare_problems:  # the default picks (heuristic or --table)
                st, cfg = autotune.pick_config(arch, p.n, p.k, p.experts, p.rows, gpu)
                reqs.append((arch, st, cfg, p.n, p.k, p.experts, sms))
        reqs = list(dict.fromkeys(reqs))
        info = tune.precompile_with_progress(reqs, args.jobs, tqdm)
        print(json.dumps({k: v for k, v in info.items() if k != "failed"}), flush=True)
        for key, err in list(info["failed"].items())[:5]:
            print(f"compile failed {key}: {err}", flush=True)
        return info

    if args.table:
        autotune.use_table(args.table)
    if "precompile" in phases:
        info = s.phase("precompile", precompile)
        if info:
            s.log["phases"]["precompile"].update(
                compiled=info["compiled"], cached=info["cached"], failed=len(info["failed"])
            )

    # ------------------------------------------------------------------ ceilings, once
    env = environment(command)
    ceilings = None
    if {"compare", "ablation"} & set(phases):

        def measure():
            c = harness.measure_ceilings()
            env["clocks_under_load"] = [cli.load_clocks("after the ceilings (warmed up)")]
            print(
                f"read {c['read_bytes_per_s'] / 1e12:.2f} TB/s, bf16 "
                f"{c['bf16_flops_per_s'] / 1e12:.0f} TFLOP/s; clocks {env['clocks_under_load'][0]}",
                flush=True,
            )
            return c

        ceilings = s.phase("ceilings", measure)

    # ------------------------------------------------------------------ tune
    table_path = s.out / f"tuning_{gpu}.json"
    if "tune" in phases and not args.table:

        def do_tune(deadline):
            merge = []
            if args.merge_table:
                start = json.loads(Path(args.merge_table).read_text())
                if start.get("gpu") != gpu:
                    print(
                        f"--merge-table {args.merge_table} is for {start.get('gpu')}, not {gpu}: "
                        "tuning from an empty table",
                        flush=True,
                    )
                    merge = ["--no-merge"]
                elif Path(args.merge_table).resolve() != table_path.resolve():
                    shutil.copyfile(args.merge_table, table_path)
            else:
                merge = ["--no-merge"]
            targs = tune.parse_args(
                ["--rounds", str(args.tune_rounds), "--reps", str(args.tune_reps),
                 "--limit", str(args.limit), *merge]
            )  # fmt: skip
            tenv = environment(command + "  [phase tune]")
            table = tune.run_tuning(
                tune_problems, arch, gpu, sms, targs, table_path, tenv, deadline, tqdm, args.device
            )
            autotune.use_table(table_path)
            s.log["files"]["tune"] = str(table_path)
            print(tune.format_table(table), flush=True)
            return table

        s.phase("tune", do_tune, args.tune_s)

    # ------------------------------------------------------------------ compare, ablation
    def table_in_use() -> str:
        """Which table the default call reads in this session (the file autotune.load_table reads)."""
        path = autotune.table_path(gpu)
        if path is None or not path.is_file():
            return "none (heuristic)"
        if path.resolve() == (autotune.TABLE_DIR / f"{gpu}.json").resolve():
            return f"the committed pearl_moe/tuning/{gpu}.json"
        return str(path)

    def bench(kind, probs, impl_names, extra_args, deadline):
        bargs = cli.parse_args(
            [
                "--kind",
                kind,
                *(["--rounds", str(args.rounds)] if args.rounds else []),
                "--reps",
                str(args.reps),
                *extra_args,
            ]  # fmt: skip
        )
        run = new_run(kind, dict(env, command=f"{command}  [phase {kind}]"), dict(ceilings))
        run["method"] = cli.method_text(bargs)
        if kind == "compare":
            run["method"]["default_call"] = (
                "pearl = grouped_gemm(A, W, offsets) with no stage or config: the tuned pick; "
                f"table: {table_in_use()}"
            )
        path = s.out / f"{kind}.json"
        cli.run_problems(
            run, probs, cli.load_impls(impl_names), ceilings, bargs, path, deadline,
            device=args.device,
        )  # fmt: skip
        run["env"]["clocks_under_load"] = env.get("clocks_under_load", []) + [
            cli.load_clocks(f"after the {kind} phase")
        ]
        if kind == "compare":
            raise_read_ceiling(run)
            run["compare"] = compare_summary(run, ours="pearl")
        write_run(raise_read_ceiling(run), path)
        s.log["files"][kind] = str(path)
        return run

    compare_run = None
    if "compare" in phases and ceilings:
        impls = _csv(args.compare_impls)
        extra = []
        if args.quack_tuned_tokens.strip():
            impls.append("quack-tuned")
            extra = ["--impl-tokens", f"quack-tuned={args.quack_tuned_tokens}"]
        compare_run = s.phase(
            "compare",
            lambda d: bench("compare", compare_problems, impls, extra, d),
            args.compare_s,
        )
    ablation_run = None
    if "ablation" in phases and len(ablation_impls) < 2:
        print(f"ablation skipped: stages here {ablation_impls} (needs two or more)", flush=True)
        s.log["phases"]["ablation"] = {"ok": False, "skipped": f"stages here: {ablation_impls}"}
    elif "ablation" in phases and ceilings:
        ablation_run = s.phase(
            "ablation",
            lambda d: bench("ablation", ablation_problems, ablation_impls, [], d),
            args.ablation_s,
        )

    # ------------------------------------------------------------------ first call
    if "first-call" in phases and s.remaining() > 60:

        def first_call():
            path = s.out / "first_call.json"
            res = subprocess.run(
                [sys.executable, str(ROOT / "scripts" / "first_call.py"), "--json", str(path)],
                capture_output=True,
                text=True,
                timeout=max(30, s.remaining() - 10),
                env=dict(os.environ, PEARL_MOE_KERNEL_CACHE=""),
            )
            print(res.stdout[-3000:] + res.stderr[-2000:], flush=True)
            s.log["files"]["first_call"] = str(path)

        s.phase("first-call", first_call)

    # ------------------------------------------------------------------ summaries, last
    s.log["kernel_cache"] = dict(compile_cache.STATS)
    s.write_log()
    print("\n=== summaries ===")
    if ablation_run is not None:
        print(cli.summaries(ablation_run, ours="none"))
    if compare_run is not None:
        print(cli.format_table(compare_run))
        print()
        print(format_compare(compare_run["compare"]))
    print(f"\nsession {time.monotonic() - s.t0:.0f} s; files in {s.out}: {s.log['files']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
