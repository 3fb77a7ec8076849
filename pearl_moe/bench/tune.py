"""``python -m pearl_moe tune``: measure candidate kernel configurations on this GPU and write the
table that :func:`pearl_moe.kernels.autotune.pick` reads.

    python -m pearl_moe tune                                  # 3 models x 6 token counts, H200
    python -m pearl_moe tune --models glm --tokens 1,64 --out /tmp/H200.json
    python -m pearl_moe tune --shape 2816,2048,16 --shape 4096,7168,32,8   # your own layers
    python -m pearl_moe tune --model Mixtral-8x22B --ep 1 --projection both --out my_H200.json
    python -m pearl_moe tune --set tuning        # the public layers the default learns from
    python -m pearl_moe tune --precompile-only --arch sm_90a --sms 132   # on a CPU, no GPU

For every (model, tokens) shape: the pruned candidates of :func:`.candidates.candidates` (about 10-16;
fewer while course stages 4-7 are missing), compiled in parallel worker processes into the disk
cache (:func:`pearl_moe.kernels.compile_cache.precompile`; compiling needs no GPU) a few shapes
ahead of their timing (:class:`CompileAhead`: the CPU compiles while the GPU times), then
checked against the float32 reference and timed together in interleaved rounds of CUDA-graph
replays (:func:`pearl_moe.bench.harness.time_interleaved`). The fastest correct candidate by median
becomes the entry for ``(n, k, experts, rows-per-expert bucket)``; every candidate's time is kept
beside it. The table is rewritten after each shape and merged with an existing file of the same
GPU (entries of other shapes stay).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from ..workloads import MODELS, get_model, make_problem

__all__ = ["main", "parse_args", "compile_requests", "tune_problem", "merge_entries"]

DEFAULT_TOKENS = "1,16,64,256,1024,4096"


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m pearl_moe tune",
        description="Measure candidate configurations of our kernel on this GPU; write the table "
        "grouped_gemm's default reads (pearl_moe/tuning/<GPU>.json).",
    )
    p.add_argument(
        "--models",
        default=None,
        help="comma list of model names, or 'all' (the default, unless --shape is given)",
    )
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="N,K,EXPERTS[,TOPK]",
        help="a layer by the grouped GEMM one GPU runs: n (gate+up width), k (hidden), local "
        "experts, top-k (default 8); repeatable; tuned at every --tokens count",
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME",
        help="a model by name: the course's three or the public ones of pearl_moe.workloads "
        "(e.g. Mixtral-8x22B); repeatable",
    )
    p.add_argument(
        "--set",
        default=None,
        choices=("tuning", "course"),
        help="the layers of a shape set (pearl_moe.bench.shape_sets; the held-out set is never tuned)",
    )
    p.add_argument(
        "--tokens",
        default=None,
        help=f"tokens per GPU, comma list (default {DEFAULT_TOKENS}; with --set, the set's own)",
    )
    p.add_argument("--ep", type=int, default=8, help="expert-parallel degree")
    p.add_argument(
        "--projection",
        default="gate_up",
        choices=("gate_up", "down", "both"),
        help="which projection of --models / --model / --shape layers (--set has both)",
    )
    p.add_argument("--limit", type=int, default=28, help="most candidates per shape")
    p.add_argument(
        "--group-twins",
        type=int,
        default=0,
        help="at prefill, also time n_group=8 twins of N candidates of 128+ rows, split-accumulator, "
        "256-row and cluster tiles first (beyond --limit; experiments/prefill_order)",
    )
    p.add_argument(
        "--skew-tokens",
        default="64",
        help="token counts whose pick must also hold under skewed routing ('' for none): the "
        "candidates are timed on both routings and the best worst case wins",
    )
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per shape")
    p.add_argument("--reps", type=int, default=3, help="timed replays per candidate per round")
    p.add_argument("--launches", type=int, default=10, help="calls captured per CUDA graph")
    p.add_argument(
        "--refine-within",
        type=float,
        default=0.05,
        help="time the candidates within this fraction of the fastest again (0: no second pass)",
    )
    p.add_argument(
        "--refine-rounds", type=int, default=7, help="interleaved rounds of the second pass"
    )
    p.add_argument(
        "--jobs", type=int, default=None, help="compile worker processes (default: CPUs)"
    )
    p.add_argument("--out", default=None, help="table file (default pearl_moe/tuning/<GPU>.json)")
    p.add_argument("--no-merge", action="store_true", help="replace the file instead of merging")
    p.add_argument(
        "--skip-tuned",
        action="store_true",
        help="leave out shapes the --out table already holds (continue a tuning cut by a deadline)",
    )
    p.add_argument(
        "--skip-tuned-since",
        default=None,
        metavar="DATE",
        help="leave out shapes whose --out entry was tuned at or after DATE (ISO 8601): continue "
        "re-tuning shapes the table already holds, after the candidates changed on DATE",
    )
    p.add_argument("--deadline-s", type=float, default=None, help="start no shape after this")
    p.add_argument(
        "--above-rows-per-expert",
        type=float,
        default=None,
        metavar="R",
        help="tune only the shapes with more than R rows per expert on average (re-time the "
        "prefill entries after the prefill candidates changed, say)",
    )
    p.add_argument(
        "--at-most-rows-per-expert",
        type=float,
        default=None,
        metavar="R",
        help="tune only the shapes with at most R rows per expert on average (with "
        "--above-rows-per-expert: one band of sizes)",
    )
    p.add_argument(
        "--cache-dir", default=None, help="kernel disk cache folder ($PEARL_MOE_KERNEL_CACHE)"
    )
    p.add_argument(
        "--precompile-only",
        action="store_true",
        help="compile every candidate into the disk cache and exit (no GPU needed)",
    )
    p.add_argument("--arch", default=None, help="with --precompile-only: sm_90a or sm_100a")
    p.add_argument("--sms", type=int, default=None, help="with --precompile-only: SM count")
    p.add_argument(
        "--with-ablation",
        action="store_true",
        help="with --precompile-only: also the course configurations of stages 3-7",
    )
    return p.parse_args(argv)


def parse_shape(text: str, ep: int = 8):
    """``"n,k,experts[,top_k]"`` -> a :func:`pearl_moe.workloads.shape_model` layer."""
    from ..workloads import shape_model

    try:
        values = [int(v) for v in _csv(text)]
    except ValueError:
        values = []
    if len(values) not in (3, 4):
        raise ValueError(f"--shape {text!r}: expected n,k,experts or n,k,experts,top_k (integers)")
    return shape_model(*values[:3], top_k=values[3] if len(values) == 4 else 8, ep=ep)


def build_problems(args) -> list:
    """The problems to tune: the layers of ``--set``, every named model (``--models``,
    ``--model``; all three course models unless only ``--shape`` or ``--set`` is given) and every
    ``--shape``, at each ``--tokens`` count (with ``--set`` alone, the set's own counts)."""
    from . import shape_sets

    given = args.models is not None or args.model or args.shape or args.set
    models = args.models if args.models is not None else ("" if given else "all")
    names = list(MODELS) if models == "all" else [get_model(m).name for m in _csv(models)]
    names += [get_model(m).name for m in args.model]
    layers = [*names, *(parse_shape(s, args.ep) for s in args.shape)]
    tokens = [int(t) for t in _csv(args.tokens)] if args.tokens else None
    # a set's skewed cases are not tuned on their own: --skew-tokens times a bucket's
    # candidates on skewed routing too, and a skewed-only entry would replace that one
    problems = (
        [c.problem() for c in shape_sets.cases(args.set, tokens) if c.routing == "balanced"]
        if args.set
        else []
    )
    projections = ("gate_up", "down") if args.projection == "both" else (args.projection,)
    problems += [
        make_problem(m, t, args.ep, "balanced", proj)
        for m in layers
        for proj in projections
        for t in tokens or [int(t) for t in _csv(DEFAULT_TOKENS)]
    ]
    floor = getattr(args, "above_rows_per_expert", None)
    if floor is not None:
        problems = [p for p in problems if p.rows / p.experts > floor]
    ceiling = getattr(args, "at_most_rows_per_expert", None)
    if ceiling is not None:
        problems = [p for p in problems if p.rows / p.experts <= ceiling]
    return problems


def held_out_problems(problems) -> list[str]:
    """Names of ``problems`` of a held-out model (any layer of it, under any EP degree) or with a
    held-out layer's shape: the package's own table must never be tuned on them (the compare
    run judges the default there)."""
    from .shape_sets import cases, set_of

    held = {c.shape() for c in cases("held-out", tokens=(1,))}

    def held_out_model(problem) -> bool:
        try:
            return set_of(problem.meta.get("model", "")) == "held-out"
        except ValueError:  # a layer given by its shape
            return False

    return [p.name for p in problems if (p.n, p.k, p.experts) in held or held_out_model(p)]


def _shape(problem) -> tuple[int, int, int, int]:
    return problem.n, problem.k, problem.experts, problem.rows


def compile_requests(
    problems, arch: str, sms: int, limit: int = 16, ablation: bool = False, device=None,
    group_twins: int = 0,
) -> list[tuple]:  # fmt: skip
    """``(arch, stage, config, n, k, experts, ctas)`` for every candidate of every problem (and,
    with ``ablation``, the course configuration of every stage 3-7 that exists here). ``ctas`` is
    the persistent grid (:func:`pearl_moe.kernels.targets.persistent_ctas`; with ``device``, the
    2-CTA clusters that fit on it)."""
    from ..kernels import autotune
    from ..kernels.api import default_config
    from ..kernels.ladder import LAST_STAGE
    from ..kernels.targets import persistent_ctas
    from .candidates import candidates

    def request(stage, config):
        # the grid the call will launch (2-CTA: the clusters that fit), as grouped_gemm keys it
        ctas = persistent_ctas(arch, config, sms, device)
        return (arch, stage, config, n, k, experts, ctas)

    requests = []
    for p in problems:
        n, k, experts, rows = _shape(p)
        if limit > 0:
            for stage, config in candidates(arch, n, k, experts, rows, limit, sms, group_twins):
                requests.append(request(stage, config))
        if ablation:
            for stage in range(3, LAST_STAGE + 1):
                if autotune.stage_available(arch, stage):
                    requests.append(request(stage, default_config(arch, stage)))
    return list(dict.fromkeys(requests))


def precompile_with_progress(requests, jobs: int | None, tqdm) -> dict:
    """Compile ``requests`` into the disk cache; returns counts and the failures."""
    from ..kernels import compile_cache

    total = len({compile_cache.kernel_key(*r) for r in _resolved(requests)}) or 1
    bar = tqdm(total=total, desc="compile", unit="kernel")
    t0 = time.monotonic()
    results = compile_cache.precompile(requests, jobs=jobs, progress=lambda r: bar.update(1))
    bar.close()
    failed = {r["key"]: r.get("error", "")[:300] for r in results if not r["ok"]}
    return {
        "requests": len(requests),
        "compiled": sum(1 for r in results if r["ok"] and not r.get("cached")),
        "cached": sum(1 for r in results if r.get("cached")),
        "failed": failed,
        "seconds": round(time.monotonic() - t0, 1),
    }


def _resolved(requests):
    out = []
    for arch, stage, config, n, k, experts, sms in requests:
        try:
            out.append((arch, stage, config.resolved(), n, k, experts, sms))
        except ValueError:
            out.append((arch, stage, config, n, k, experts, sms))
    return out


def _candidate(label: str, stage: int, config):
    from ..kernels import grouped_gemm
    from .registry import Implementation, Prepared

    def prepare(A, W, offsets, counts):
        def run(out):
            return grouped_gemm(A, W, offsets, config=config, out=out, stage=stage, check=False)

        return Prepared(
            run, {"stage": stage, "config": config.describe(), "gemm_config": asdict(config)}
        )

    return Implementation(label, prepare)


def tune_problem(problem, arch: str, args, device="cuda") -> dict:
    """Check and time every candidate of ``problem``; the table entry for its shape."""
    from ..kernels import autotune
    from . import harness
    from .candidates import candidates
    from .compare import paired_ratio

    n, k, experts, rows = _shape(problem)
    sms = _sm_count(device)
    twins = getattr(args, "group_twins", 0)
    cands = candidates(arch, n, k, experts, rows, args.limit, sms, twins)
    heuristic = autotune.heuristic(arch, n, k, experts, rows)
    impls = {}
    for stage, config in cands:
        label = f"s{stage} {config.describe()}"
        impls[label] = _candidate(label, stage, config)
    checks = harness.check_many(impls, problem, device)
    rejected = {}
    good = {}
    for label, (result, _) in checks.items():
        if isinstance(result, Exception):
            rejected[label] = f"error: {type(result).__name__}: {result}"[:300]
        elif not result.ok:
            rejected[label] = f"incorrect: {result.message}"[:300]
        else:
            good[label] = impls[label]
    times = harness.time_interleaved(
        good, problem, rounds=args.rounds, reps=args.reps, launches=args.launches, device=device
    )
    measured = _timed_correctly(times, rejected)
    if not measured:
        raise RuntimeError(f"no candidate ran correctly on {problem.name}: {rejected}")
    by_label = dict(zip([f"s{s} {c.describe()}" for s, c in cands], cands, strict=True))
    skewed = _skewed_times(problem, {lb: good[lb] for lb in measured}, args, rejected, device)
    first_pass = dict(measured)
    finalists = [] if skewed else refine_finalists(measured, getattr(args, "refine_within", 0.0))
    if len(finalists) > 1:  # the pick is the fastest of the second pass
        again = harness.time_interleaved(
            {lb: good[lb] for lb in finalists}, problem, rounds=args.refine_rounds,
            reps=args.reps, launches=args.launches, device=device,
        )  # fmt: skip
        measured = _timed_correctly(again, rejected, "timed again: ")
        if not measured:
            raise RuntimeError(f"no finalist ran correctly again on {problem.name}: {rejected}")
    best = _robust_best(measured, skewed)
    stage, config = by_label[best]
    entry = {
        "n": n,
        "k": k,
        "experts": experts,
        "bucket": autotune.rows_bucket(rows, experts),
        "rows_per_expert": round(rows / experts, 3),
        "measured_at": f"{problem.meta.get('model')} {problem.meta.get('tokens_per_gpu')} tokens "
        f"(EP{problem.meta.get('ep')}, {problem.meta.get('routing')})",
        "stage": stage,
        "config": asdict(config),
        "label": config.describe(),
        "median_us": round(measured[best].median_s * 1e6, 2),
        "spread_pct": round(measured[best].spread["range_pct"], 2),
    }
    h_label = f"s{heuristic.stage} {heuristic.config.describe()}"
    # paired within one pass: the second if the heuristic's pick was a finalist, else the first
    entry["heuristic"] = h_label
    pair_pass = measured if h_label in measured else first_pass
    if h_label in pair_pass and best in pair_pass and h_label != best:
        rec = lambda t: {"time": t.as_dict()}  # noqa: E731
        entry["vs_heuristic"] = round(
            paired_ratio(rec(pair_pass[best]), rec(pair_pass[h_label]))["ratio"], 4
        )
    entry["candidates"] = {
        lb: round(t.median_s * 1e6, 2)
        for lb, t in sorted(measured.items(), key=lambda kv: kv[1].median_s)
    }
    if len(finalists) > 1:
        entry["refined"] = {
            "rounds": args.refine_rounds,
            "first_pass": {
                lb: round(t.median_s * 1e6, 2)
                for lb, t in sorted(first_pass.items(), key=lambda kv: kv[1].median_s)
            },
        }
    if skewed:
        entry["picked_for"] = "the best worst case over balanced and skewed routing"
        entry["skewed_candidates"] = {
            lb: round(t.median_s * 1e6, 2)
            for lb, t in sorted(skewed.items(), key=lambda kv: kv[1].median_s)
        }
    if rejected:
        entry["rejected"] = rejected
    return entry


def _sm_count(device) -> int:
    """SMs of ``device`` (the candidates' wave arithmetic); 132, the H200's, off a CUDA GPU."""
    import torch

    if torch.device(device).type != "cuda":
        return 132
    return torch.cuda.get_device_properties(device).multi_processor_count


def _timed_correctly(times: dict, rejected: dict, when: str = "") -> dict:
    """The timings of :func:`harness.time_interleaved` that ran and whose outputs checked out;
    the others go to ``rejected`` with the reason (prefixed by ``when``)."""
    out = {}
    for label, (timing, _) in times.items():
        if isinstance(timing, Exception):
            rejected[label] = f"{when}error: {type(timing).__name__}: {timing}"[:300]
        elif timing.outputs_ok is False:
            rejected[label] = f"{when}incorrect after timing: {timing.outputs_message}"[:300]
        else:
            out[label] = timing
    return out


def refine_finalists(measured: dict, within: float, most: int = 5) -> list[str]:
    """Candidates whose first-pass median is within ``within`` (a fraction) of the fastest, at most
    ``most`` of them, fastest first: the ones :func:`tune_problem` times again with more rounds. A
    first pass of 3 short rounds can misrank close candidates at compute-bound shapes, whose rounds
    move with the power-limited clock; the second pass settles the order among those within
    ``within``. (A candidate the first pass put further behind is not retried: at GLM 5.3 with 1024
    tokens one pass had the 128 x 128 split-accumulator tile 10% behind the 64 x 128 tile; the probe
    run's 7 rounds had it 11% ahead.)"""
    if within <= 0 or not measured:
        return []
    ranked = sorted(measured, key=lambda lb: measured[lb].median_s)
    fastest = measured[ranked[0]].median_s
    return [lb for lb in ranked if measured[lb].median_s <= fastest * (1 + within)][:most]


def _skewed_times(problem, impls, args, rejected, device) -> dict:
    """Time the candidates again under skewed routing at the token counts of ``--skew-tokens``.

    The host cannot see the routing without a device sync, so one table entry serves every
    routing of a shape: where it matters (decode, where a few experts can get most rows), the
    pick must be good for both. Candidates that fail the skewed check are rejected.
    """
    from . import harness

    tokens = problem.meta.get("tokens_per_gpu")
    wanted = {int(t) for t in _csv(getattr(args, "skew_tokens", "") or "")}
    if tokens not in wanted or problem.meta.get("routing") != "balanced":
        return {}
    meta = problem.meta
    skewed = make_problem(meta["model"], tokens, meta["ep"], "skewed", meta["projection"])
    checks = harness.check_many(impls, skewed, device)
    good = {}
    for label, (result, _) in checks.items():
        if isinstance(result, Exception) or not result.ok:
            rejected[label] = f"skewed routing: {getattr(result, 'message', result)}"[:300]
        else:
            good[label] = impls[label]
    times = harness.time_interleaved(
        good, skewed, rounds=args.rounds, reps=args.reps, launches=args.launches, device=device
    )
    return {
        lb: t
        for lb, (t, _) in times.items()
        if not isinstance(t, Exception) and t.outputs_ok is not False
    }


def _robust_best(measured: dict, skewed: dict) -> str:
    """The fastest candidate, or with skewed times the one whose worse relative time (to the
    fastest of each routing) is smallest."""
    if not skewed:
        return min(measured, key=lambda lb: measured[lb].median_s)
    fast_b = min(t.median_s for t in measured.values())
    fast_s = min(t.median_s for t in skewed.values())
    both = [lb for lb in measured if lb in skewed]
    return min(
        both,
        key=lambda lb: max(measured[lb].median_s / fast_b, skewed[lb].median_s / fast_s),
    )


def harness_sync(device) -> None:
    from .harness import sync

    sync(device)


def untuned(problems, table: dict, since: str | None = None) -> list:
    """``problems`` whose (n, k, experts, rows-per-expert bucket) ``table`` holds no entry for
    (``since``, an ISO 8601 date: no entry tuned at or after it)."""
    from datetime import datetime

    from ..kernels.autotune import rows_bucket

    start = None if since is None else datetime.fromisoformat(since)

    def fresh(entry: dict) -> bool:
        if start is None:
            return True
        when = entry.get("tuned_at")
        return bool(when) and datetime.fromisoformat(when) >= start

    held = {
        (e["n"], e["k"], e["experts"], e["bucket"]) for e in table.get("entries", []) if fresh(e)
    }
    return [
        p for p in problems if (p.n, p.k, p.experts, rows_bucket(p.rows, p.experts)) not in held
    ]


def merge_entries(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with every entry of the same (n, k, experts, bucket) as one in ``new`` replaced."""
    key = lambda e: (e["n"], e["k"], e["experts"], e["bucket"])  # noqa: E731
    fresh = {key(e) for e in new}
    merged = [e for e in old if key(e) not in fresh] + list(new)
    return sorted(merged, key=lambda e: (e["n"], e["k"], e["experts"], e["bucket"]))


def _write_table(path: Path, table: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {k: v for k, v in table.items() if k != "entries"}
    text = json.dumps(head, indent=1)[:-2]
    items = ",\n  ".join(json.dumps(e, separators=(",", ":")) for e in table["entries"])
    text += f',\n "entries": [\n  {items}\n ]\n}}\n'
    tmp = path.with_suffix(path.suffix + ".part")
    tmp.write_text(text)
    tmp.replace(path)


def new_table(gpu: str, arch: str, sms: int, env: dict) -> dict:
    from ..kernels.autotune import TABLE_SCHEMA

    return {
        "schema": TABLE_SCHEMA,
        "gpu": gpu,
        "arch": arch,
        "sm_count": sms,
        "env": env,
        "method": "candidates of pearl_moe.bench.candidates.candidates, each checked against a "
        "float32 reference, then timed together in interleaved rounds of CUDA-graph replays; "
        "the fastest by median wins",
        "entries": [],
    }


#: Shapes whose candidates are compiled together ahead of their timing (:class:`CompileAhead`).
COMPILE_CHUNK = 6


class CompileAhead:
    """Compile the candidates of the shapes to tune in chunks, in order, in a background thread
    (each chunk in worker processes, :func:`pearl_moe.kernels.compile_cache.precompile`), so the
    GPU times one chunk's shapes while the CPU compiles the next ones. ``wait(i)`` blocks until
    chunk ``i`` is in the disk cache; ``stop()`` starts no further chunk (a deadline came)."""

    def __init__(self, chunks: list[list[tuple]], jobs: int | None = None, precompile=None):
        import threading

        from ..kernels import compile_cache

        self._precompile = precompile or compile_cache.precompile
        self._chunks = chunks
        self._done = [threading.Event() for _ in chunks]
        self._results: list = [None] * len(chunks)
        self._seconds = [0.0] * len(chunks)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(jobs,), daemon=True)
        self._thread.start()

    def _run(self, jobs) -> None:
        for i, requests in enumerate(self._chunks):
            if self._stopped.is_set():
                break
            t0 = time.monotonic()
            try:
                self._results[i] = self._precompile(requests, jobs=jobs)
            except Exception as exc:  # reported per chunk; the tuner's checks then fail clearly
                self._results[i] = exc
            self._seconds[i] = time.monotonic() - t0
            self._done[i].set()
        for event in self._done:  # release any waiter on a chunk that will not come
            event.set()

    def wait(self, i: int):
        self._done[i].wait()
        return self._results[i]

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def summary(self) -> dict:
        done = [r for r in self._results if isinstance(r, list)]
        flat = [x for r in done for x in r]
        return {
            "chunks": len(self._chunks), "chunks_compiled": len(done),
            "requests": len(flat), "cached": sum(1 for x in flat if x.get("cached")),
            "compiled": sum(1 for x in flat if x["ok"] and not x.get("cached")),
            "failed": sum(1 for x in flat if not x["ok"]),
            "errors": [str(r)[:300] for r in self._results if isinstance(r, Exception)],
            "seconds": round(sum(self._seconds), 1),
            "how": f"in chunks of {COMPILE_CHUNK} shapes, ahead of their timing",
        }  # fmt: skip


def other_gpus_table(out: Path, gpu: str, sms: int | None = None) -> str | None:
    """The GPU whose tuning table ``out`` holds, where that is not ``gpu`` (else None): merging a
    run into it would drop its entries (tables are per GPU), so ``tune`` refuses. Given ``sms``,
    a table of the same name from a GPU with another SM count counts as another GPU's too (an
    H100 PCIe card, 114 SMs, goes by "H100" like the SXM's 132): ``"H100 (132 SMs)"``."""
    from ..kernels.autotune import TABLE_SCHEMA

    if not out.is_file():
        return None
    try:
        old = json.loads(out.read_text())
    except (OSError, ValueError):
        return None
    if old.get("schema") != TABLE_SCHEMA or old.get("gpu") is None:
        return None
    if old["gpu"] != gpu:
        return old["gpu"]
    if sms is not None and old.get("sm_count") not in (None, sms):
        return f"{gpu} ({old['sm_count']} SMs)"
    return None


def run_tuning(
    problems, arch, gpu, sms, args, out: Path, env: dict, deadline=None, tqdm=None, device="cuda",
    ready=None,
):  # fmt: skip
    """Tune every problem, rewriting the table at ``out`` after each; returns the table.
    ``ready(i)``, when given, is called before problem ``i`` is tuned (its kernels compiled)."""
    import torch

    from ..kernels.autotune import TABLE_SCHEMA

    table = new_table(gpu, arch, sms, env)
    if out.is_file() and not getattr(args, "no_merge", False):
        old = json.loads(out.read_text())
        if old.get("schema") == TABLE_SCHEMA and old.get("gpu") == gpu:
            # entries of shapes this run does not tune stay, saying when they were tuned
            when = (old.get("env") or {}).get("date")
            table["entries"] = [{"tuned_at": when, **e} for e in old["entries"]]
            # the earlier runs' headers stay: what each entry was measured with
            table["earlier_runs"] = [
                *old.get("earlier_runs", []),
                {"env": old.get("env"), "method": old.get("method")},
            ]
    bar = tqdm(total=len(problems), desc="tune", unit="shape") if tqdm else None
    skipped, failed = [], []
    for i, problem in enumerate(problems):
        if deadline is not None and time.monotonic() > deadline:
            skipped.append(problem.name)
            if bar:
                bar.update(1)
            continue
        if bar:
            bar.set_postfix_str(problem.name[:40])
        if ready is not None:
            ready(i)
        try:
            entry = tune_problem(problem, arch, args, device)
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            print(f"\ntune {problem.name}: {why}"[:800], flush=True)
            failed.append({"shape": problem.name, "error": why[:300]})
            harness_sync(device)
        else:
            entry["tuned_at"] = env.get("date")
            entry["tuned_with"] = {
                "limit": args.limit, "rounds": args.rounds,
                "refine_within": getattr(args, "refine_within", 0.0),
                "skew_tokens": getattr(args, "skew_tokens", ""),
                **({"group_twins": args.group_twins} if getattr(args, "group_twins", 0) else {}),
            }  # fmt: skip
            table["entries"] = merge_entries(table["entries"], [entry])
            _write_table(out, table)
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
        if bar:
            bar.update(1)
    if bar:
        bar.close()
    table["env"]["skipped_shapes"] = skipped  # not reached before the deadline
    table["env"]["failed_shapes"] = failed  # raised (out of memory, say): no entry written
    _write_table(out, table)
    return table


def format_table(table: dict) -> str:
    lines = [
        f"{'shape (n x k x E @ bucket)':<28}{'measured at':<34}{'winner':<40}{'us':>9}{'vs heur.':>9}"
    ]
    for e in table["entries"]:
        key = f"{e['n']}x{e['k']}x{e['experts']} @{e['bucket']}"
        if "vs_heuristic" in e:
            vs = f"{e['vs_heuristic']:.3f}"
        else:  # "=": the heuristic's pick won; "-": not compared (older tables say nothing)
            vs = "=" if e.get("heuristic") == f"s{e['stage']} {e['label']}" else "-"
        lines.append(
            f"{key:<28}{e.get('measured_at', ''):<34}{'s' + str(e['stage']) + ' ' + e.get('label', ''):<40}"
            f"{e.get('median_us', float('nan')):>9.1f}{vs:>9}"
        )
    return "\n".join(lines)


def _progress():
    try:
        from tqdm.auto import tqdm
    except ImportError:  # the GPU machine's image may lack tqdm
        from .cli import PlainProgress as tqdm
    return tqdm


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cache_dir:
        os.environ["PEARL_MOE_KERNEL_CACHE"] = str(Path(args.cache_dir).resolve())
    tqdm = _progress()
    try:
        problems = build_problems(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.precompile_only:
        arch = args.arch or "sm_90a"
        sms = args.sms or {"sm_90a": 132, "sm_100a": 148}[arch]
        requests = compile_requests(
            problems, arch, sms, args.limit, args.with_ablation, group_twins=args.group_twins
        )
        info = precompile_with_progress(requests, args.jobs, tqdm)
        print(json.dumps(info, indent=1))
        return 1 if info["failed"] else 0
    import torch

    if not torch.cuda.is_available():
        print(
            "error: no CUDA GPU is visible: `tune` measures kernels on the GPU whose table it "
            "writes. Without a GPU, `--precompile-only --arch sm_90a --sms 132` compiles the "
            "candidates into the disk cache.",
            file=sys.stderr,
        )
        return 2
    from ..kernels.api import arch_of
    from ..kernels.autotune import TABLE_DIR, gpu_name
    from ..results import environment

    arch = arch_of(torch.device("cuda"))
    gpu = gpu_name("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = Path(args.out) if args.out else TABLE_DIR / f"{gpu}.json"
    held = held_out_problems(problems)
    if held and out.resolve().parent == TABLE_DIR.resolve():
        print(
            f"error: {held[0]} is a held-out layer (pearl_moe.bench.shape_sets): the package's own "
            "tables are never tuned on it. Write your table elsewhere with --out and point "
            "PEARL_MOE_TUNING at it.",
            file=sys.stderr,
        )
        return 2
    other = other_gpus_table(out, gpu, sms)
    if other and not args.no_merge:
        print(
            f"error: {out} holds the {other}'s table and this GPU is the {gpu} ({sms} SMs): a run "
            f"here would drop its entries. Write this GPU's table to another file (--out; by default "
            f"pearl_moe/tuning/{gpu}.json), or pass --no-merge to replace it.",
            file=sys.stderr,
        )
        return 2
    since = args.skip_tuned_since
    if (args.skip_tuned or since) and out.is_file():
        problems, held = untuned(problems, json.loads(out.read_text()), since), len(problems)
        what = f"tuned since {since}" if since else "in " + str(out)
        print(f"{held - len(problems)} of {held} shapes are {what} already; tuning the rest")
    t_start = time.monotonic()
    env = environment(" ".join(["python -m pearl_moe tune", *(argv or sys.argv[1:])]))
    chunks = [problems[i : i + COMPILE_CHUNK] for i in range(0, len(problems), COMPILE_CHUNK)]
    ahead = CompileAhead(
        [
            compile_requests(
                c, arch, sms, args.limit, device=torch.device("cuda"), group_twins=args.group_twins
            )
            for c in chunks
        ],
        args.jobs,
    )
    deadline = t_start + args.deadline_s if args.deadline_s is not None else None
    try:
        table = run_tuning(
            problems, arch, gpu, sms, args, out, env, deadline, tqdm,
            ready=lambda i: ahead.wait(i // COMPILE_CHUNK),
        )  # fmt: skip
    finally:
        ahead.stop()
    table["env"]["precompile"] = ahead.summary()
    table["env"]["elapsed_s"] = round(time.monotonic() - t_start, 1)
    _write_table(out, table)
    print(format_table(table))
    print(f"\nwrote {out}")
    failed = [f["shape"] for f in table["env"]["failed_shapes"]]
    for what, names in (("failed", failed), ("skipped (deadline)", table["env"]["skipped_shapes"])):
        if names:
            print(f"{what}, no entry written: {', '.join(names)}")
    return 0
