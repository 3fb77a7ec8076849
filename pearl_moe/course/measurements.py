"""Say where a number comes from: the recorded runs of our kernels, read for the notebooks.

:func:`load_kernel_results` reads the H200 runs of our kernels written by the benchmark harness
(``results/H200/stages.json`` and ``results/H200/stage_sweep.json``, ``python -m pearl_moe bench``);
:func:`kernel_rows`, :func:`stage_series`, :func:`floor_series`, :func:`correctness_summary`,
:func:`check_table` and :func:`stage_sweep` read their records through :mod:`pearl_moe.results`,
the one reader of ``results/``;
:func:`describe_run` says what a run was measured on and :func:`measurement_source` turns it into
a label: "live on ...", "replayed from ... (measured <date> on <GPU>)" or "no recorded
measurement yet". :func:`baseline` replays one baseline time.

The stage notebooks 04-07b read one step of the ablation (stage N against stage N - 1, timed in
interleaved rounds on the same problems): :func:`ablation_step` and :func:`format_ablation_step`;
:func:`step_latency_bars` puts that step's measurement (labeled with the GPU the data names,
:func:`gpu_label`) beside the B200 model, and
:func:`gpu_check_lines` finds a stage's sanitizer lines in ``results/H200/gpu_checks.txt`` and
:func:`gpu_check_summary` says in a sentence what those runs checked and found.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from operator import itemgetter
from pathlib import Path

from .. import results
from ..config import LEGACY_FIELD_NAMES
from ._paths import rel
from .machine import Machine

__all__ = [
    "STAGE_IMPLS",
    "results_path",
    "load_kernel_results",
    "measured_date",
    "current_names",
    "describe_run",
    "gpu_label",
    "measurement_source",
    "kernel_rows",
    "stage_series",
    "floor_series",
    "correctness_summary",
    "check_table",
    "stage_sweep",
    "baseline",
    "ablation_step",
    "format_ablation_step",
    "step_latency_bars",
    "gpu_check_lines",
    "gpu_check_summary",
    "step_verdict",
    "DECODE_MAX_TOKENS",
]

#: Stage number -> the bench implementation name of that stage (``python -m pearl_moe bench``).
STAGE_IMPLS = {s: f"pearl-s{s}" for s in range(1, 8)}
#: Batches up to this many tokens per GPU count as decode in the step summaries (4096 is prefill).
DECODE_MAX_TOKENS = 256


def results_path(name: str = "stages.json", gpu: str = "H200", root: Path | None = None):
    """``results/<gpu>/<name>`` (:data:`pearl_moe.results.RESULTS_DIR`; it may not exist yet)."""
    return (root or results.RESULTS_DIR) / gpu / name


def load_kernel_results(
    path: str | Path | None = None,
    gpu: str = "H200",
    kind: str = "stages",
    root: Path | None = None,
) -> dict | None:
    """The recorded H200 run of our kernels, or None when there is none yet.

    The file is a benchmark-harness run (``python -m pearl_moe bench --kind <kind>``, schema in
    :mod:`pearl_moe.results`): ``results/<gpu>/stages.json`` (stages 1-3 and the torch
    baselines over the models and batch sizes) or ``results/<gpu>/stage_sweep.json`` (stage 3 at
    several pipeline depths and tile shapes). It is read with :func:`pearl_moe.results.read_run`,
    which raises on a file that breaks the schema; only a missing file gives None. A run stored
    gzipped (``<kind>.json.gz``) is read the same way (:func:`pearl_moe.results.run_path`). The path is added
    under ``_path`` so labels can name it.
    """
    path = Path(path) if path is not None else results.run_path(gpu, kind, root)
    if not path.exists():
        return None
    run = results.read_run(path)
    run["_path"] = str(path)
    return run


def measured_date(run: Mapping | None) -> str | None:
    """The day a recorded run was measured (``YYYY-MM-DD``), if it says."""
    if not run:
        return None
    date = (run.get("env") or {}).get("date")
    return str(date)[:10] if date else None


def _clock_label(source: str | None) -> str:
    """A few words for how a run's clocks were read (``env.clocks.source``): nvidia-smi before any
    GPU work reads the idle clock, not the one the kernels ran at; under a matmul loop, the busy one."""
    text = (source or "").lower()
    if "busy" in text or "while" in text:
        return "busy clock (nvidia-smi under load):"
    if "start" in text or "idle" in text:
        return "idle clock at start:"
    return f"clocks ({source}):" if source else "clocks (unrecorded source):"


def describe_run(run: Mapping | None) -> str:
    """What a recorded run was measured on, from its ``env`` and ``ceilings``: GPU, date, clocks
    (as nvidia-smi read them at the start of the run), driver, CUDA, library versions, ceilings."""
    if not run:
        return "no recorded measurement yet"
    env = run.get("env") or {}
    parts = [f"{env.get('gpu', 'an unnamed GPU')}, measured {measured_date(run) or '?'}"]
    clocks = env.get("clocks") or {}
    if "sm_clock_mhz" in clocks:
        sm = f"SM {clocks['sm_clock_mhz']} MHz"
        if clocks.get("sm_clock_max_mhz"):
            sm += f" (max {clocks['sm_clock_max_mhz']})"
        mem = ""
        if clocks.get("mem_clock_mhz"):
            mem = f", memory {clocks['mem_clock_mhz']} MHz"
            if clocks.get("mem_clock_max_mhz"):
                mem += f" (max {clocks['mem_clock_max_mhz']})"
        parts.append(f"{_clock_label(clocks.get('source'))} {sm}{mem}")
    versions = [
        f"{label} {env[key]}"
        for key, label in (
            ("driver", "driver"),
            ("cuda", "CUDA"),
            ("torch", "torch"),
            ("cutlass_dsl", "CUTLASS DSL"),
        )
        if env.get(key)
    ]
    if versions:
        parts.append(", ".join(versions))
    ceilings = run.get("ceilings") or {}
    if ceilings.get("read_bytes_per_s") and ceilings.get("bf16_flops_per_s"):
        parts.append(
            f"measured ceilings: read {ceilings['read_bytes_per_s'] / 1e12:.2f} TB/s, "
            f"bf16 {ceilings['bf16_flops_per_s'] / 1e12:.0f} TFLOP/s"
        )
    return "; ".join(parts)


def gpu_label(source) -> str:
    """The short name of the GPU a number was measured on, from the data itself: a recorded run
    (``run["env"]["gpu"]``), a step of :func:`ablation_step` (its ``gpu``), a live
    :class:`~pearl_moe.course.machine.Machine` (``gpu_name``) or a device name. "NVIDIA H100 80GB
    HBM3" gives "H100" (the hardware catalogue's name), a GPU the catalogue lacks its name without
    "NVIDIA", and a source that records no GPU "an unnamed GPU"."""
    from ..hardware import get_gpu

    if isinstance(source, Machine):
        name = source.gpu_name
    elif isinstance(source, Mapping):
        name = source.get("gpu") if "gpu" in source else (source.get("env") or {}).get("gpu")
    else:
        name = source
    if not name:
        return "an unnamed GPU"
    try:
        return get_gpu(str(name)).name
    except ValueError:
        return " ".join(str(name).replace("NVIDIA", "").split())


def measurement_source(
    data: Mapping | None = None, machine: Machine | None = None, expected: str | Path | None = None
) -> str:
    """Where the latencies shown next come from, in words.

    ``"live on <GPU>"`` when ``machine`` is live, ``"replayed from <file> (measured <date> on
    <GPU>)"`` when a recorded run ``data`` is given, ``"no recorded measurement yet (<file> is
    missing)"`` otherwise.
    """
    if machine is not None and machine.live:
        return f"live on {machine.gpu_name}"
    if data:
        gpu = (data.get("env") or {}).get("gpu", "an unnamed GPU")
        when = measured_date(data) or "on an unrecorded date"
        return f"replayed from {rel(data.get('_path', '?'))} (measured {when} on {gpu})"
    expected = expected or results_path()
    return f"no recorded measurement yet ({rel(expected)} is missing)"


_LEGACY_NAME = re.compile(r"(?<![\w])(" + "|".join(map(re.escape, LEGACY_FIELD_NAMES)) + r")=")


def current_names(text: str) -> str:
    """``text`` (an impl name such as ``pearl-s3:tile_m=64+stages=7``, or a sentence holding one)
    with the field names of older measurements replaced by the current ones
    (:data:`pearl_moe.config.LEGACY_FIELD_NAMES`: ``stages=7`` is ring depth 7, ``ring_depth=7``)."""
    return _LEGACY_NAME.sub(lambda m: LEGACY_FIELD_NAMES[m.group(1)] + "=", str(text))


def _impl_name(stage_or_impl) -> str:
    return STAGE_IMPLS.get(stage_or_impl, str(stage_or_impl))


def kernel_rows(
    data: Mapping | None, model: str | None = None, impl=None, routing: str | None = None
) -> list[dict]:
    """Rows of a recorded run (:func:`pearl_moe.results.run_rows`, every status), optionally of one
    model, implementation (a stage number or a bench name) and routing."""
    if not data:
        return []
    if impl is not None:
        impl = [_impl_name(i) for i in ([impl] if isinstance(impl, int | str) else impl)]
    return results.run_rows(dict(data), model=model, impl=impl, routing=routing, ok_only=False)


def stage_series(
    data: Mapping | None, model: str, impl, routing: str = "balanced"
) -> list[tuple[int, float]]:
    """``(tokens per GPU, seconds)`` of one implementation (stage number or bench name, e.g. 2 or
    ``"grouped_mm"``) on ``model``: the median times of the records that passed their check."""
    return sorted(
        (r["tokens_per_gpu"], r["median_us"] * 1e-6)
        for r in kernel_rows(data, model, impl, routing)
        if r["status"] == "ok"
    )


def floor_series(
    data: Mapping | None, model: str, routing: str = "balanced"
) -> list[tuple[int, float]]:
    """``(tokens per GPU, seconds)`` of the floor of each recorded problem of ``model``."""
    return sorted(
        {
            (r["tokens_per_gpu"], r["floor_us"] * 1e-6)
            for r in kernel_rows(data, model, routing=routing)
            if r.get("floor_us")
        }
    )


def _verdict(row: dict | None) -> str:
    if row is None:
        return "not recorded"
    if row["status"] == "ok":
        return "pass"
    if row["status"] == "incorrect":
        return f"FAIL ({row.get('check_message') or 'wrong values'})"
    return f"not checked ({row['status']}: {row.get('error') or 'no detail'})"


def correctness_summary(
    data: Mapping | None, stages: Sequence = (1, 2, 3), model: str | None = None
) -> list[str]:
    """One line per recorded problem: the outcome of the check run before timing (fresh random
    inputs, NaN-poisoned output, compared with a float32 reference) for each of ``stages`` (stage
    numbers or bench implementation names), from the records' ``correctness`` and ``status``."""
    impls = [_impl_name(s) for s in stages]
    by_problem: dict[tuple, dict[str, dict]] = {}
    for r in kernel_rows(data, model, impls):
        key = (r["model"], r["tokens_per_gpu"], r["routing"], r["rows"])
        by_problem.setdefault(key, {})[r["impl"]] = r
    lines = []
    for (mdl, tokens, routing, rows), got in by_problem.items():
        marks = []
        for impl in impls:
            row = got.get(impl)
            mark = f"{impl}: {_verdict(row)}"
            if row is not None and row["status"] == "ok":
                mark += f" (max |err| {row['max_abs_err']:.2g})"
            marks.append(mark)
        lines.append(
            f"{mdl:>16}, {tokens:>4} tokens/GPU {routing:<8} ({rows} rows): " + ", ".join(marks)
        )
    return lines


def _live_verdict(result) -> str:
    if result is None:
        return "not checked"
    if result.ok:
        return f"pass (max |err| {result.max_abs_err:.2g} <= tol {result.tolerance:.2g})"
    return f"FAIL ({result.message})"


def check_table(
    data: Mapping | None,
    stages: Sequence = (1,),
    live: Sequence[tuple] = (),
    machine: Machine | None = None,
) -> str:
    """What was checked, problem by problem: one line per problem, one column per stage.

    The replayed lines are every problem of the recorded run ``data`` (every model, batch size and
    routing the harness checked before timing), each marked ``replayed``; ``live`` holds
    ``(problem, {stage: CheckResult})`` pairs checked in this process, marked ``live``. The
    first line names the sources and counts the checks that passed. Stages are stage numbers or
    bench implementation names.
    """
    impls = [_impl_name(s) for s in stages]
    widths = [max(len(i), 34) for i in impls]
    head = f"{'source':<9}{'model':<17}{'tokens/GPU':>10}  {'routing':<9}{'rows':>6}  "
    lines = [head + "  ".join(f"{i:<{w}}" for i, w in zip(impls, widths, strict=True))]
    live_ok = live_n = 0
    gpu = machine.gpu_name if machine is not None and machine.gpu_name else "this GPU"
    for problem, by_stage in live:
        marks = []
        for stage, w in zip(stages, widths, strict=True):
            result = by_stage.get(stage)
            live_n += result is not None
            live_ok += bool(result is not None and result.ok)
            marks.append(f"{_live_verdict(result):<{w}}")
        meta = problem.meta
        lines.append(
            f"{'live':<9}{meta.get('model', problem.name):<17}{meta.get('tokens_per_gpu', '?'):>10}"
            f"  {meta.get('routing', '?'):<9}{problem.rows:>6}  " + "  ".join(marks)
        )
    by_problem: dict[tuple, dict[str, dict]] = {}
    for r in kernel_rows(data, impl=impls):
        key = (r["model"], r["tokens_per_gpu"], r["routing"], r["rows"])
        by_problem.setdefault(key, {})[r["impl"]] = r
    rec_ok = rec_n = 0
    for (mdl, tokens, routing, rows), got in by_problem.items():
        marks = []
        for impl, w in zip(impls, widths, strict=True):
            row = got.get(impl)
            rec_n += row is not None
            rec_ok += bool(row is not None and row["status"] == "ok")
            mark = _verdict(row)
            if row is not None and row["status"] == "ok" and row.get("max_abs_err") is not None:
                mark += f" (max |err| {row['max_abs_err']:.2g})"
            marks.append(f"{mark:<{w}}")
        lines.append(
            f"{'replayed':<9}{mdl:<17}{tokens:>10}  {routing:<9}{rows:>6}  " + "  ".join(marks)
        )
    summary = []
    if live:
        summary.append(f"live on {gpu}: {live_ok} of {live_n} checks passed")
    summary.append(
        f"{measurement_source(data)}: {rec_ok} of {rec_n} recorded checks passed, "
        f"{len(by_problem)} problems"
        if data
        else measurement_source(None)
    )
    return "\n".join(["; ".join(summary), *[ln.rstrip() for ln in lines]])


def stage_sweep(data: Mapping | None, tile_m: int | None = None) -> list[dict]:
    """Recorded stage-3 latencies at several pipeline depths (``stage_sweep.json``).

    One dict per record that passed its check, largest ``tile_m`` first, then by ring depth:
    ``ring_depth``, ``tile_m``, ``tile_n``, ``tile_k`` (from the record's ``config.gemm_config``), ``seconds``,
    ``floor_seconds``, ``pct_of_floor``, ``impl``, ``model``, ``tokens``.
    """
    out = []
    for r in kernel_rows(data):
        cfg = (r.get("config") or {}).get("gemm_config")
        if r["status"] != "ok" or not cfg:
            continue
        cfg = {LEGACY_FIELD_NAMES.get(key, key): value for key, value in cfg.items()}
        if tile_m is not None and cfg.get("tile_m") != tile_m:
            continue
        out.append(
            {
                "ring_depth": cfg["ring_depth"],
                "tile_m": cfg["tile_m"],
                "tile_n": cfg["tile_n"],
                "tile_k": cfg["tile_k"],
                "seconds": r["median_us"] * 1e-6,
                "floor_seconds": r["floor_us"] * 1e-6 if r.get("floor_us") else None,
                "pct_of_floor": r["pct_of_floor"],
                "impl": r["impl"],
                "model": r["model"],
                "tokens": r["tokens_per_gpu"],
            }
        )
    return sorted(out, key=lambda d: (-d["tile_m"], d["ring_depth"]))


def baseline(
    impl: str,
    model: str,
    tokens: int,
    routing: str = "balanced",
    gpu: str = "H200",
    kind: str = "baselines",
    root: Path | None = None,
) -> dict | None:
    """One recorded baseline time (``results/<gpu>/<kind>.json``, the bench schema), or None.

    Returns ``{"seconds", "floor_seconds", "pct_of_floor", "source"}``; ``source`` says which file
    and date it was replayed from.
    """
    path = results_path(f"{kind}.json", gpu, root)
    if not path.exists():
        return None
    for r in results.run_rows(path, model=model, impl=impl, routing=routing, tokens=tokens):
        return {
            "seconds": r["median_us"] * 1e-6,
            "floor_seconds": r["floor_us"] * 1e-6,
            "pct_of_floor": r["pct_of_floor"],
            "source": f"replayed from {rel(path)} (measured {str(r['date'])[:10]} on {r['gpu']})",
        }
    return None


# ---------------------------------------------------------------------------- ablation steps
def _step_row(problem: Mapping, prev: Mapping, this: Mapping) -> dict:
    """One problem of a step: the two cells of :func:`pearl_moe.bench.compare.ablation_summary`."""
    row = {
        "model": problem.get("model"),
        "tokens": problem.get("tokens"),
        "routing": problem.get("routing"),
        "floor_us": problem.get("floor_us"),
        "status": (prev["status"], this["status"]),
    }
    for side, cell in (("prev", prev), ("this", this)):
        row[f"{side}_us"] = cell.get("median_us")
        row[f"{side}_spread_pct"] = cell.get("spread_pct")
        row[f"{side}_pct_floor"] = cell.get("pct_floor")
        row[f"{side}_config"] = cell.get("config")
    if "ratio" in this and this.get("vs") == prev["impl"]:
        row.update(ratio=this["ratio"], lo=this["lo"], hi=this["hi"], rounds=this["rounds"])
        row["verdict"] = step_verdict(row)
    return row


#: Steps smaller than this are reported as ties even when every round agrees on their sign.
TIE = 0.01


def step_verdict(row: Mapping) -> str:
    """``"faster"`` / ``"slower"`` when every round's ratio is below / above 1 (the step is
    resolved) and the median ratio is at least 1% away from 1; ``"within 1%"`` for a resolved
    but smaller step; else ``"within noise"``; ``"not compared"`` without a paired ratio."""
    if "ratio" not in row:
        return "not compared"
    if row["rounds"] < 2:
        return "one round: unresolved"
    if (row["hi"] < 1 or row["lo"] > 1) and abs(row["ratio"] - 1) < TIE:
        return "within 1%"
    if row["hi"] < 1:
        return "faster"
    if row["lo"] > 1:
        return "slower"
    return "within noise"


def ablation_step(
    data: Mapping | None,
    stage: int,
    routing: str | None = "balanced",
    decode_max_tokens: int = DECODE_MAX_TOKENS,
) -> dict | None:
    """Stage ``stage`` against stage ``stage - 1`` in a recorded ablation run, problem by problem.

    ``data`` is the run (``load_kernel_results(kind="ablation")``, ``results/H200/ablation.json``):
    every stage timed on the same problems in interleaved rounds. Returns None without a run, else
    ``{"stage", "from", "to", "rows", "geomean", "source", "timing"}``:

    * ``rows``: one dict per problem (``model``, ``tokens``, ``routing``, ``floor_us``; for each
      side ``prev_*`` / ``this_*``: ``us`` (median), ``spread_pct`` (range of the round medians,
      % of the median), ``pct_floor``, ``config``; and, where both passed their check and were
      timed, the paired ratio this / prev: ``ratio`` (trimmed geomean of the per-round ratios),
      ``lo`` / ``hi`` (their range) and ``rounds``: :func:`pearl_moe.bench.compare.paired_ratio`);
    * ``geomean``: the geomean ratio over ``all`` shapes, ``decode`` (<= ``decode_max_tokens``
      tokens per GPU) and ``prefill`` shapes (:func:`pearl_moe.bench.compare.step_geomeans`, the
      one the bench's step summary uses), each ``{"shapes", "geomean", ...}`` with the shapes
      ``faster`` and ``slower`` in every round (:func:`step_verdict`);
    * ``source``: where it comes from (:func:`measurement_source`), ``gpu``: the GPU it was
      measured on, as the run records it (:func:`gpu_label`), ``timing``: how it was timed.
    """
    from ..bench.compare import ablation_summary, step_geomeans

    if not data:
        return None
    prev, this = _impl_name(stage - 1), _impl_name(stage)
    summary = ablation_summary(dict(data), chain=[prev, this])
    rows = [
        _step_row(r, *r["cells"])
        for r in summary["rows"]
        if routing is None or r["routing"] == routing
    ]
    return {
        "stage": stage,
        "from": prev,
        "to": this,
        "rows": rows,
        "geomean": step_geomeans(rows, decode_max_tokens, verdict=itemgetter("verdict")),
        "decode_max_tokens": decode_max_tokens,
        "source": measurement_source(data),
        "gpu": gpu_label(data),
        "timing": ((data.get("method") or {}).get("timing") or "not recorded"),
    }


def format_ablation_step(step: Mapping | None) -> str:
    """The step as a table: medians [round spread], the paired ratio and its round range, then the
    geomeans (all shapes, decode, prefill) and the source. "no recorded measurement yet" without a
    step."""
    if not step:
        return measurement_source(None, expected=results_path("ablation.json"))
    a, b = step["stage"] - 1, step["stage"]
    configs = sorted({(r["prev_config"], r["this_config"]) for r in step["rows"]}, key=str)
    lines = [
        f"stage {b} against stage {a}: ratio = stage {b} / stage {a}, paired round by round "
        f"(< 1: stage {b} is faster); [x%] = range of the round medians",
        *[f"  stage {a}: {ca}  ->  stage {b}: {cb}" for ca, cb in configs],
        f"{'model':<16}{'tokens':>7}{'stage ' + str(a) + ' us':>20}{'stage ' + str(b) + ' us':>20}"
        f"{'ratio':>8}  rounds lo-hi  verdict",
    ]
    for r in step["rows"]:
        cells = []
        for side in ("prev", "this"):
            us = r[f"{side}_us"]
            if us is None:
                status = r["status"][0 if side == "prev" else 1]
                cells.append(f"{status:>20}")
            else:
                spread = r[f"{side}_spread_pct"]
                text = f"{us:.1f}" + (f" [{spread:.1f}%]" if spread is not None else "")
                cells.append(f"{text:>20}")
        ratio = (
            f"{r['ratio']:>8.3f}  {r['lo']:.3f}-{r['hi']:.3f} ({r['rounds']})  {r['verdict']}"
            if "ratio" in r
            else f"{'-':>8}"
        )
        lines.append(f"{r['model']:<16}{r['tokens']:>7}" + "".join(cells) + ratio)
    lines.append("geomean ratio (shapes faster / slower in every round):")
    for key, what in (
        ("all", "all shapes"),
        ("decode", f"decode (<= {step['decode_max_tokens']} tokens)"),
        ("prefill", f"prefill (> {step['decode_max_tokens']} tokens)"),
    ):
        g = step["geomean"][key]
        if g["shapes"]:
            lines.append(
                f"  {what + ':':<30}{g['geomean']:.3f} over {g['shapes']} shapes "
                f"({g['faster']} faster, {g['slower']} slower)"
            )
    lines.append(f"source: {step['source']}")
    return "\n".join(lines)


def step_latency_bars(
    step: Mapping | None,
    problems: Sequence[tuple[str, int]] = (("GLM 5.3", 64),),
    gpu_model: str = "B200",
    live: Mapping | None = None,
    live_source: str | None = None,
    live_gpu: str | None = None,
) -> list[tuple]:
    """Bars for :func:`~pearl_moe.course.plots.plot_latency_bars`: per problem, stage N - 1 and N
    as the recorded run measured them (replayed from ``step``), as this GPU measured them live
    (``live[(model, tokens)]``, a row of :func:`~pearl_moe.course.live.time_step_live`), and as
    the model predicts them on ``gpu_model`` (each stage's ladder configuration,
    :func:`pearl_moe.model.perfmodel.predict`), each with its own floor.

    Every label starts with the GPU of its number, taken from the data: the run's recorded GPU
    (``step["gpu"]``), the live GPU (``live_gpu``, else read from ``live_source``, "live on
    <GPU>"), the model's GPU. A live row gets bars of its own, after the replayed ones, and never
    takes their place, so a live H100 is labeled H100 and sits in its own panel.
    A missing measurement is a bar without a value that says why.
    """
    from ..hardware import get_gpu
    from ..kernels.ladder import stage_config
    from ..model.perfmodel import predict
    from ..workloads import make_problem

    gpu = get_gpu(gpu_model)
    stage = step["stage"] if step else None
    if stage is None:
        raise ValueError("step_latency_bars needs a step (ablation_step) to know the stage")
    recorded_gpu = step.get("gpu") or gpu_label(_gpu_in_source(step.get("source")))
    if live and not live_gpu:
        live_gpu = gpu_label(_gpu_in_source(live_source))
    by_problem = {(r["model"], r["tokens"]): r for r in step["rows"]}
    bars = []
    for model, tokens in problems:
        short = f"{model} {tokens} tok"
        measured = [(recorded_gpu, by_problem.get((model, tokens)), step["source"], "")]
        if live and (model, tokens) in live:
            where = live_source or f"live on {live_gpu}"
            measured.append((live_gpu, live[(model, tokens)], where, " (live)"))
        for label_gpu, row, source, suffix in measured:
            for side, s in (("prev", stage - 1), ("this", stage)):
                us = row.get(f"{side}_us") if row else None
                floor = row.get("floor_us") if row else None
                bars.append(
                    (
                        f"{label_gpu} stage {s}: {short}{suffix}",
                        us * 1e-6 if us else None,
                        source if us else f"not measured ({source})",
                        floor * 1e-6 if floor else None,
                    )
                )
        problem = make_problem(model, tokens)
        for s in (stage - 1, stage):
            p = predict(problem, stage_config(gpu.arch, s), gpu, stage=s)
            bars.append(
                (f"{gpu.name} stage {s} (model): {short}", p.seconds, "modeled", p.floor_seconds)
            )
    return bars


def _gpu_in_source(source: str | None) -> str | None:
    """The GPU a source label names: "live on <GPU>" or "... (measured <date> on <GPU>)"."""
    if not source:
        return None
    match = re.search(r"live on ([^(]+)", source) or re.search(r" on ([^()]+)\)\s*$", source)
    return match.group(1).strip() if match else None


def gpu_check_lines(stage: int, gpu: str = "H200", root: Path | None = None) -> list[str]:
    """The lines of ``results/<gpu>/gpu_checks.txt`` that report kernel stage ``stage`` (the
    sanitizer runs write ``stage N: ...``), with the heading of the section each comes from."""
    path = results_path("gpu_checks.txt", gpu, root)
    if not path.exists():
        return []
    out, heading = [], None
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            heading = line.lstrip("# ").strip()
        elif line.startswith(f"stage {stage}:"):
            out.append(f"{heading}: {line}" if heading else line)
    return out


_STAGE_RECORD = re.compile(r"^stage (\d+)(?::(\S+))?: (.*)$")
_GUARD = re.compile(r"guard band intact=(True|False)")
_ERRORS = re.compile(r"(?:ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: .*\((\d+) error)")


def _sanitizer_runs(path: Path) -> list[dict]:
    """The runs of a ``gpu_checks.txt`` that wrote ``stage N: ...`` records, in file order: the
    sanitizer tool, its error count (``None`` if not recorded), and per course stage (records of
    a stage with overrides, ``stage 7:tile_m=128: ...``, are left out) the reference check's
    record and the guard-band results of the unchecked calls."""
    runs, run, in_heading = [], None, False
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            if not in_heading:  # a comment block starts a new section
                run = {"heading": "", "errors": None, "checks": {}, "guards": {}}
                runs.append(run)
            run["heading"] += line + "\n"
            in_heading = True
            continue
        in_heading = False
        if run is None:
            continue
        found = _ERRORS.search(line)
        if found and run["errors"] is None:
            run["errors"] = int(found.group(1) or found.group(2))
        record = _STAGE_RECORD.match(line)
        if not record or record.group(2):
            continue
        stage, text = int(record.group(1)), record.group(3)
        guard = _GUARD.search(text)
        if guard:
            run["guards"].setdefault(stage, []).append(guard.group(1) == "True")
        elif text.startswith("{"):
            try:
                run["checks"][stage] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                pass
    for run in runs:
        tool = re.search(r"--tool (\w+)", run["heading"])
        run["tool"] = tool.group(1) if tool else None
    return [r for r in runs if r["checks"] or r["guards"]]


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _stage_list(stages: Sequence[int]) -> str:
    names = [str(s) for s in stages]
    joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"stage{'s' if len(names) > 1 else ''} {joined}"


def gpu_check_summary(
    stages: int | Sequence[int], gpu: str = "H200", root: Path | None = None
) -> list[str]:
    """What the sanitizer runs of ``results/<gpu>/gpu_checks.txt`` found for kernel stage(s)
    ``stages``, one sentence per run, for a reader rather than the raw records of
    :func:`gpu_check_lines`. Each stage is taken from the first run in the file that recorded it
    (the log is kept newest first). Empty when no run recorded any of the stages."""
    wanted = [stages] if isinstance(stages, int) else list(stages)
    path = results_path("gpu_checks.txt", gpu, root)
    if not path.exists():
        return []
    runs = _sanitizer_runs(path)
    chosen: dict[int, list[int]] = {}  # run index -> its stages
    for stage in wanted:
        hit = next(
            (i for i, r in enumerate(runs) if stage in r["checks"] or stage in r["guards"]), None
        )
        if hit is not None:
            chosen.setdefault(hit, []).append(stage)
    out = []
    for i, covered in sorted(chosen.items()):
        run = runs[i]
        n = run["errors"]
        found = "no error count recorded" if n is None else _plural(n, "error")
        tool = f"compute-sanitizer {run['tool']}" if run["tool"] else "A compute-sanitizer run"
        text = f"{tool} on the {gpu}, {_stage_list(covered)}: {found}."
        checks = [run["checks"][s] for s in covered if s in run["checks"]]
        if checks:
            ok = all(c.get("ok") for c in checks)
            errs = [float(c["err"]) for c in checks if "err" in c]
            torch_errs = [float(c["torch_err"]) for c in checks if "torch_err" in c]
            unwritten = sum(int(c.get("unwritten", 0)) for c in checks)
            how = ""
            if errs and torch_errs:
                how = (
                    f" (largest error {max(errs):.4f}, PyTorch's own bf16 error "
                    f"{max(torch_errs):.4f})"
                )
            text += (
                f" {'Each' if len(checks) > 1 else 'It'} ran a ragged problem with empty experts and "
                + ("matched" if ok else "did NOT match")
                + f" the float32 reference{how}, "
                + (
                    "every row written."
                    if not unwritten
                    else f"{_plural(unwritten, 'row')} left unwritten."
                )
            )
        guarded = [s for s in covered if run["guards"].get(s)]
        if guarded:
            calls = len(run["guards"][guarded[0]])
            broken = sum(not g for s in guarded for g in run["guards"][s])
            if len(covered) == 1:
                who = _plural(calls, "unchecked call")
            elif guarded == covered:
                who = f"{_plural(calls, 'unchecked call')} per stage"
            else:
                who = (
                    f"{_stage_list(guarded).capitalize()}: {_plural(calls, 'unchecked call')} each"
                )
            text += f" {who} with offsets that break the contract " + (
                "wrote nothing outside the output."
                if not broken
                else f"wrote outside the output ({_plural(broken, 'call')})."
            )
        out.append(text)
    return out
