"""Say where a number comes from: the recorded runs of our kernels, read for the notebooks.

:func:`load_kernel_results` reads the H200 runs of our kernels written by the benchmark harness
(``results/H200/stages.json`` and ``results/H200/stage_sweep.json``, ``python -m pearl_moe bench``);
:func:`kernel_rows`, :func:`stage_series`, :func:`floor_series`, :func:`correctness_summary`,
:func:`check_table` and :func:`stage_sweep` read their records through :mod:`pearl_moe.replay`;
:func:`describe_run` says what a run was measured on and :func:`measurement_source` turns it into
a label: "live on ...", "replayed from ... (measured <date> on <GPU>)" or "no recorded
measurement yet". :func:`baseline` replays one baseline time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..config import LEGACY_FIELD_NAMES
from ._paths import ROOT, rel
from .machine import Machine

__all__ = [
    "STAGE_IMPLS",
    "results_path",
    "load_kernel_results",
    "measured_date",
    "describe_run",
    "measurement_source",
    "kernel_rows",
    "stage_series",
    "floor_series",
    "correctness_summary",
    "check_table",
    "stage_sweep",
    "baseline",
]

#: Stage number -> the bench implementation name of that stage (``python -m pearl_moe bench``).
STAGE_IMPLS = {1: "pearl-s1", 2: "pearl-s2", 3: "pearl-s3"}


def results_path(name: str = "stages.json", gpu: str = "H200", root: Path | None = None):
    """``results/<gpu>/<name>`` in the repository (it may not exist yet)."""
    return (root or ROOT / "results") / gpu / name


def load_kernel_results(
    path: str | Path | None = None,
    gpu: str = "H200",
    kind: str = "stages",
    root: Path | None = None,
) -> dict | None:
    """The recorded H200 run of our kernels, or None when there is none yet.

    The file is a benchmark-harness run (``python -m pearl_moe bench --kind <kind>``, schema in
    :mod:`pearl_moe.bench.records`): ``results/<gpu>/stages.json`` (stages 1-3 and the torch
    baselines over the models and batch sizes) or ``results/<gpu>/stage_sweep.json`` (stage 3 at
    several pipeline depths and tile shapes). It is read with :func:`pearl_moe.bench.records.read_run`,
    which raises on a file that breaks the schema; only a missing file gives None. The path is added
    under ``_path`` so labels can name it.
    """
    from ..bench.records import read_run

    path = Path(path) if path is not None else results_path(f"{kind}.json", gpu, root)
    if not path.exists():
        return None
    run = read_run(path)
    run["_path"] = str(path)
    return run


def measured_date(run: Mapping | None) -> str | None:
    """The day a recorded run was measured (``YYYY-MM-DD``), if it says."""
    if not run:
        return None
    date = (run.get("env") or {}).get("date")
    return str(date)[:10] if date else None


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
        parts.append(f"clocks {sm}{mem}, read by {clocks.get('source', 'an unrecorded method')}")
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


def _impl_name(stage_or_impl) -> str:
    return STAGE_IMPLS.get(stage_or_impl, str(stage_or_impl))


def kernel_rows(
    data: Mapping | None, model: str | None = None, impl=None, routing: str | None = None
) -> list[dict]:
    """Rows of a recorded run (:func:`pearl_moe.replay.run_rows`, every status), optionally of one
    model, implementation (a stage number or a bench name) and routing."""
    from .. import replay

    if not data:
        return []
    if impl is not None:
        impl = [_impl_name(i) for i in ([impl] if isinstance(impl, int | str) else impl)]
    return replay.run_rows(dict(data), model=model, impl=impl, routing=routing, ok_only=False)


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
    for problem, results in live:
        marks = []
        for stage, w in zip(stages, widths, strict=True):
            result = results.get(stage)
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
    from .. import replay

    path = results_path(f"{kind}.json", gpu, root)
    if not path.exists():
        return None
    for r in replay.run_rows(path, model=model, impl=impl, routing=routing, tokens=tokens):
        return {
            "seconds": r["median_us"] * 1e-6,
            "floor_seconds": r["floor_us"] * 1e-6,
            "pct_of_floor": r["pct_of_floor"],
            "source": f"replayed from {rel(path)} (measured {str(r['date'])[:10]} on {r['gpu']})",
        }
    return None
