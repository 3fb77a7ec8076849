"""``python -m pearl_moe figures``: regenerate every committed figure from code, and the generated
blocks of the README and of ``docs/``.

Figures are registered by name in :data:`FIGURES`: the course's figures drawn from the models
(:data:`COURSE_FIGURES`), then the benchmark's, drawn from the runs committed in ``results/``
(:data:`BENCH_FIGURES`). Each entry takes the output directory and returns the paths it wrote.
The data is read here (through :mod:`pearl_moe.results` and the models) and drawn by
:mod:`pearl_moe.course.plots`; this module only shapes it and saves the PNGs, small (100 dpi for the
course's figures in the house style, 90 dpi for the benchmark's) so the repository stays light.
Writing into the repository's own ``figures/`` also refreshes the generated tables of the README and
the ``docs/`` pages (:func:`pearl_moe.course.doc_tables.update_docs`) and the figure list of
``docs/figures.md``, whose captions are the first paragraphs of the registered functions'
docstrings.
"""

from __future__ import annotations

import argparse
import os
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from .. import results
from ..bench.compare import ablation_summary
from ..config import GemmConfig
from ..model.occupancy import occupancy
from ..workloads import MODELS, make_problem
from .plots import (
    plot_ablation_steps,
    plot_calibration,
    plot_latency_panels,
    plot_latency_vs_tokens,
    plot_layer_bytes,
    plot_occupancy_maps,
    plot_pct_of_floor,
    plot_ring_sweep,
    plot_roofline,
    plot_smem_budget,
    plot_stage_projection,
    plot_stage_ratios,
    plot_tmem_maps,
    plot_utilization_vs_tokens,
    plot_vs_floor,
    style,
)

__all__ = [
    "FIGURES",
    "COURSE_FIGURES",
    "BENCH_FIGURES",
    "BLOG_SMEM_CONFIGS",
    "BLOG_TMEM_CONFIGS",
    "STEP_LABELS",
    "COMPARE_IMPLS",
    "latency_vs_tokens",
    "pct_of_floor",
    "stages_latency",
    "ablation_cells",
    "ablation_figure",
    "compare_rows",
    "compare_figure",
    "registry",
    "FIGURES_PAGE",
    "render_figures_block",
    "update_figures_page",
    "main",
]

FigureFn = Callable[[Path], list[Path]]
DPI = 100
#: The benchmark figures are saved smaller, as drawn (no house style applied when saving).
BENCH_DPI = 90
#: The GPU whose committed runs the benchmark figures show.
BENCH_GPU = "H200"


def _save(fig, out_dir: Path, name: str, dpi: int = DPI, house_style: bool = True) -> list[Path]:
    """Write ``fig`` as ``<out_dir>/<name>.png``; ``house_style`` saves it inside
    :func:`pearl_moe.course.plots.style` (tight bounding box). The file is a 256-colour palette PNG
    (:func:`_palette_png`): the figures travel with the repository to the GPU machine."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.png"
    if house_style:
        with style():
            fig.savefig(path, dpi=dpi)
    else:
        fig.savefig(path, dpi=dpi)
    _palette_png(path)
    return [path]


def _palette_png(path: Path) -> None:
    """Rewrite an opaque RGBA PNG as a 256-colour palette PNG, without dithering: a plot's flat
    colours are kept exactly and only its anti-aliased edges move (the committed figures: a third
    of the bytes, pixels off by 0.1 of 255 on average). A figure with transparency is left as is."""
    from PIL import Image

    with Image.open(path) as image:
        image.load()
    if image.mode == "RGBA" and image.getchannel("A").getextrema()[0] < 255:
        return
    palette = image.convert("RGB").quantize(
        colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
    )
    palette.save(path, format="PNG", optimize=True)


# ---------------------------------------------------------------------------- course
#: The blog's shared-memory steps, in order: TMA-store epilogue (6 stages), direct stores
#: (7 stages), 64-row tiles, and B stages that span two K tiles.
BLOG_SMEM_CONFIGS: dict[str, GemmConfig] = {
    "TMA store": GemmConfig(tile_m=128, tile_n=128, epilogue="tma_store"),
    "direct store": GemmConfig(tile_m=128, tile_n=128, epilogue="direct_store"),
    "64-row tile": GemmConfig(tile_m=64, tile_n=128, epilogue="direct_store"),
    "B = 2 K tiles": GemmConfig(tile_m=64, tile_n=128, epilogue="direct_store", b_k_tiles=2),
}

#: The blog's accumulator layouts: two 256-column stages; one 512-column stage; that stage split.
BLOG_TMEM_CONFIGS: tuple[GemmConfig, ...] = (
    GemmConfig(tile_m=128, tile_n=256),
    GemmConfig(tile_m=256, tile_n=512, cta_group=2),
    GemmConfig(tile_m=256, tile_n=512, cta_group=2, acc_slots=2),
)


def occupancy_glm_decode(out_dir: Path) -> list[Path]:
    """Wave model (no measurement), GLM 5.3 at decode on a B200: per-expert loop versus one launch."""
    occ = occupancy(make_problem("GLM 5.3", 64, ep=8), (64, 64))
    return _save(plot_occupancy_maps(occ), out_dir, "occupancy_glm_decode")


def sm_utilization_vs_tokens(out_dir: Path) -> list[Path]:
    """Wave model (no measurement): B200 SM utilization of the three models, small and large tile."""
    fig = plot_utilization_vs_tokens(
        ["GLM 5.3", "DeepSeek V4 Pro", "Kimi K3"],
        tiles=[(64, 64), GemmConfig(tile_m=256, tile_n=256, cta_group=2)],
    )
    return _save(fig, out_dir, "sm_utilization_vs_tokens")


def smem_budget_blog_configs(out_dir: Path) -> list[Path]:
    """Budget model: the blog's steps to deeper pipelines, as stacked shared-memory bars per CTA."""
    fig = plot_smem_budget(list(BLOG_SMEM_CONFIGS.values()), labels=list(BLOG_SMEM_CONFIGS))
    return _save(fig, out_dir, "smem_budget_blog_configs")


def tmem_maps(out_dir: Path) -> list[Path]:
    """Budget model: TMEM columns of the three Blackwell accumulator layouts, stacked."""
    return _save(plot_tmem_maps(BLOG_TMEM_CONFIGS), out_dir, "tmem_maps")


def roofline_moe(out_dir: Path) -> list[Path]:
    """Roofline, derived (datasheets and the H200 ceilings measured in results/H200; no kernel
    timing): the three models' decode shapes (16, 64, 256 tokens per GPU, EP=8) sit far left of
    every ridge point, so decode is IO-bound; prefill (4096 tokens) sits right of it."""
    return _save(plot_roofline(), out_dir, "roofline_moe")


def model_calibration_h200(out_dir: Path) -> list[Path]:
    """Latency model (pearl_moe.model.perfmodel) against every committed H200 measurement of our kernels
    (stages 1-7, the ring-depth sweeps, the walks and the tile shapes probed; `python -m pearl_moe
    calibrate` prints the table)."""
    from ..model.calibrate import evaluate, load_records

    records, _ = load_records()
    return _save(plot_calibration(evaluate(records)), out_dir, "model_calibration_h200")


def b200_stage_projection(out_dir: Path) -> list[Path]:
    """B200, modeled (never measured): stages 3-7 of the course for the three models at decode
    (64 tokens per GPU) and prefill (4096), each against its own floor; the title's second line
    says how close the model comes to the H200's measurements at decode and at prefill."""
    from ..model.calibrate import decode_prefill_errors, trust_note
    from ..model.perfmodel import stage_projection

    proj = stage_projection(tokens=(64, 4096))
    data = {
        f"{m.split()[0]} {t}": {s: p.seconds for s, p in v.items()} for (m, t), v in proj.items()
    }
    floors = {
        f"{m.split()[0]} {t}": next(iter(v.values())).floor_seconds for (m, t), v in proj.items()
    }
    note = trust_note(decode_prefill_errors())
    return _save(plot_stage_projection(data, floors, note=note), out_dir, "b200_stage_projection")


def moe_layer_bytes(out_dir: Path) -> list[Path]:
    """Byte model (no measurement): the passes of GLM 5.3's MoE layer on one GPU (EP=8) over the
    layer's floor (both weight sets of the active experts, x and the output), unfused and with the
    activation fused into the gate+up epilogue, from decode to prefill."""
    from ..bench.layer import LayerProblem

    cases, floors = {}, {}
    for tokens in (1, 64, 256, 1024, 4096):
        p = LayerProblem("GLM 5.3", tokens)
        label = f"{tokens} tok"
        cases[label] = {
            "unfused": p.step_bytes(),
            "activation fused": p.step_bytes(fused_activation=True),
        }
        floors[label] = p.bytes_moved()
    title = "GLM 5.3 MoE layer, EP=8: HBM bytes per pass over the floor (modeled)"
    return _save(plot_layer_bytes(cases, floors, title), out_dir, "moe_layer_bytes")


COURSE_FIGURES: dict[str, FigureFn] = {
    "occupancy_glm_decode": occupancy_glm_decode,
    "sm_utilization_vs_tokens": sm_utilization_vs_tokens,
    "smem_budget_blog_configs": smem_budget_blog_configs,
    "tmem_maps": tmem_maps,
    "roofline_moe": roofline_moe,
    "model_calibration_h200": model_calibration_h200,
    "b200_stage_projection": b200_stage_projection,
    "moe_layer_bytes": moe_layer_bytes,
}


# ---------------------------------------------------------------------------- benchmark
def _slug(model: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in model.lower()).strip("_")


def _measured_on(rs: list[dict]) -> str:
    gpu = (rs[0]["gpu"] or BENCH_GPU).replace("NVIDIA ", "")
    dates = sorted({(r["date"] or "")[:10] for r in rs})
    return f"{gpu} ({', '.join(dates)})"


def _series(rs: list[dict]) -> dict[str, list[tuple[float, float]]]:
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rs:
        series[r["impl"]].append((r["tokens_per_gpu"], r["median_us"] * 1e-6))
    return dict(series)


def latency_vs_tokens(model: str, out_dir: Path, root: Path | None = None) -> list[Path]:
    """Latency against tokens per GPU for every implementation measured on ``model``, with the
    floor (balanced routing; quack-tuned from its own run)."""
    base = results.rows(BENCH_GPU, kind="baselines", model=model, routing="balanced", root=root)
    tuned = results.rows(
        BENCH_GPU,
        kind="quack_tuned",
        model=model,
        routing="balanced",
        impl="quack-tuned",
        root=root,
    )
    if not base:
        raise FileNotFoundError(f"no baselines for {model} under results/{BENCH_GPU}")
    rs = base + tuned
    floor = sorted({(r["tokens_per_gpu"], r["floor_us"] * 1e-6) for r in base})
    fig = plot_latency_vs_tokens(
        _series(rs),
        floor=floor,
        measured_on=_measured_on(rs).split(" (")[0],
        title=f"{model} gate+up, EP=8: measured on {_measured_on(rs)}",
        floor_label="floor (from the run's measured ceilings)",
    )
    return _save(fig, out_dir, f"bench_latency_{_slug(model)}", dpi=BENCH_DPI, house_style=False)


def pct_of_floor(out_dir: Path, root: Path | None = None) -> list[Path]:
    """Percent of the floor (floor / time) per implementation and model, balanced routing."""
    rs = results.rows(BENCH_GPU, kind="baselines", routing="balanced", root=root)
    rs += results.rows(
        BENCH_GPU, kind="quack_tuned", routing="balanced", impl="quack-tuned", root=root
    )
    if not rs:
        raise FileNotFoundError(f"no results under results/{BENCH_GPU}")
    panels = {}
    for model in [m for m in MODELS if any(r["model"] == m for r in rs)]:
        series = defaultdict(list)
        for r in rs:
            if r["model"] == model:
                series[r["impl"]].append((r["tokens_per_gpu"], r["pct_of_floor"]))
        panels[model] = dict(series)
    fig = plot_pct_of_floor(
        panels,
        title=f"Baselines, measured on {_measured_on(rs)}; floor modeled from measured ceilings",
    )
    return _save(fig, out_dir, "bench_pct_of_floor", dpi=BENCH_DPI, house_style=False)


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
    rs = results.rows(BENCH_GPU, kind="stages", routing="balanced", root=root)
    if not rs:
        raise FileNotFoundError(f"no stages run under results/{BENCH_GPU}")
    tuned = results.rows(
        BENCH_GPU, kind="quack_tuned", routing="balanced", impl="quack-tuned", root=root
    )
    panels = {}
    for model in [m for m in MODELS if any(r["model"] == m for r in rs)]:
        mine = [r for r in rs + tuned if r["model"] == model]
        panels[model] = {
            "series": {STAGE_LABELS.get(impl, impl): pts for impl, pts in _series(mine).items()},
            "floor": sorted(
                {(r["tokens_per_gpu"], r["floor_us"] * 1e-6) for r in rs if r["model"] == model}
            ),
            "measured_on": _measured_on(mine).split(" (")[0],
        }
    fig = plot_latency_panels(
        panels,
        title=f"Our sm_90a stages against the baselines, measured on {_measured_on(rs)}; "
        "floor modeled from the run's measured ceilings",
        floor_label="floor (from the run's measured ceilings)",
    )
    return _save(fig, out_dir, "stages_latency_h200", dpi=BENCH_DPI, house_style=False)


#: The ablation's steps, as the figure's legend names them.
STEP_LABELS = {
    ("pearl-s3", "pearl-s4"): "4 / 3: direct store",
    ("pearl-s4", "pearl-s5"): "5 / 4: 64-row tiles",
    ("pearl-s5", "pearl-s6"): "6 / 5: wide B entries",
    ("pearl-s6", "pearl-s7"): "7 / 6: split accumulator",
}


def ablation_cells(run: dict) -> list[dict]:
    """Every (model, tokens, step) of an ablation run: the paired ratio and its round range."""
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
    gpu = run["env"].get("gpu", BENCH_GPU).replace("NVIDIA ", "")
    return f"{gpu} ({str(run['env']['date'])[:10]})"


def ablation_figure(out_dir: Path, root: Path | None = None) -> list[Path]:
    """The ablation of stages 3-7 measured on the H200: each stage's time over the previous
    stage's, per model and tokens per GPU (bar: paired ratio of 5 interleaved rounds, the highest
    and lowest dropped; whisker: range of the per-round ratios)."""
    run = results.load_run(BENCH_GPU, "ablation", root)
    cells = ablation_cells(run)
    labels = {k: v for k, v in STEP_LABELS.items() if any(c["step"] == k for c in cells)}
    fig = plot_ablation_steps(
        cells,
        labels,
        title=f"Stage-by-stage ablation of the sm_90a kernels, measured on {_run_date(run)}, "
        "gate+up, EP=8: time of stage N / stage N-1 (whiskers: range of the rounds)",
    )
    return _save(fig, out_dir, "ablation_h200", dpi=BENCH_DPI, house_style=False)


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
    run = results.load_run(BENCH_GPU, "compare", root)
    fig = plot_vs_floor(
        compare_rows(run),
        COMPARE_IMPLS,
        title=f"Grouped GEMM, gate+up, EP=8, CUDA graphs, measured on {_run_date(run)}: "
        "latency / floor (floor from the run's measured ceilings)",
    )
    return _save(fig, out_dir, "bench_compare_h200", dpi=BENCH_DPI, house_style=False)


# ---------------------------------------------------------------------------- stages 1-3 (01b-03c)
#: The lines of the stage-ratio figure: bench name -> legend entry.
RATIO_LABELS = {
    "pearl-s2": "stage 2 (one grouped launch)",
    "pearl-s3": "stage 3 (persistent)",
    "loop": "cuBLAS per-expert loop",
}


def stage_ratio_figure(out_dir: Path, root: Path | None = None) -> list[Path]:
    """Stages 2 and 3 and the cuBLAS loop, each as a multiple of our stage-1 per-expert loop's
    time, against tokens per GPU, per model (balanced routing), from the stages run measured on the
    H200: one launch wins at decode and loses at prefill, where stage 3 wins it back."""
    rs = results.rows(BENCH_GPU, kind="stages", routing="balanced", root=root)
    if not rs:
        raise FileNotFoundError(f"no stages run under results/{BENCH_GPU}")
    panels = {}
    for model in [m for m in MODELS if any(r["model"] == m for r in rs)]:
        mine = [r for r in rs if r["model"] == model]
        loop = {r["tokens_per_gpu"]: r["median_us"] for r in mine if r["impl"] == "pearl-s1"}
        panels[model] = {
            label: sorted(
                (r["tokens_per_gpu"], r["median_us"] / loop[r["tokens_per_gpu"]])
                for r in mine
                if r["impl"] == impl and r["tokens_per_gpu"] in loop
            )
            for impl, label in RATIO_LABELS.items()
        }
    fig = plot_stage_ratios(
        panels,
        baseline="stage 1 (our per-expert loop)",
        title="Time relative to our stage-1 loop (below 1: faster), "
        f"measured on {_measured_on(rs)}",
    )
    return _save(fig, out_dir, "stage_ratios_h200")


def stage_sweep_figure(out_dir: Path, root: Path | None = None) -> list[Path]:
    """Stage 3 at every ring depth that fits, 128- and 64-row tiles, GLM 5.3 at 64 tokens per
    GPU, measured on the H200 (the ring-depth sweep run), against the floor of that run's read
    ceiling (raised to the fastest read a kernel in the run demonstrated)."""
    from .measurements import describe_run, stage_sweep

    run = results.load_run(BENCH_GPU, "stage_sweep", root)
    series = {}
    floor = None
    for tile_m in (128, 64):
        rows = stage_sweep(run, tile_m)
        if rows:
            series[f"tile {tile_m}x{rows[0]['tile_n']}"] = [
                (r["ring_depth"], r["seconds"]) for r in rows
            ]
            floor = rows[0]["floor_seconds"]
    fig = plot_ring_sweep(
        series, floor, (run.get("env") or {}).get("gpu", "an unnamed GPU").removeprefix("NVIDIA "), describe_run(run).split(";")[0],
        title="Stage 3, GLM 5.3 gate+up at 64 tokens/GPU (EP=8): latency against ring depth",
    )  # fmt: skip
    return _save(fig, out_dir, "stage_sweep_h200")


def _latency_fn(model: str) -> Callable[[Path], list[Path]]:
    def fn(out_dir: Path) -> list[Path]:
        return latency_vs_tokens(model, out_dir)

    fn.__doc__ = f"{model}: latency of every baseline against tokens per GPU, with the floor."
    return fn


BENCH_FIGURES: dict[str, FigureFn] = {f"bench_latency_{_slug(m)}": _latency_fn(m) for m in MODELS}
BENCH_FIGURES["bench_pct_of_floor"] = pct_of_floor
BENCH_FIGURES["stages_latency_h200"] = stages_latency
BENCH_FIGURES["ablation_h200"] = ablation_figure
BENCH_FIGURES["bench_compare_h200"] = compare_figure
BENCH_FIGURES["stage_ratios_h200"] = stage_ratio_figure
BENCH_FIGURES["stage_sweep_h200"] = stage_sweep_figure


def _merge(*parts: dict[str, FigureFn]) -> dict[str, FigureFn]:
    merged: dict[str, FigureFn] = {}
    for part in parts:
        for name, fn in part.items():
            if name in merged:
                raise ValueError(f"figure name {name!r} is registered twice")
            merged[name] = fn
    return merged


#: Every figure, in the order docs/figures.md lists them.
FIGURES: dict[str, FigureFn] = _merge(COURSE_FIGURES, BENCH_FIGURES)


def registry() -> dict[str, FigureFn]:
    """All figures (a copy of :data:`FIGURES`)."""
    return dict(FIGURES)


# ---------------------------------------------------------------------------- docs, CLI
_FIGURES_BLOCK = re.compile(r"(<!-- figures:begin -->\n)(.*?)(<!-- figures:end -->)", re.S)

#: The page that lists every figure, relative to the repository.
FIGURES_PAGE = "docs/figures.md"


def render_figures_block(figures: dict[str, FigureFn], fig_dir: Path, base: Path) -> str:
    """Markdown for a page in the folder ``base``: each existing figure with the first paragraph of
    its function's docstring (joined into one line, so a caption that wraps in the source is not
    cut), linked relative to ``base``."""
    lines = []
    for name, fn in figures.items():
        path = fig_dir / f"{name}.png"
        if not path.exists():
            continue
        paragraph = (fn.__doc__ or name).strip().split("\n\n")[0]
        caption = " ".join(line.strip() for line in paragraph.splitlines())
        link = Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()
        lines.append(f"**{name}**: {caption}\n\n![{name}]({link})\n")
    return "\n".join(lines)


def update_figures_page(page: Path, figures: dict[str, FigureFn], fig_dir: Path) -> bool:
    """Rewrite the ``figures:begin`` / ``figures:end`` block of ``page``; True when it changed."""
    text = page.read_text()
    if not _FIGURES_BLOCK.search(text):
        raise ValueError(f"{page} has no <!-- figures:begin --> ... <!-- figures:end --> block")
    body = render_figures_block(figures, fig_dir, page.parent)
    new = _FIGURES_BLOCK.sub(lambda m: m.group(1) + body + m.group(3), text)
    if new != text:
        page.write_text(new)
    return new != text


def _default_out() -> Path:
    """The repository's ``figures/`` when run from a checkout, else ``./figures``."""
    repo = Path(__file__).resolve().parents[2]
    if (repo / "pyproject.toml").exists():
        return repo / "figures"
    return Path.cwd() / "figures"


def main(argv: list[str] | None = None) -> int:
    figures = registry()
    parser = argparse.ArgumentParser(
        prog="python -m pearl_moe figures", description="Regenerate the course's figures."
    )
    parser.add_argument("--out", type=Path, default=None, help="output directory")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these figures")
    parser.add_argument("--list", action="store_true", help="list figure names and exit")
    parser.add_argument(
        "--no-docs",
        "--no-readme",
        dest="no_readme",
        action="store_true",
        help="do not refresh the generated blocks of README.md and docs/ (they are refreshed "
        "only when writing to the repository's own figures/)",
    )
    args = parser.parse_args(argv)
    if args.list:
        for name in figures:
            print(name)
        return 0
    names = args.only or list(figures)
    unknown = [n for n in names if n not in figures]
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; known: {', '.join(figures)}")
    out_dir = args.out or _default_out()
    for name in names:
        for path in figures[name](out_dir):
            print(f"{path}  ({path.stat().st_size / 1024:.0f} KB)")
    repo = _default_out().parent
    page = repo / FIGURES_PAGE
    if not args.no_readme and out_dir.resolve() == _default_out().resolve() and page.exists():
        from .doc_tables import update_docs

        changed = update_docs(repo)
        if update_figures_page(page, figures, out_dir):
            changed.append(page)
        for path in changed:
            print(f"{path.relative_to(repo)}: refreshed")
        if not changed:
            print("README.md and docs/: up to date")
    return 0
