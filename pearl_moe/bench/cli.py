"""``python -m pearl_moe bench``: check and time grouped-GEMM implementations on this CUDA GPU.

    python -m pearl_moe bench --models glm,v4,k3 --tokens 1,4,16,64,256,1024,4096 \\
        --skewed-tokens 64 --impls loop,grouped_mm,quack,triton --out results/H200/baselines.json

For every problem: measure nothing until every implementation has passed its correctness check on
fresh random inputs (one reference for all); then time them together in interleaved rounds of
CUDA-graph replays (``--rounds`` rounds of ``--reps`` replays each, in an order where every
implementation takes every position and follows every other equally often), so that ratios
between implementations of one run resolve differences of 1-2 %. The two ceilings (read bandwidth
and bf16 rate) are measured once at the start of the run, on the same GPU. The JSON file is
rewritten after every problem, so an interrupted run keeps what it finished.

    # the default call against every baseline, with the ratio table (our time / best baseline)
    python -m pearl_moe bench --impls pearl,triton,grouped_mm,loop,quack-tuned \
        --impl-tokens quack-tuned=64,4096 --tokens 1,16,64,256,1024,4096 --skewed-tokens 64 \
        --kind compare --compare
    # the default on layers it was never tuned on, beside the course's (compare_general.json)
    python -m pearl_moe bench --set held-out,course --impls pearl,triton,grouped_mm,quack,quack-tuned \
        --kind compare_general --compare
    # the course's ablation: every stage 3..7 against the previous one
    python -m pearl_moe bench --kind ablation
    # the summaries of a recorded run, on any machine
    python -m pearl_moe bench --summarize results/H200/compare.json.gz
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import traceback
from pathlib import Path

from ..results import format_table, read_run
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
    p.add_argument(
        "--set",
        default=None,
        help="instead of --models: the layers of these shape sets, comma list of course, "
        "tuning, held-out (pearl_moe.bench.shape_sets), at --tokens or each set's own counts",
    )
    p.add_argument(
        "--tokens",
        default=None,
        help="tokens per GPU, comma list (default 1,4,16,64,256,1024,4096; ablation: 16,64,256,4096)",
    )
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
        "--impls",
        default=None,
        help="implementations, comma list (default loop,grouped_mm,quack,triton; "
        "ablation: pearl-s3,...,pearl-s7)",
    )
    p.add_argument(
        "--impl-tokens",
        action="append",
        default=[],
        metavar="IMPL=T1,T2",
        help="run IMPL only at these token counts (e.g. quack-tuned=64,4096); repeatable",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="interleaved rounds per problem (default: whole cycles of the round order, at "
        "least 5: 10 for 5 implementations, 8 for 4, 6 for 3)",
    )
    p.add_argument(
        "--reps", type=int, default=5, help="timed graph replays per implementation per round"
    )
    p.add_argument("--warmup-replays", type=int, default=1, help="untimed replays before each turn")
    p.add_argument("--launches", type=int, default=10, help="calls captured per CUDA graph")
    p.add_argument(
        "--kind",
        default="baselines",
        help="run kind: names the output file; 'ablation' also sets the stage ladder defaults",
    )
    p.add_argument(
        "--compare",
        action="store_true",
        help="print (and store) the ratio table: --ours against the best baseline per shape",
    )
    p.add_argument("--ours", default="pearl", help="our implementation in --compare")
    p.add_argument(
        "--summarize",
        default=None,
        metavar="FILE",
        help="print the comparison and ablation summaries of a recorded run and exit (no GPU)",
    )
    p.add_argument("--out", default=None, help="output .json file or folder (results/<gpu>/)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out: skip its problems, add the others (one command may "
        "not fit in one sitting); each part's command, clocks and ceilings go to env.parts",
    )
    p.add_argument(
        "--remeasure-changed",
        action="store_true",
        help="with --resume: first drop the problems whose default pick changed since they were "
        "timed (the table or the picker changed), so this part times them again with every "
        "implementation; env.parts lists them",
    )
    p.add_argument(
        "--remeasure-ours",
        default="",
        metavar="REGEX",
        help="with --resume and --why: first drop the problems whose default-call record ran a "
        "configuration matching REGEX (re.search on its label, e.g. 'pingpong| (128|256)x' after "
        "a change to those kernels), so this part times them again; env.parts lists them, what "
        "they had and why",
    )
    p.add_argument("--why", default="", help="why --remeasure-ours times them again (env.parts)")
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="start no new problem after this many seconds (what finished is kept)",
    )
    return apply_kind_defaults(p.parse_args(argv))


def check_resumable(run: dict, kind: str, gpu: str | None, path: Path) -> None:
    """``ValueError`` unless the recorded ``run`` at ``path`` can be continued by this command:
    the same kind of run, measured on the same GPU."""
    if run["kind"] != kind:
        raise ValueError(f"--resume: {path} is a {run['kind']!r} run, not {kind!r}")
    if run["env"].get("gpu") != gpu:
        raise ValueError(
            f"--resume: {path} was measured on {run['env'].get('gpu')}, this GPU is {gpu}"
        )


def drop_changed_picks(path: Path, run: dict | None = None) -> list[dict]:
    """Remove from the run at ``path`` (``run``: it, already read) every problem and its records
    whose default pick has changed since it was timed
    (:func:`pearl_moe.bench.compare.changed_picks`); returns them.
    Each problem's ratios are paired inside the part that times it, so re-timing a problem in a
    later part keeps the run's comparison sound."""
    from ..results import read_run
    from .compare import changed_picks

    run = read_run(path) if run is None else run
    changed = changed_picks(run)
    _drop_problems(path, run, {c["problem"] for c in changed})
    return changed


def drop_problems(run: dict, gone) -> dict:
    """``run`` without the problems ``gone`` (ids) and their records (changed in place)."""
    run["problems"] = [p for p in run["problems"] if p["id"] not in gone]
    run["records"] = [r for r in run["records"] if r["problem"] not in gone]
    return run


def _drop_problems(path: Path, run: dict, gone: set[str]) -> None:
    """``run`` without the problems ``gone`` and their records, written back to ``path``."""
    from ..results import write_run

    if gone:
        write_run(drop_problems(run, gone), path)


def drop_ours_matching(path: Path, run: dict, pattern: str, why: str) -> list[dict]:
    """Remove from the run at ``path`` (``run``: it, already read) every problem, with all its
    records, whose default call (``pearl``) ran a configuration matching ``pattern``
    (``re.search`` on the recorded label); returns them with the configuration and the median
    times they had and ``why``, for ``env.parts``. For a kernel change that leaves the picks as
    they were (so :func:`drop_changed_picks` sees nothing) but changes what some of them run."""
    import re

    if not why:
        raise ValueError(
            "--remeasure-ours needs --why: the run lists why the records were replaced"
        )
    regex = re.compile(pattern)
    ours = {r["problem"]: r for r in run["records"] if r["impl"] == "pearl" and r.get("config")}
    gone = sorted(p for p, r in ours.items() if regex.search(r["config"].get("config", "")))
    dropped = []
    for pid in gone:
        had = {r["impl"]: round(r["time"]["median_us"], 1) for r in run["records"]
               if r["problem"] == pid and r.get("time")}  # fmt: skip
        dropped.append(
            {"problem": pid, "timed": ours[pid]["config"]["config"], "had_us": had, "why": why}
        )
    _drop_problems(path, run, set(gone))
    return dropped


#: What ``--kind ablation`` runs unless told otherwise: every course stage from 3 on, 3 models x 4
#: token counts.
ABLATION_IMPLS = "pearl-s3,pearl-s4,pearl-s5,pearl-s6,pearl-s7"
ABLATION_TOKENS = "16,64,256,4096"


def apply_kind_defaults(args: argparse.Namespace) -> argparse.Namespace:
    ablation = args.kind == "ablation"
    if args.impls is None:
        args.impls = ABLATION_IMPLS if ablation else "loop,grouped_mm,quack,triton"
    if args.tokens is None and not args.set:
        args.tokens = ABLATION_TOKENS if ablation else "1,4,16,64,256,1024,4096"
    return args


def impl_token_limits(specs: list[str]) -> dict[str, set[int]]:
    """``["quack-tuned=64,4096"]`` -> ``{"quack-tuned": {64, 4096}}``."""
    out: dict[str, set[int]] = {}
    for spec in specs:
        name, sep, tokens = spec.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--impl-tokens wants IMPL=T1,T2, got {spec!r}")
        out.setdefault(name.strip(), set()).update(_ints(tokens))
    return out


def build_problems(args: argparse.Namespace):
    if getattr(args, "set", None):
        from . import shape_sets

        tokens = _ints(args.tokens) if args.tokens else None
        return [p for name in _csv(args.set) for p in shape_sets.problems(name, tokens)]
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


class PlainProgress:
    """Stand-in for tqdm (the GPU machine's image has none): a line per finished item, at most
    about twenty per bar, with the seconds since the bar started."""

    def __init__(self, total: int, desc: str = "", unit: str = ""):
        self.total, self.done, self.desc, self.postfix = total, 0, desc, ""
        self.unit, self.t0, self.shown = unit, time.monotonic(), 0

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def update(self, n: int = 1) -> None:
        self.done += n
        step = max(1, self.total // 20)
        if self.done >= self.total or self.done - self.shown >= step:
            self.shown = self.done
            print(
                f"{self.desc} {self.done}/{self.total} {self.unit} "
                f"{time.monotonic() - self.t0:.0f} s {self.postfix}",
                flush=True,
            )

    def close(self) -> None:
        pass


def load_impls(names: list[str]) -> dict:
    """``{name: Implementation}``, or the ImplementationUnavailable that says why not."""
    from . import harness

    impls = {}
    for name in names:
        try:
            impls[name] = harness.get_impl(name)
        except harness.ImplementationUnavailable as exc:
            print(f"{name}: unavailable: {exc}", flush=True)
            impls[name] = exc
    return impls


def _error_record(problem, name: str, status: str, exc) -> dict:
    from ..results import problem_id

    text = str(exc) if status == "unavailable" else f"{type(exc).__name__}: {exc}"
    return {
        "problem": problem_id(problem),
        "impl": name,
        "status": status,
        "config": {},
        "error": text[:500],
    }


def impls_for(problem, impls: dict, args) -> dict:
    """The implementations that run on ``problem`` (``--impl-tokens`` limits some)."""
    limits = impl_token_limits(getattr(args, "impl_tokens", []) or [])
    tokens = problem.meta.get("tokens_per_gpu")
    return {n: i for n, i in impls.items() if n not in limits or tokens in limits[n]}


def bench_problem(impls: dict, problem, ceilings: dict, args, device="cuda") -> list[dict]:
    """Check every implementation of ``problem``, then time those that passed in interleaved
    rounds (:func:`pearl_moe.bench.harness.time_interleaved`). One record per implementation that
    applies to the problem (``--impl-tokens`` may leave some out)."""

    from ..results import problem_id
    from . import harness

    here = impls_for(problem, impls, args)
    records: dict = {}
    ready = {}
    for name, impl in here.items():
        if isinstance(impl, Exception):
            records[name] = _error_record(problem, name, "unavailable", impl)
        else:
            ready[name] = impl
    checks = harness.check_many(ready, problem, device) if len(ready) > 1 else {}
    if len(ready) == 1:  # one implementation: let its exception surface as an error record
        ((name, impl),) = ready.items()
        try:
            checks = {name: harness.check(impl, problem, device)}
        except Exception as exc:
            checks = {name: (exc, {})}
    timed = {}
    for name, (result, config) in checks.items():
        if isinstance(result, Exception):
            traceback.print_exception(type(result), result, result.__traceback__)
            records[name] = _error_record(problem, name, "error", result)
            continue
        rec = {"problem": problem_id(problem), "impl": name, "config": config}
        rec["correctness"] = result.as_dict()
        if not result.ok:
            rec["status"] = "incorrect"
        else:
            timed[name] = ready[name]
        records[name] = rec
    if timed:
        try:
            times = harness.time_interleaved(
                timed,
                problem,
                rounds=rounds_for(args, len(timed)),
                reps=args.reps,
                launches=args.launches,
                device=device,
                warmup_replays=getattr(args, "warmup_replays", 1),
            )
        except Exception as exc:  # a single implementation raised while capturing
            traceback.print_exc()
            times = {name: (exc, {}) for name in timed}
            harness.sync(device)
        for name, (timing, config) in times.items():
            rec = records[name]
            if isinstance(timing, Exception):
                records[name] = _error_record(problem, name, "error", timing)
                continue
            rec["config"] = config or rec["config"]
            rec["time"] = timing.as_dict()
            if timing.outputs_ok is False:  # the timed graph computed something else
                rec["status"] = "incorrect"
                rec["correctness"]["ok"] = False
                rec["correctness"]["message"] = f"after timing: {timing.outputs_message}"
                continue
            rec["metrics"] = harness.metrics(problem, timing.median_s, ceilings)
            rec["status"] = "ok"
    return [records[name] for name in here]


def rounds_for(args, implementations: int) -> int:
    """``--rounds``, or whole cycles of the round order (balanced positions and predecessors):
    the fewest that make at least 5 rounds (10 for 5 implementations, 8 for 4, 6 for 3)."""
    from .harness import order_cycle

    if args.rounds:
        return args.rounds
    cycle = order_cycle(max(implementations, 1))
    return cycle * -(-5 // cycle)


def method_text(args) -> dict:
    rounds_text = (
        f"{args.rounds} (a full cycle only where that is a multiple of the cycle)"
        if args.rounds
        else "whole cycles (at least 5) of"
    )
    return {
        "check": "fresh random inputs (A ~ N(0,1), W ~ N(0,1/k)), output poisoned with NaN, "
        "max abs error vs a float32 reference <= 2 x torch bf16 error + 1e-3, every row written; "
        "after timing, the graph's output for every input set is checked the same way",
        "timing": f"each implementation in its own CUDA graph of >= {args.launches} calls over "
        f"rotating input sets shared by all (enough sets to cycle >= 4x L2); {rounds_text} "
        f"interleaved rounds, in the orders of harness.round_orders (the rows of a Williams "
        f"design: over a cycle of rounds each implementation takes every position and comes after "
        f"every other equally often; the rows arranged so that no implementation ends one round "
        f"and opens the next and no ordered pair recurs at those hand-overs more than needed; "
        f"the arrangement rotated by crc32(problem name); each record's time.after lists its "
        f"predecessor in every round), each: "
        f"{args.warmup_replays} untimed replay(s) "
        f"then {args.reps} timed replays per implementation; time per call = replay time / "
        "calls; median over all replays, round medians and their spread (range_pct, iqr_pct) "
        "recorded; ratios between implementations are taken round by round",
        "clocks": "env.clocks: idle, before any GPU work; env.clocks_under_load: nvidia-smi "
        "while a bf16 matmul loop ran, after the ceilings and after the last problem",
        "floor": "max(bytes_moved / read ceiling, flops / bf16 ceiling), bytes_moved = weights of "
        "experts with rows + A + out",
    }


def load_clocks(when: str) -> dict:
    from ..results import clocks_under_load

    try:
        return clocks_under_load(when)
    except Exception as exc:  # never lose a run over a clock reading
        return {"when": when, "source": f"unavailable ({type(exc).__name__}: {exc})"[:200]}


def run_problems(
    run: dict,
    problems,
    impls: dict,
    ceilings: dict,
    args,
    out: Path,
    deadline: float | None = None,
    t_start: float | None = None,
    device="cuda",
):
    """Bench every problem into ``run`` (records appended, file rewritten after each problem).
    ``deadline``: a ``time.monotonic()`` after which no new problem starts (skipped ones listed);
    ``t_start``: when the run started (``env.elapsed_s`` counts from it; default: now)."""
    import torch

    from ..results import problem_entry, raise_read_ceiling, write_run

    try:
        from tqdm.auto import tqdm
    except ImportError:  # the GPU machine's image may lack tqdm
        tqdm = PlainProgress
    t_start = time.monotonic() if t_start is None else t_start
    skipped = run["env"].setdefault("skipped_problems", [])
    bar = tqdm(total=len(problems), desc=run["kind"], unit="problem")
    for problem in problems:
        if deadline is not None and time.monotonic() > deadline:
            skipped.append(problem.name)
            bar.update(1)
            continue
        bar.set_postfix_str(problem.name[:48])
        run["problems"].append(problem_entry(problem, ceilings))
        if run["env"].get("parts"):
            run["env"]["parts"][-1]["problems"].append(run["problems"][-1]["id"])
        try:
            recs = bench_problem(impls, problem, ceilings, args, device)
        except Exception as exc:  # e.g. out of memory making the inputs: every impl an error
            traceback.print_exc()
            recs = [
                _error_record(problem, name, "error", exc)
                for name in impls_for(problem, impls, args)
            ]
        for rec in recs:
            if rec["status"] != "ok":
                print(f"\n{rec['impl']} on {problem.name}: {rec['status']}", flush=True)
            run["records"].append(rec)
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
        bar.update(1)
        run["env"]["elapsed_s"] = round(time.monotonic() - t_start, 1)
        write_run(raise_read_ceiling(run), out)
    bar.close()
    return run


def resume_run(
    path: Path, part: dict, problems, recorded: dict | None = None, carry: tuple = ()
) -> tuple[dict, list]:
    """The recorded run at ``path`` (``recorded``: it, already read) continued by ``part`` (a new
    run's head: this command's env and probed ceilings), and the ``problems`` it has not recorded
    yet.

    The run's env becomes this part's, with ``env.parts`` listing every part (date, command,
    clocks, probed ceilings, problems) and the recorded env's values of the keys ``carry`` (the
    layer bench carries its faults, the problems a deadline left and the edits); its ceilings
    stay the first part's probes (a grouped-GEMM run raises them over all records as always,
    :func:`~pearl_moe.results.raise_read_ceiling`). Ratios are paired within a problem, all of
    whose implementations one part times, so parts taken on one GPU compare as one run. The
    grouped-GEMM bench and the layer bench (:mod:`pearl_moe.bench.layer`) both resume here."""
    run = read_run(path) if recorded is None else recorded
    check_resumable(run, part["kind"], part["env"].get("gpu"), path)
    parts = run["env"].get("parts") or [
        {**_part_env(run["env"]), "ceilings": dict(run["ceilings"]),
         "problems": [p["id"] for p in run["problems"]]}
    ]  # fmt: skip
    env = part["env"]
    env["parts"] = [*parts, {**_part_env(env), "ceilings": dict(part["ceilings"]), "problems": []}]
    for key in carry:
        if run["env"].get(key):
            env[key] = list(run["env"][key])
    run["env"] = env
    done = {p["id"] for p in run["problems"]}
    return run, [p for p in problems if _problem_id(p) not in done]


def pick_requests(calls, device="cuda") -> list[tuple]:
    """The compile requests of what the default call runs on each of ``calls``, ``(n, k,
    experts, rows[, activation[, gather]])`` (:func:`pearl_moe.kernels.api.default_choice`), in
    order, each once."""
    import torch

    from ..kernels import autotune
    from ..kernels.api import arch_of, default_choice
    from ..kernels.targets import persistent_ctas

    arch = arch_of(torch.device(device))
    gpu = autotune.gpu_name(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    requests = []
    for n, k, experts, rows, *activation in calls:
        stage, config = default_choice(arch, n, k, experts, rows, gpu, *activation)
        ctas = persistent_ctas(arch, config, sms, torch.device(device))
        requests.append((arch, stage, config, n, k, experts, ctas))
    return list(dict.fromkeys(requests))


def default_pick_requests(problems, device="cuda") -> list[tuple]:
    """The compile requests of the default call's pick for every problem (what ``pearl`` runs)."""
    return pick_requests([(p.n, p.k, p.experts, p.rows) for p in problems], device)


def precompile_default_picks(problems, impls: list[str], device="cuda"):
    """When ``pearl`` is among ``impls``, compile its picks for all problems into the disk cache
    in a background thread (worker processes; returned, to ``join``), else None: the run then
    loads each kernel in milliseconds instead of compiling it inside a problem's turn."""
    if "pearl" not in impls:
        return None
    return precompile_in_background(lambda: default_pick_requests(problems, device))


def precompile_in_background(requests, what: str = "the default call's"):
    """Compile ``requests()`` into the disk cache in a background thread (worker processes;
    returned, to ``join``), or None where the cache is off. A failure is printed, not raised:
    the run compiles what is missing itself."""
    import threading

    from ..kernels import compile_cache

    if compile_cache.cache_root() is None:
        return None
    asked = requests()

    def work():
        try:
            done = compile_cache.precompile(asked)
            failed = [r for r in done if not r["ok"]]
            print(f"precompiled {what} {len(asked)} kernels ({len(failed)} failed)", flush=True)
        except Exception as exc:  # the run compiles what is missing itself
            print(f"precompiling {what} kernels failed: {exc}"[:300], flush=True)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def _part_env(env: dict) -> dict:
    keep = ("date", "command", "clocks", "clocks_under_load", "elapsed_s", "skipped_problems")
    return {k: env[k] for k in keep if k in env}


def _problem_id(problem) -> str:
    """The id a run's entry of ``problem`` has: a layer problem's own, else a grouped GEMM's."""
    from ..results import problem_id

    return getattr(problem, "id", None) or problem_id(problem)


def summaries(run: dict, ours: str = "pearl") -> str:
    """The comparison (if ``ours`` ran) and the ablation (if stages ran) of ``run``, as text."""
    from .compare import ablation_summary, compare_summary, format_ablation, format_compare

    parts = []
    impls = {r["impl"] for r in run["records"]}
    if ours in impls and len(impls) > 1:
        parts.append(format_compare(compare_summary(run, ours=ours)))
    ablation = ablation_summary(run)
    if len(ablation["chain"]) > 1:
        parts.append(format_ablation(ablation))
    return "\n\n".join(parts)


def summarize_file(path: str, ours: str = "pearl") -> int:
    """Print the summaries of the run at ``path``: a grouped-GEMM run's table, comparison and
    ablation, or a layer run's (:func:`pearl_moe.bench.compare.format_layer_summary`, with its
    step breakdown where it has one)."""
    from ..results import LAYER_SCHEMA

    run = read_run(path)
    if run["schema"] == LAYER_SCHEMA:
        from .compare import layer_text

        print(layer_text(run, None if ours == "pearl" else ours))
        return 0
    text = summaries(run, ours)
    print(format_table(run))
    print()
    print(text or "(no comparison or ablation in this run)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.summarize:
        return summarize_file(args.summarize, args.ours)
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
            "  python -c 'from pearl_moe import results; print(results.table())'\n"
            "  python -m pearl_moe bench --summarize results/H200/<kind>.json",
            file=sys.stderr,
        )
        return 2

    from ..results import environment, new_run, raise_read_ceiling, write_run
    from . import harness
    from .compare import compare_summary

    problems = build_problems(args)
    device_name = torch.cuda.get_device_name()
    out = _resolve_out(args.out, device_name, args.kind)
    t_start = time.monotonic()
    env = environment(" ".join(["python -m pearl_moe bench", *(argv or sys.argv[1:])]))
    todo = problems
    redone = []
    if (args.remeasure_changed or args.remeasure_ours) and not args.resume:
        print("error: --remeasure-changed and --remeasure-ours continue a run: give --resume too",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.remeasure_ours and not args.why:
        print("error: --remeasure-ours needs --why (the run lists it)", file=sys.stderr)
        return 2
    again = []
    recorded = read_run(out) if args.resume and out.exists() else None  # read once, used below
    if recorded is not None:
        check_resumable(recorded, args.kind, env.get("gpu"), out)  # before changing the file
        if args.remeasure_changed:
            redone = drop_changed_picks(out, recorded)
            print(f"{len(redone)} problems' picks changed since they were timed: timing them again")
        if args.remeasure_ours:
            again = drop_ours_matching(out, recorded, args.remeasure_ours, args.why)
            print(f"{len(again)} problems ran a configuration matching {args.remeasure_ours!r}: "
                  "timing them again")  # fmt: skip
        done = {p["id"] for p in recorded["problems"]}
        todo = [p for p in problems if _problem_id(p) not in done]
    ahead = precompile_default_picks(todo, _csv(args.impls))  # compiles while ceilings run
    print(f"{device_name}: measuring the ceilings ...", flush=True)
    ceilings = harness.measure_ceilings()
    print(
        f"read {ceilings['read_bytes_per_s'] / 1e12:.2f} TB/s, "
        f"bf16 {ceilings['bf16_flops_per_s'] / 1e12:.0f} TFLOP/s",
        flush=True,
    )
    env["clocks_under_load"] = [load_clocks("after the ceilings (warmed up)")]
    print(f"clocks under load: {env['clocks_under_load'][0]}", flush=True)
    run = new_run(args.kind, env, ceilings)
    run["method"] = method_text(args)
    if recorded is not None:
        run, problems = resume_run(out, run, problems, recorded)
        if redone:
            run["env"]["parts"][-1]["remeasured_changed_picks"] = redone
        if again:
            run["env"]["parts"][-1]["remeasured_ours"] = again
        print(f"resuming {out}: {len(run['problems'])} problems done, {len(problems)} to go")
    impls = load_impls(_csv(args.impls))
    if ahead is not None:
        ahead.join()
    deadline = t_start + args.deadline_s if args.deadline_s is not None else None
    run_problems(run, problems, impls, ceilings, args, out, deadline, t_start)
    run["env"]["clocks_under_load"].append(load_clocks("after the last problem"))
    run["env"]["elapsed_s"] = round(time.monotonic() - t_start, 1)
    if run["env"].get("parts"):
        run["env"]["parts"][-1].update(_part_env(run["env"]))
    if args.compare:
        raise_read_ceiling(run)
        run["compare"] = compare_summary(run, ours=args.ours)
    write_run(raise_read_ceiling(run), out)
    skipped = run["env"]["skipped_problems"]
    print()
    print(format_table(run))
    text = summaries(run, args.ours) if (args.compare or args.kind == "ablation") else ""
    if text:
        print()
        print(text)
    print(f"\nwrote {out}" + (f"; skipped (deadline): {skipped}" if skipped else ""))
    bad = [r for r in run["records"] if r["status"] in ("incorrect", "error")]
    return 1 if bad else 0
