"""``python -m pearl_moe figures``: regenerate every figure of the course from code.

Figures are registered by name in :data:`FIGURES`; each entry takes the output directory and returns
the paths it wrote. The benchmark figures live with the benchmark code
(``pearl_moe.bench.figures.BENCH_FIGURES``, same signature) and are merged in when that module
exists. The PNGs are kept small (about 100 dpi) so the repository stays light and diffs of
regenerated figures stay cheap.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

from matplotlib.figure import Figure

from .config import GemmConfig
from .occupancy import occupancy
from .plots import (
    plot_calibration,
    plot_occupancy_maps,
    plot_roofline,
    plot_smem_budget,
    plot_stage_projection,
    plot_tmem_map,
    plot_utilization_vs_tokens,
    style,
)
from .workloads import make_problem

__all__ = ["FIGURES", "BLOG_SMEM_CONFIGS", "BLOG_TMEM_CONFIGS", "registry", "main"]

FigureFn = Callable[[Path], list[Path]]
DPI = 100

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


def _save(fig: Figure, out_dir: Path, name: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.png"
    with style():
        fig.savefig(path, dpi=DPI)
    return [path]


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
    with style():
        fig = Figure(figsize=(7.0, 4.6), layout="constrained")
        axes = fig.subplots(len(BLOG_TMEM_CONFIGS), 1)
        for config, ax in zip(BLOG_TMEM_CONFIGS, axes, strict=True):
            plot_tmem_map(config, ax=ax)
    return _save(fig, out_dir, "tmem_maps")


def roofline_moe(out_dir: Path) -> list[Path]:
    """Roofline, derived (datasheets and the H200 ceilings measured in results/H200; no kernel
    timing): the three models' decode shapes (16, 64, 256 tokens per GPU, EP=8) sit far left of
    every ridge point, so decode is IO-bound; prefill (4096 tokens) sits right of it."""
    return _save(plot_roofline(), out_dir, "roofline_moe")


def model_calibration_h200(out_dir: Path) -> list[Path]:
    """Latency model (pearl_moe.perfmodel) against every committed H200 measurement of our kernels
    (stages 1-7, the ring-depth sweeps, the walks and the tile shapes probed; `python -m pearl_moe
    calibrate` prints the table)."""
    from .calibrate import evaluate, load_records

    records, _ = load_records()
    return _save(plot_calibration(evaluate(records)), out_dir, "model_calibration_h200")


def b200_stage_projection(out_dir: Path) -> list[Path]:
    """B200, modeled (never measured): stages 3-7 of the course for the three models at decode
    (64 tokens per GPU) and prefill (4096), each against its own floor; the title's second line
    says how close the model comes to the H200's measurements at decode and at prefill."""
    from .calibrate import decode_prefill_errors, trust_note
    from .perfmodel import stage_projection

    proj = stage_projection(tokens=(64, 4096))
    data = {
        f"{m.split()[0]} {t}": {s: p.seconds for s, p in v.items()} for (m, t), v in proj.items()
    }
    floors = {
        f"{m.split()[0]} {t}": next(iter(v.values())).floor_seconds for (m, t), v in proj.items()
    }
    note = trust_note(decode_prefill_errors())
    return _save(plot_stage_projection(data, floors, note=note), out_dir, "b200_stage_projection")


FIGURES: dict[str, FigureFn] = {
    "occupancy_glm_decode": occupancy_glm_decode,
    "sm_utilization_vs_tokens": sm_utilization_vs_tokens,
    "smem_budget_blog_configs": smem_budget_blog_configs,
    "tmem_maps": tmem_maps,
    "roofline_moe": roofline_moe,
    "model_calibration_h200": model_calibration_h200,
    "b200_stage_projection": b200_stage_projection,
}


def _bench_figures() -> dict[str, FigureFn]:
    """``BENCH_FIGURES`` of ``pearl_moe.bench.figures`` if that module exists (errors inside it
    propagate: a broken benchmark figure must not silently disappear)."""
    if importlib.util.find_spec("pearl_moe.bench") is None:
        return {}
    if importlib.util.find_spec("pearl_moe.bench.figures") is None:
        return {}
    module = importlib.import_module("pearl_moe.bench.figures")
    return dict(module.BENCH_FIGURES)


def registry() -> dict[str, FigureFn]:
    """All figures: the ones above plus the benchmark's."""
    merged = dict(FIGURES)
    for name, fn in _bench_figures().items():
        if name in merged:
            raise ValueError(f"figure name {name!r} is registered twice")
        merged[name] = fn
    return merged


_FIGURES_BLOCK = re.compile(r"(<!-- figures:begin -->\n)(.*?)(<!-- figures:end -->)", re.S)


def render_figures_block(figures: dict[str, FigureFn], fig_dir: Path, base: Path) -> str:
    """Markdown for the README: each existing figure with the first paragraph of its function's
    docstring (joined into one line, so a caption that wraps in the source is not cut)."""
    lines = []
    for name, fn in figures.items():
        path = fig_dir / f"{name}.png"
        if not path.exists():
            continue
        paragraph = (fn.__doc__ or name).strip().split("\n\n")[0]
        caption = " ".join(line.strip() for line in paragraph.splitlines())
        lines.append(f"**{name}**: {caption}\n\n![{name}]({path.relative_to(base).as_posix()})\n")
    return "\n".join(lines)


def update_readme_figures(readme: Path, figures: dict[str, FigureFn], fig_dir: Path) -> bool:
    """Rewrite the README's ``figures:begin`` / ``figures:end`` block; True when it changed."""
    text = readme.read_text()
    if not _FIGURES_BLOCK.search(text):
        return False
    body = render_figures_block(figures, fig_dir, readme.parent)
    new = _FIGURES_BLOCK.sub(lambda m: m.group(1) + body + m.group(3), text)
    if new != text:
        readme.write_text(new)
    return new != text


def _default_out() -> Path:
    """The repository's ``figures/`` when run from a checkout, else ``./figures``."""
    repo = Path(__file__).resolve().parent.parent
    if (repo / "pyproject.toml").exists():
        return repo / "figures"
    return Path.cwd() / "figures"


def main(argv: list[str] | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")  # a command-line run never needs a window
    figures = registry()
    parser = argparse.ArgumentParser(
        prog="python -m pearl_moe figures", description="Regenerate the course's figures."
    )
    parser.add_argument("--out", type=Path, default=None, help="output directory")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these figures")
    parser.add_argument("--list", action="store_true", help="list figure names and exit")
    parser.add_argument(
        "--no-readme",
        action="store_true",
        help="do not refresh README.md's stage table and figure list (they are refreshed only "
        "when writing to the repository's own figures/)",
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
    readme = _default_out().parent / "README.md"
    if not args.no_readme and out_dir.resolve() == _default_out().resolve() and readme.exists():
        from .stages import update_readme

        changed = update_readme(readme)
        changed = update_readme_figures(readme, figures, out_dir) or changed
        print(f"{readme}: {'refreshed' if changed else 'up to date'}")
    return 0
