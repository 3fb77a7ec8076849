"""Benchmark figures, drawn from the committed results (no GPU needed).

``BENCH_FIGURES`` maps a figure name to ``fn(out_dir) -> [paths]``; ``python -m pearl_moe figures``
merges it with the course's other figures. Every curve is labeled "measured on <GPU> (<date>)"; the
floor is a model built on the ceilings measured in the same run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from .. import replay
from ..workloads import MODELS

__all__ = [
    "BENCH_FIGURES",
    "latency_vs_tokens",
    "pct_of_floor",
    "stages_latency",
    "ablation_cells",
    "ablation_figure",
    "compare_rows",
    "compare_figure",
    "STEP_LABELS",
    "COMPARE_IMPLS",
]

GPU = "H200"


def _slug(model: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in model.lower()).strip("_")


def _measured_on(rs: list[dict]) -> str:
    gpu = (rs[0]["gpu"] or GPU).replace("NVIDIA ", "")
    dates = sorted({(r["date"] or "")[:10] for r in rs})
    return f"{gpu} ({', '.join(dates)})"


def _series(rs: list[dict]) -> dict[str, list[tuple[float, float]]]:
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rs:
        series[r["impl"]].append((r["tokens_per_gpu"], r["median_us"] * 1e-6))
    return dict(series)


def _save(fig, out_dir: Path, name: str) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.png"
    fig.savefig(path, dpi=90)
    return [path]


def latency_vs_tokens(model: str, out_dir: Path, root: Path | None = None) -> list[Path]:
    """Latency against tokens per GPU for every implementation measured on ``model``, with the
    floor (balanced routing; quack-tuned from its own run)."""
    from ..plots import plot_latency_vs_tokens

    base = replay.rows(GPU, kind="baselines", model=model, routing="balanced", root=root)
    tuned = replay.rows(
        GPU, kind="quack_tuned", model=model, routing="balanced", impl="quack-tuned", root=root
    )
    if not base:
        raise FileNotFoundError(f"no baselines for {model} under results/{GPU}")
    rs = base + tuned
    floor = sorted({(r["tokens_per_gpu"], r["floor_us"] * 1e-6) for r in base})
    fig = plot_latency_vs_tokens(
        _series(rs),
        floor=floor,
        measured_on=_measured_on(rs).split(" (")[0],
        title=f"{model} gate+up, EP=8: measured on {_measured_on(rs)}",
        floor_label="floor (from the run's measured ceilings)",
    )
    return _save(fig, out_dir, f"bench_latency_{_slug(model)}")


def pct_of_floor(out_dir: Path, root: Path | None = None) -> list[Path]:
    """Percent of the floor (floor / time) per implementation and model, balanced routing."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    rs = replay.rows(GPU, kind="baselines", routing="balanced", root=root)
    rs += replay.rows(GPU, kind="quack_tuned", routing="balanced", impl="quack-tuned", root=root)
    if not rs:
        raise FileNotFoundError(f"no results under results/{GPU}")
    models = [m for m in MODELS if any(r["model"] == m for r in rs)]
    fig = Figure(figsize=(10, 3.4), layout="constrained")
    axes = fig.subplots(1, len(models), sharey=True, squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        series = defaultdict(list)
        for r in rs:
            if r["model"] == model:
                series[r["impl"]].append((r["tokens_per_gpu"], r["pct_of_floor"]))
        for impl, pts in series.items():
            t, p = zip(*sorted(pts), strict=True)
            ax.plot(t, p, marker="o", ms=3, label=impl)
        ax.axhline(100, color="#555555", ls="--", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("tokens per GPU")
    axes[0].set_ylabel("% of floor (floor / time)")
    axes[-1].legend(fontsize=7)
    fig.suptitle(f"Baselines, measured on {_measured_on(rs)}; floor modeled from measured ceilings")
    return _save(fig, out_dir, "bench_pct_of_floor")


#: Labels of our kernel stages in the stages figure.
STAGE_LABELS = {
    "pearl-s1": "stage 1 (per-expert loop of our GEMM)",
    "pearl-s2": "stage 2 (grouped)",
    "pearl-s3": "stage 3 (persistent, warp-specialized)",
    "loop": "cuBLAS per-expert loop",
    "grouped_mm": "torch grouped_mm",
    "quack-tuned": "quack tuned (separate run)",
}


def stages_latency(out_dir: Path, root: Path | None = None) -> list[Path]:
    """Our sm_90a stages 1-3 against the baselines of the same run (and tuned quack from its own
    run), per model, balanced routing, with the floor of the stages run."""
    from matplotlib.figure import Figure

    from ..plots import plot_latency_vs_tokens

    rs = replay.rows(GPU, kind="stages", routing="balanced", root=root)
    if not rs:
        raise FileNotFoundError(f"no stages run under results/{GPU}")
    tuned = replay.rows(GPU, kind="quack_tuned", routing="balanced", impl="quack-tuned", root=root)
    models = [m for m in MODELS if any(r["model"] == m for r in rs)]
    fig = Figure(figsize=(12, 4.4), layout="constrained")
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        mine = [r for r in rs + tuned if r["model"] == model]
        series = {STAGE_LABELS.get(impl, impl): pts for impl, pts in _series(mine).items()}
        floor = sorted(
            {(r["tokens_per_gpu"], r["floor_us"] * 1e-6) for r in rs if r["model"] == model}
        )
        plot_latency_vs_tokens(
            series, floor=floor, measured_on=_measured_on(mine).split(" (")[0], title=model, ax=ax,
            floor_label="floor (from the run's measured ceilings)",
        )  # fmt: skip
        ax.get_legend().remove()  # one legend for the three panels, below them
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=7)
    fig.suptitle(
        f"Our sm_90a stages against the baselines, measured on {_measured_on(rs)}; "
        "floor modeled from the run's measured ceilings"
    )
    return _save(fig, out_dir, "stages_latency_h200")


#: The ablation's steps, as the figure's legend names them.
STEP_LABELS = {
    ("pearl-s3", "pearl-s4"): "4 / 3: direct store",
    ("pearl-s4", "pearl-s5"): "5 / 4: 64-row tiles",
    ("pearl-s5", "pearl-s6"): "6 / 5: wide B entries",
    ("pearl-s6", "pearl-s7"): "7 / 6: ping-pong consumers",
}


def ablation_cells(run: dict) -> list[dict]:
    """Every (model, tokens, step) of an ablation run: the paired ratio and its round range."""
    from .compare import ablation_summary

    cells = []
    for row in ablation_summary(run)["rows"]:
        if row["routing"] != "balanced":
            continue
        for c in row["cells"]:
            if "ratio" in c:
                cells.append(
                    dict(model=row["model"], tokens=row["tokens"], step=(c["vs"], c["impl"]),
                         ratio=c["ratio"], lo=c["lo"], hi=c["hi"])
                )  # fmt: skip
    return cells


def _run_date(run: dict) -> str:
    return f"{run['env'].get('gpu', GPU).replace('NVIDIA ', '')} ({str(run['env']['date'])[:10]})"


def ablation_figure(out_dir: Path, root: Path | None = None) -> list[Path]:
    """The ablation of stages 3-7 measured on the H200: each stage's time over the previous
    stage's, per model and tokens per GPU (bar: paired ratio of 5 interleaved rounds, the highest
    and lowest dropped; whisker: range of the per-round ratios)."""
    run = replay.load_run(GPU, "ablation", root)
    cells = ablation_cells(run)
    labels = {k: v for k, v in STEP_LABELS.items() if any(c["step"] == k for c in cells)}
    from ..plots import plot_ablation_steps

    fig = plot_ablation_steps(
        cells,
        labels,
        title=f"Stage-by-stage ablation of the sm_90a kernels, measured on {_run_date(run)}, "
        "gate+up, EP=8: time of stage N / stage N-1 (whiskers: range of the rounds)",
    )
    return _save(fig, out_dir, "ablation_h200")


#: Implementations of the benchmark figure, the default call first, with their legend labels.
COMPARE_IMPLS = {
    "pearl": "pearl (default call)",
    "triton": "Triton grouped GEMM",
    "grouped_mm": "torch grouped_mm",
    "loop": "cuBLAS per-expert loop",
    "quack-tuned": "quack, tuned",
    "quack": "quack",
    "flashinfer": "FlashInfer",
}


def compare_rows(run: dict) -> list[dict]:
    """One row per (shape, implementation) of a compare run: time / floor of the shape."""
    problems = {p["id"]: p for p in run["problems"]}
    rows = []
    for r in run["records"]:
        if r.get("status") != "ok":
            continue
        p = problems[r["problem"]]
        shape = str(p["tokens_per_gpu"]) + (
            "" if p["routing"] == "balanced" else f" {p['routing']}"
        )
        rows.append(
            dict(model=p["model"], shape=shape, impl=r["impl"], us=r["time"]["median_us"],
                 floor_us=p["floor_us"], ratio=r["time"]["median_us"] / p["floor_us"])
        )  # fmt: skip
    return rows


def compare_figure(out_dir: Path, root: Path | None = None) -> list[Path]:
    """The post's benchmark figure, measured on the H200: the three models' gate+up shapes, every
    implementation (our default call and each baseline, each tuned), latency over the shape's
    floor (from the run's measured ceilings), in CUDA graphs."""
    from ..plots import plot_vs_floor

    run = replay.load_run(GPU, "compare", root)
    fig = plot_vs_floor(
        compare_rows(run),
        COMPARE_IMPLS,
        title=f"Grouped GEMM, gate+up, EP=8, CUDA graphs, measured on {_run_date(run)}: "
        "latency / floor (floor from the run's measured ceilings)",
    )
    return _save(fig, out_dir, "bench_compare_h200")


def _latency_fn(model: str) -> Callable[[Path], list[Path]]:
    def fn(out_dir: Path) -> list[Path]:
        return latency_vs_tokens(model, out_dir)

    fn.__doc__ = f"{model}: latency of every baseline against tokens per GPU, with the floor."
    return fn


BENCH_FIGURES: dict[str, Callable[[Path], list[Path]]] = {
    f"bench_latency_{_slug(m)}": _latency_fn(m) for m in MODELS
}
BENCH_FIGURES["bench_pct_of_floor"] = pct_of_floor
BENCH_FIGURES["stages_latency_h200"] = stages_latency
BENCH_FIGURES["ablation_h200"] = ablation_figure
BENCH_FIGURES["bench_compare_h200"] = compare_figure
