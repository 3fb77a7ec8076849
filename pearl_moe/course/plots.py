"""Every plot of the package, in one house style: the course's figures, the notebooks' own, the
benchmark figures and the explorers' pictures. No other module of the package imports matplotlib.

Every function returns the :class:`~matplotlib.figure.Figure` it drew on; the single-panel ones take
an optional ``ax`` to draw into instead. Figures are built with :class:`matplotlib.figure.Figure`
rather than pyplot, so nothing here touches global state: no backend is chosen, no rcParams change
on import, and a notebook never shows a figure twice. The style is applied per figure through
:func:`style`.

Measurements come in as arguments (read from ``results/`` by :mod:`pearl_moe.results` and shaped by
the caller); the models are asked here: budgets come from :mod:`pearl_moe.config`, tiles and waves
from :mod:`pearl_moe.model.occupancy`, so a plot cannot disagree with the models it shows.
:mod:`pearl_moe.course.figures` saves the committed figures, :mod:`pearl_moe.course` re-exports the
notebooks' plots, :mod:`pearl_moe.course.widgets` shows the explorers' pictures.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Mapping, Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from ..config import GemmConfig, resolve, smem_budget, tmem_columns
from ..hardware import B200, GpuSpec, get_gpu
from ..model.occupancy import IDLE, Occupancy, occupancy
from ..workloads import get_model, make_problem

__all__ = [
    "OKABE_ITO",
    "MODEL_COLORS",
    "model_color",
    "STYLE",
    "style",
    "figure_png",
    "plot_occupancy_map",
    "plot_occupancy_maps",
    "plot_utilization_vs_tokens",
    "plot_smem_budget",
    "plot_tmem_map",
    "plot_tmem_maps",
    "plot_config_budget",
    "plot_latency_vs_tokens",
    "source_title",
    "plot_latency_panels",
    "plot_roofline",
    "plot_calibration",
    "plot_stage_projection",
    "plot_ring_depth_sweep",
    "plot_ring_depth_marked",
    "plot_ablation_steps",
    "plot_vs_floor",
    "plot_pct_of_floor",
    "plot_stage_sweep",
    "plot_latency_bars",
    "plot_recorded_vs_tokens",
    "say_model",
    "plot_stage_budgets",
    "same_tiles",
    "plot_stage_occupancy",
    "plot_ablation_step",
    "plot_layer_bytes",
]

#: Okabe & Ito's palette, distinguishable under the common colour-vision deficiencies.
OKABE_ITO = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#D55E00",  # vermillion
    "#F0E442",  # yellow
    "#000000",  # black
)
IDLE_COLOR = "#EEEEEE"
#: One colour per model in every figure that tells the models apart by colour.
MODEL_COLORS = {"GLM 5.3": OKABE_ITO[0], "DeepSeek V4 Pro": OKABE_ITO[1], "Kimi K3": OKABE_ITO[2]}


def model_color(model: str, fallback: int = 0) -> str:
    """The colour of ``model`` (:data:`MODEL_COLORS`), else the palette's ``fallback``-th."""
    return MODEL_COLORS.get(model, OKABE_ITO[(3 + fallback) % len(OKABE_ITO)])


LIMIT_COLOR = "#D55E00"

STYLE: dict[str, object] = {
    "axes.prop_cycle": mpl.cycler(color=list(OKABE_ITO)),
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "font.size": 9,
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "savefig.bbox": "tight",
}

BUDGET_COLORS = {
    "A ring": OKABE_ITO[0],
    "B ring": OKABE_ITO[1],
    "epilogue": OKABE_ITO[2],
    "barriers": OKABE_ITO[7],
}


@contextlib.contextmanager
def style() -> Iterator[None]:
    """Apply the house style inside a ``with`` block only (rcParams are restored afterwards)."""
    with mpl.rc_context(STYLE):
        yield


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """PNG bytes of a figure (used by the widgets, which show images in an Output)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


# ---------------------------------------------------------------------------- occupancy
def _expert_cmap(experts: int) -> ListedColormap:
    """Idle is light grey; experts cycle through the palette (adjacent experts differ)."""
    colors = [OKABE_ITO[e % len(OKABE_ITO)] for e in range(max(experts, 1))]
    return ListedColormap([IDLE_COLOR, *colors])


def plot_occupancy_map(
    occ: Occupancy,
    mode: str = "grouped",
    ax: Axes | None = None,
    slots: int | None = None,
) -> Figure:
    """One SM x time map: each column is a wave, each row an SM, colour = the expert it computes.

    ``slots`` fixes the width of the time axis, so two maps drawn side by side share a scale.
    """
    with style():
        fig, ax = _axes(ax, (5.0, 3.2))
        grid = occ.occupancy_map(mode)
        width = max(slots or 0, grid.shape[1], 1)
        experts = len(occ.counts)
        ax.imshow(
            grid - IDLE,  # idle -> colour 0, expert e -> colour e + 1
            cmap=_expert_cmap(experts),
            vmin=0,
            vmax=experts,
            aspect="auto",
            interpolation="nearest",
            origin="lower",
            extent=(0, grid.shape[1], 0, grid.shape[0]),
        )
        ax.set_xlim(0, width)
        ax.set_ylim(0, grid.shape[0])
        ax.grid(False)
        ax.set_xlabel("time (waves)")
        ax.set_ylabel(f"SM (of {occ.gpu.sms})")
        launches = occ.naive_launches if mode == "naive" else occ.grouped_launches
        title = "naive loop" if mode == "naive" else "grouped GEMM"
        ax.set_title(
            f"{title}: {launches} launch{'es' if launches != 1 else ''}, "
            f"{occ.waves(mode)} waves, {occ.utilization(mode):.0%} busy"
        )
    return fig


def plot_occupancy_maps(occ: Occupancy, ax: Sequence[Axes] | None = None) -> Figure:
    """Naive per-expert loop (left) versus one grouped launch (right), on one time scale."""
    with style():
        if ax is None:
            fig = Figure(figsize=(9.0, 3.4), layout="constrained")
            axes = fig.subplots(1, 2, sharey=True)
        else:
            if len(ax) != 2:
                raise ValueError("plot_occupancy_maps needs two Axes: naive and grouped")
            axes = ax
            fig = axes[0].figure
        slots = max(occ.waves("naive"), occ.waves("grouped"))
        plot_occupancy_map(occ, "naive", axes[0], slots)
        plot_occupancy_map(occ, "grouped", axes[1], slots)
        axes[1].set_ylabel("")
        axes[1].legend(
            handles=[Patch(facecolor=IDLE_COLOR, edgecolor="#888888", label="idle SM")],
            loc="center right",
            frameon=True,
        )
        fig.suptitle(
            f"Wave model (no measurement): {sum(occ.counts)} rows over {len(occ.counts)} experts, "
            f"n={occ.n}, tile {occ.tile_m}x{occ.tile_n} ({occ.cta_group}-CTA) on {occ.gpu.name}; "
            "colour = expert",
            fontsize=10,
        )
    return fig


def plot_utilization_vs_tokens(
    models: str | Sequence[str] = "GLM 5.3",
    tokens: Sequence[int] = tuple(2**i for i in range(0, 13)),
    tiles: Sequence[tuple[int, int] | GemmConfig] = ((64, 64),),
    ep: int = 8,
    gpu: GpuSpec | str = B200,
    routing: str = "balanced",
    show_naive: bool = True,
    ax: Axes | None = None,
) -> Figure:
    """SM-time utilization against tokens per GPU: grouped (solid) and naive loop (dashed)."""
    models = [models] if isinstance(models, str) else list(models)
    gpu = get_gpu(gpu)
    with style():
        fig, ax = _axes(ax, (7.5, 3.6))
        color = 0
        for model in models:
            name = get_model(model).name
            for tile in tiles:
                occs = [
                    occupancy(make_problem(name, t, ep, routing), tile, gpu=gpu) for t in tokens
                ]
                first = occs[0]
                label_tile = f"{first.tile_m}x{first.tile_n}" + (
                    " 2-CTA" if first.cta_group == 2 else ""
                )
                c = OKABE_ITO[color % len(OKABE_ITO)]
                color += 1
                ax.plot(
                    tokens,
                    [o.utilization("grouped") for o in occs],
                    "-o",
                    color=c,
                    ms=3,
                    label=f"{name}, {label_tile}, grouped",
                )
                if show_naive:
                    ax.plot(
                        tokens,
                        [o.utilization("naive") for o in occs],
                        "--",
                        color=c,
                        label=f"{name}, {label_tile}, naive loop",
                    )
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("tokens per GPU")
        ax.set_ylabel("SM-time busy (wave model)")
        ax.set_title(f"SM utilization on {gpu.name} (wave model), EP={ep}, {routing} routing")
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


# ---------------------------------------------------------------------------- budgets
def plot_smem_budget(
    configs: Sequence[GemmConfig],
    gpu: GpuSpec | str | None = None,
    labels: Sequence[str] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Stacked shared-memory bars, one per config (ring depth resolved), with the per-block limit."""
    if not configs:
        raise ValueError("plot_smem_budget needs at least one config")
    if labels is not None and len(labels) != len(configs):
        raise ValueError(f"{len(labels)} labels for {len(configs)} configs")
    budgets = [smem_budget(resolve(c, gpu), gpu) for c in configs]
    names = list(budgets[0].as_dict())
    with style():
        fig, ax = _axes(ax, (1.6 + 1.5 * len(configs), 3.8))
        x = np.arange(len(configs))
        bottom = np.zeros(len(configs))
        for i, item in enumerate(names):
            kb = np.array([b.as_dict().get(item, 0) for b in budgets]) / 1024
            ax.bar(
                x,
                kb,
                0.6,
                bottom=bottom,
                label=item,
                color=BUDGET_COLORS.get(item, OKABE_ITO[i % len(OKABE_ITO)]),
            )
            bottom += kb
        for xi, b in zip(x, budgets, strict=True):
            entries = f"{b.config.ring_depth} ring entries"
            if b.config.b_k_tiles > 1:  # the B ring has its own, wider entries
                entries = f"{b.config.ring_depth} A + {b.config.b_ring_depth} B entries"
            ax.annotate(
                f"{b.total / 1024:.1f} KB\n{entries}",
                (xi, b.total / 1024),
                textcoords="offset points",
                xytext=(0, 3),
                ha="center",
                va="bottom",
                fontsize=7,
            )
        limits = {b.limit for b in budgets}
        for limit in sorted(limits):
            ax.axhline(
                limit / 1024,
                color=LIMIT_COLOR,
                ls="--",
                lw=1.2,
                label=f"per-block limit ({limit / 1024:.0f} KB, {budgets[0].gpu.name})",
            )
        ax.set_xticks(x, labels if labels is not None else [_short(b.config) for b in budgets])
        ax.set_ylabel("shared memory per CTA (KB)")
        ax.set_ylim(0, max(limits) / 1024 * 1.35)
        ax.grid(axis="x", visible=False)
        ax.legend(loc="upper center", ncol=3, fontsize=7)
        ax.set_title("Shared-memory budget (budget model; the compiled kernels match it)")
    return fig


def _short(config: GemmConfig) -> str:
    """Two-line tick label of a resolved config."""
    top = f"{config.tile_m}x{config.tile_n}x{config.tile_k} {config.cta_group}cta"
    bits = ["direct" if config.epilogue == "direct_store" else "TMA store"]
    if config.b_k_tiles > 1:
        bits.append(f"B={config.b_k_tiles} K tiles")
    return top + "\n" + ", ".join(bits)


def plot_tmem_map(config: GemmConfig, ax: Axes | None = None) -> Figure:
    """Accumulator buffers (and split slots) laid over the 512 TMEM columns of one SM (sm_100a)."""
    if config.arch != "sm_100a":
        raise ValueError(f"{config.arch} has no tensor memory; the TMEM map is for sm_100a")
    config = resolve(config)
    allocated = tmem_columns(config)
    total = B200.tmem_columns
    stage_cols = config.tile_n * config.acc_bytes // 4  # one fp32 accumulator column per n
    slot_cols = stage_cols // config.acc_slots
    with style():
        fig, ax = _axes(ax, (7.0, 1.5))
        ax.add_patch(
            Rectangle((0, 0), total, 1, facecolor="white", edgecolor="#888888", label="free")
        )
        if allocated > config.acc_buffers * stage_cols:
            ax.add_patch(
                Rectangle(
                    (0, 0),
                    allocated,
                    1,
                    facecolor="none",
                    edgecolor="#888888",
                    hatch="//",
                    label="allocated, unused",
                )
            )
        for stage in range(config.acc_buffers):
            for slot in range(config.acc_slots):
                start = stage * stage_cols + slot * slot_cols
                color = OKABE_ITO[(stage + 2 * slot) % len(OKABE_ITO)]
                name = f"acc buffer {stage}" + (f", slot {slot}" if config.acc_slots > 1 else "")
                ax.add_patch(
                    Rectangle(
                        (start, 0.08),
                        slot_cols,
                        0.84,
                        facecolor=color,
                        edgecolor="white",
                        lw=1.5,
                        label=name,
                    )
                )
                ax.text(
                    start + slot_cols / 2,
                    0.5,
                    f"{name}\ncols {start}-{start + slot_cols - 1}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
        ax.set_xlim(0, total)
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.set_xticks(range(0, total + 1, 64))
        ax.grid(False)
        ax.set_xlabel(f"TMEM column (of {total}; 128 lanes x 32 bit each)")
        split = ", split into 2 slots" if config.acc_slots == 2 else ""
        ax.set_title(
            f"TMEM budget model, {config.tile_m}x{config.tile_n} {config.cta_group}-CTA: "
            f"{config.acc_buffers} accumulator buffer(s){split}, {allocated} columns allocated",
            fontsize=9,
        )
    return fig


def plot_tmem_maps(configs: Sequence[GemmConfig]) -> Figure:
    """:func:`plot_tmem_map` of each config, stacked in one figure (one row per config)."""
    with style():
        fig = Figure(figsize=(7.0, 4.6), layout="constrained")
        axes = fig.subplots(len(configs), 1, squeeze=False)[:, 0]
        for config, ax in zip(configs, axes, strict=True):
            plot_tmem_map(config, ax=ax)
    return fig


def plot_config_budget(config: GemmConfig, gpu: GpuSpec) -> Figure:
    """One resolved config's shared-memory bar (:func:`plot_smem_budget`) and, on sm_100a, its TMEM
    map (:func:`plot_tmem_map`) below it: the picture of :class:`pearl_moe.course.widgets.SmemBudgetExplorer`."""
    has_tmem = config.arch == "sm_100a"
    fig = Figure(figsize=(7.5, 4.6 if has_tmem else 3.6), layout="constrained")
    if has_tmem:
        top, bottom = fig.subfigures(2, 1, height_ratios=[3, 1.2])
        plot_smem_budget([config], gpu, ax=top.add_subplot())
        plot_tmem_map(config, ax=bottom.add_subplot())
    else:
        plot_smem_budget([config], gpu, ax=fig.add_subplot())
    return fig


# ---------------------------------------------------------------------------- latency
def _source_label(impl: str, measured_on: str | None | Mapping[str, str | None]) -> str:
    where = measured_on.get(impl) if isinstance(measured_on, Mapping) else measured_on
    return f"{impl} (measured on {where})" if where else f"{impl} (modeled)"


def plot_latency_vs_tokens(
    series: Mapping[str, Sequence[tuple[float, float]]],
    floor: Sequence[tuple[float, float]] | None = None,
    measured_on: str | None | Mapping[str, str | None] = None,
    title: str = "",
    ax: Axes | None = None,
    floor_label: str = "floor (modeled)",
) -> Figure:
    """Latency (us) against tokens per GPU, one line per implementation, and the floor.

    ``series`` maps an implementation to ``(tokens, seconds)`` points. ``measured_on`` says where
    the numbers come from: a GPU name (every curve "measured on <GPU>", said once as the legend's
    title), ``None`` (every curve "modeled", said the same way), or a dict giving that per
    implementation (then each legend entry says it). ``floor_label`` names the floor's source: a
    model, or ("floor (from measured ceilings)") the ceilings a run measured.
    """
    uniform = not isinstance(measured_on, Mapping)
    if not uniform:
        missing = set(series) - set(measured_on)
        if missing:
            raise ValueError(f"measured_on does not say where {sorted(missing)} come from")
    with style():
        fig, ax = _axes(ax, (6.0, 3.8))
        for impl, points in series.items():
            if not points:
                raise ValueError(f"no points for {impl!r}")
            t, s = zip(*sorted(points), strict=True)
            where = measured_on if uniform else measured_on.get(impl)
            label = impl if uniform else _source_label(impl, measured_on)
            ax.plot(t, np.array(s) * 1e6, "-" if where else ":", marker="o", ms=3, label=label)
        if floor:
            t, s = zip(*sorted(floor), strict=True)
            ax.plot(t, np.array(s) * 1e6, color="#555555", lw=2, ls="--", label=floor_label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens per GPU")
        ax.set_ylabel("latency (us)")
        if title:
            ax.set_title(title)
        ax.legend(title=source_title(measured_on))
    return fig


def source_title(measured_on) -> str | None:
    """The legend title that says once where every curve comes from (None when they differ)."""
    if isinstance(measured_on, Mapping):
        return None
    return f"measured on {measured_on}" if measured_on else "modeled"


def plot_latency_panels(
    panels: Mapping[str, Mapping],
    title: str,
    floor_label: str = "floor (modeled)",
    figsize: tuple[float, float] = (12, 4.4),
) -> Figure:
    """:func:`plot_latency_vs_tokens` side by side, one panel per key of ``panels`` (its title),
    whose value holds that panel's ``series``, ``floor`` and ``measured_on``; one legend below
    them all (the first panel's entries) and ``title`` over the figure."""
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, panel) in zip(axes, panels.items(), strict=True):
        plot_latency_vs_tokens(**panel, title=name, ax=ax, floor_label=floor_label)
        ax.get_legend().remove()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=7)
    fig.suptitle(title)
    return fig


# ---------------------------------------------------------------------------- roofline
def plot_roofline(roofs=None, points=None, ax: Axes | None = None) -> Figure:
    """Attainable FLOP/s against arithmetic intensity (log-log) for each roof, with the MoE shapes.

    ``roofs``: :class:`pearl_moe.model.roofline.Roof` list (default: B200 and H200 datasheets, H200
    measured); ``points``: :class:`~pearl_moe.model.roofline.RooflinePoint` list (default: the three
    models at 16/64/256 and 4096 tokens per GPU). Derived numbers only: no kernel was timed.
    """
    from ..model import roofline

    roofs = roofs if roofs is not None else roofline.roofs()
    points = points if points is not None else roofline.points()
    with style():
        fig, ax = _axes(ax, (7.2, 5.0))
        lo = min([0.5] + [p.intensity / 2 for p in points])
        hi = max([4000.0] + [p.intensity * 2 for p in points])
        x = np.geomspace(lo, hi, 200)
        ymin = min(lo * r.bytes_per_s for r in roofs) / 1e12
        for i, roof in enumerate(roofs):
            color = ("#333333", OKABE_ITO[0], OKABE_ITO[4], OKABE_ITO[5])[i % 4]
            ls = "-" if roof.source == "datasheet" else "--"
            y = np.minimum(roof.flops_per_s, x * roof.bytes_per_s) / 1e12
            ax.plot(x, y, ls, color=color, lw=1.6, label=roof.label())
            # each ridge is a labeled line: where that roof turns from bandwidth to compute
            ax.axvline(roof.ridge, color=color, lw=0.8, ls=":")
            ax.text(
                roof.ridge * 1.03, ymin * 1.2 * 2.2**i, f"ridge {roof.ridge:.0f} FLOP/B",
                fontsize=6.5, color=color, va="bottom", ha="left",
            )  # fmt: skip
        models = list(dict.fromkeys(p.model for p in points))
        markers = {"decode": "o", "prefill": "s"}
        top = roofs[0]
        for p in points:
            c = model_color(p.model, models.index(p.model))
            y = top.attainable(p.intensity) / 1e12
            ax.plot(p.intensity, y, markers[p.phase], color=c, ms=6, mec="black", mew=0.5)
        # one label per token count, above its group of points (the models sit close together)
        for tokens in sorted({p.tokens_per_gpu for p in points}):
            group = [p for p in points if p.tokens_per_gpu == tokens]
            xs = [p.intensity for p in group]
            ys = [top.attainable(p.intensity) / 1e12 for p in group]
            ax.annotate(
                f"{tokens} tok/GPU",
                (float(np.exp(np.mean(np.log(xs)))), max(ys)),
                textcoords="offset points", xytext=(0, 9), ha="center", fontsize=7,
                color="#333333",
            )  # fmt: skip
        handles, labels = ax.get_legend_handles_labels()
        for m in models:
            c = model_color(m, models.index(m))
            handles.append(
                mpl.lines.Line2D([], [], marker="o", ls="", color=c, mec="black", mew=0.5)
            )
            labels.append(m)
        for phase, marker in markers.items():
            if any(p.phase == phase for p in points):
                handles.append(
                    mpl.lines.Line2D([], [], marker=marker, ls="", color="white", mec="black")
                )
                labels.append(phase)
        # below the axes: inside, the roofs' long labels would cover the points
        ax.legend(handles, labels, fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.14),
                  ncol=2, frameon=False)  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP per byte that must move)")
        ax.set_ylabel("attainable bf16 TFLOP/s")
        ax.set_title(
            "Roofline, derived (datasheets, H200 measured ceilings; points on the first roof)",
            fontsize=9,
        )
    return fig


# ---------------------------------------------------------------------------- latency model
def plot_calibration(rows, ax: Axes | None = None, tolerance: float = 0.10) -> Figure:
    """Modeled against measured latency (log-log) for the rows of :func:`pearl_moe.model.calibrate.evaluate`:
    one marker per H200 record, colour = kernel stage, with y = x and the +-tolerance band."""
    with style():
        fig, ax = _axes(ax, (5.4, 4.6))
        meas = np.array([r["measured_s"] for r in rows]) * 1e6
        model = np.array([r["modeled_s"] for r in rows]) * 1e6
        lo, hi = min(meas.min(), model.min()) / 1.3, max(meas.max(), model.max()) * 1.3
        x = np.geomspace(lo, hi, 50)
        ax.plot(x, x, color="#555555", lw=1)
        ax.fill_between(x, x * (1 - tolerance), x * (1 + tolerance), color="#DDDDDD", lw=0)
        stages = sorted({r["stage"] for r in rows})
        kinds = {"stages": ("o", ""), "stage_sweep": ("^", ", depth sweep"),
                 "ablation": ("s", ", ablation")}  # fmt: skip
        for i, st in enumerate(stages):
            sel = np.array([r["stage"] == st for r in rows])
            for kind in dict.fromkeys(r["kind"] for r in rows):
                marker, extra = kinds.get(kind, ("D", f", {kind}"))
                mask = sel & np.array([r["kind"] == kind for r in rows])
                if mask.any():
                    ax.plot(
                        meas[mask], model[mask], marker, ls="", ms=4, mfc="none" if marker == "s" else None,
                        color=OKABE_ITO[i % len(OKABE_ITO)], label=f"stage {st}{extra}",
                    )  # fmt: skip
        errors = model / meas - 1
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured on the H200 (us)")
        ax.set_ylabel("modeled (us)")
        ax.legend(loc="upper left", fontsize=6, ncol=2)
        ax.set_title(
            f"Latency model vs H200 measurements: {len(rows)} records, largest error "
            f"{np.abs(errors).max():.0%} (band: +-{tolerance:.0%})",
            fontsize=9,
        )
    return fig


def plot_stage_projection(
    projections: Mapping[str, Mapping[int, float]],
    floors: Mapping[str, float] | None = None,
    gpu: str = "B200",
    ax: Axes | None = None,
    note: str = "",
) -> Figure:
    """Grouped bars of modeled latency per stage: ``projections[shape][stage] = seconds``.

    Each shape's bars are drawn against that shape's own floor (dashed), as multiples of it, so
    shapes of different sizes share one axis. Every bar is modeled: the title says so. ``note``
    (e.g. :func:`pearl_moe.model.calibrate.trust_note`) goes on a second title line.
    """
    shapes = list(projections)
    stages = sorted({s for v in projections.values() for s in v})
    with style():
        fig, ax = _axes(ax, (7.6, 3.6))
        width = 0.8 / max(len(stages), 1)
        for j, st in enumerate(stages):
            ys = []
            for shape in shapes:
                t = projections[shape].get(st)
                ys.append(t / floors[shape] if (floors and t) else (t or 0) * 1e6)
            xs = np.arange(len(shapes)) + (j - (len(stages) - 1) / 2) * width
            ax.bar(xs, ys, width * 0.95, color=OKABE_ITO[j % len(OKABE_ITO)], label=f"stage {st}",
                   hatch="//")  # fmt: skip
        if floors:
            ax.axhline(1.0, color="#555555", ls="--", lw=1.2, label="floor of each shape")
            ax.set_ylabel("modeled latency / floor")
        else:
            ax.set_ylabel("modeled latency (us)")
        ax.set_xticks(np.arange(len(shapes)), shapes, fontsize=7)
        ax.grid(axis="x", visible=False)
        ax.legend(ncol=len(stages) + 1, fontsize=7, loc="upper left")
        title = (
            f"{gpu}, modeled (pearl_moe.model.perfmodel, not a measurement): stages side by side"
        )
        ax.set_title(title + (f"\n{note}" if note else ""), fontsize=9 if note else None)
    return fig


def plot_ring_depth_sweep(
    series: Mapping[str, Sequence[tuple[int, float]]],
    floor: float | None = None,
    gpu: str = "B200",
    title: str = "",
    ax: Axes | None = None,
) -> Figure:
    """Modeled latency against ring depth, one line per configuration: ``series[label] =
    [(ring_depth, seconds), ...]`` from :func:`pearl_moe.model.perfmodel.predict`. Titled as modeled."""
    with style():
        fig, ax = _axes(ax, (6.0, 3.4))
        for i, (label, points) in enumerate(series.items()):
            d, t = zip(*sorted(points), strict=True)
            ax.plot(d, np.array(t) * 1e6, ":o", ms=4, color=OKABE_ITO[i % len(OKABE_ITO)],
                    label=label)  # fmt: skip
        if floor:
            ax.axhline(floor * 1e6, color="#555555", ls="--", label="floor (datasheet)")
        ax.set_xlabel("ring depth (A/B entries per SM)")
        ax.set_ylabel("latency (us)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
        ax.set_title(
            f"{gpu}, modeled (pearl_moe.model.perfmodel, not a measurement)"
            + (f": {title}" if title else ""),
            fontsize=9,
        )
    return fig


def plot_ring_depth_marked(
    points: Sequence[tuple[int, float]],
    depth: int,
    seconds: float,
    floor: float,
    label: str,
    title: str,
) -> Figure:
    """Modeled latency against ring depth (``points``: ``(depth, seconds)``) with the chosen
    ``depth`` circled at ``seconds`` and the ``floor`` dashed: the picture of
    :class:`pearl_moe.course.widgets.LatencyExplorer`."""
    depths = [d for d, _ in points]
    times = [t for _, t in points]
    with style():
        fig = Figure(figsize=(6.4, 3.4), layout="constrained")
        ax = fig.add_subplot()
        ax.plot(depths, [t * 1e6 for t in times], ":o", color=OKABE_ITO[1], ms=4, label=label)
        ax.plot([depth], [seconds * 1e6], "o", ms=10, mfc="none", color=OKABE_ITO[5],
                label="this ring depth")  # fmt: skip
        ax.axhline(floor * 1e6, color="#555555", ls="--", label="floor")
        ax.set_xlabel("ring depth (A/B entries in flight per SM)")
        ax.set_ylabel("latency (us)")
        ax.set_ylim(0, max(times) * 1.1e6)
        ax.legend(fontsize=7)
        ax.set_title(title, fontsize=9)
    return fig


# ---------------------------------------------------------------------------- benchmarks
def plot_ablation_steps(
    cells: Sequence[Mapping], step_labels: Mapping[str, str], title: str = ""
) -> Figure:
    """Stage-to-stage time ratios per model and token count, one panel per model.

    ``cells``: dicts with ``model``, ``tokens``, ``step`` (a key of ``step_labels``), ``ratio``
    (paired trimmed geomean) and ``lo`` / ``hi`` (range of the per-round ratios), as
    :func:`pearl_moe.bench.compare.ablation_summary` gives them. Bars below 1: the stage is faster.
    """
    models = list(dict.fromkeys(c["model"] for c in cells))
    tokens = sorted({c["tokens"] for c in cells})
    steps = list(step_labels)
    with style():
        fig = Figure(figsize=(10.5, 3.5), layout="constrained")
        axes = fig.subplots(1, len(models), sharey=True, squeeze=False)[0]
        width = 0.8 / max(len(steps), 1)
        for ax, model in zip(axes, models, strict=True):
            for j, step in enumerate(steps):
                xs, ys, err = [], [], [[], []]
                for i, t in enumerate(tokens):
                    c = next(
                        (c for c in cells
                         if c["model"] == model and c["tokens"] == t and c["step"] == step),
                        None,
                    )  # fmt: skip
                    if c is None:
                        continue
                    xs.append(i + (j - (len(steps) - 1) / 2) * width)
                    ys.append(c["ratio"])
                    err[0].append(max(c["ratio"] - c["lo"], 0))
                    err[1].append(max(c["hi"] - c["ratio"], 0))
                ax.bar(xs, ys, width * 0.9, color=OKABE_ITO[j % len(OKABE_ITO)],
                       label=step_labels[step], yerr=err, capsize=2,
                       error_kw={"elinewidth": 0.8, "ecolor": "#333333"})  # fmt: skip
            ax.axhline(1.0, color="#555555", lw=1, ls="--")
            ax.set_xticks(range(len(tokens)), [str(t) for t in tokens])
            ax.set_xlabel("tokens per GPU")
            ax.set_title(model, fontsize=9)
            ax.grid(axis="x", visible=False)
        axes[0].set_ylabel("time / previous stage (<1: faster)")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=len(steps), fontsize=7)
        if title:
            fig.suptitle(title, fontsize=9)
    return fig


def plot_vs_floor(
    rows: Sequence[Mapping], impls: Mapping[str, str], title: str = "", ylabel: str = ""
) -> Figure:
    """Latency / floor of each implementation on each shape, one panel per model.

    ``rows``: dicts with ``model``, ``shape`` (x label, e.g. ``"64"`` or ``"64 skewed"``), ``impl``
    (a key of ``impls``, whose value is the legend label) and ``ratio`` (time / floor of the
    shape). 1 is the floor; lower is faster. Missing bars: that implementation did not run there.
    """
    models = list(dict.fromkeys(r["model"] for r in rows))
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    names = [i for i in impls if any(r["impl"] == i for r in rows)]
    with style():
        fig = Figure(figsize=(11, 3.6), layout="constrained")
        axes = fig.subplots(1, len(models), sharey=True, squeeze=False)[0]
        width = 0.84 / max(len(names), 1)
        for ax, model in zip(axes, models, strict=True):
            for j, impl in enumerate(names):
                xs, ys = [], []
                for i, shape in enumerate(shapes):
                    r = next(
                        (r for r in rows
                         if r["model"] == model and r["shape"] == shape and r["impl"] == impl),
                        None,
                    )  # fmt: skip
                    if r is not None:
                        xs.append(i + (j - (len(names) - 1) / 2) * width)
                        ys.append(r["ratio"])
                ax.bar(xs, ys, width * 0.92, color=OKABE_ITO[j % len(OKABE_ITO)],
                       label=impls[impl], edgecolor="black" if j == 0 else None,
                       linewidth=0.6 if j == 0 else 0)  # fmt: skip
            ax.axhline(1.0, color="#555555", lw=1.2, ls="--")
            ax.set_xticks(range(len(shapes)), shapes, fontsize=7)
            ax.set_xlabel("tokens per GPU")
            ax.set_title(model, fontsize=9)
            ax.set_ylim(0.8, max(r["ratio"] for r in rows) * 1.04)
            ax.grid(axis="x", visible=False)
        axes[0].set_ylabel(ylabel or "latency / floor (1 = floor; lower is faster)")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=len(names), fontsize=7)
        if title:
            fig.suptitle(title, fontsize=9)
    return fig


def plot_pct_of_floor(
    panels: Mapping[str, Mapping[str, Sequence[tuple[float, float]]]], title: str = ""
) -> Figure:
    """Percent of the floor (floor / time) against tokens per GPU, one panel per model:
    ``panels[model][impl] = [(tokens, percent), ...]``, 100% dashed. Drawn in matplotlib's own
    style (the committed ``bench_pct_of_floor`` figure is), not :data:`STYLE`."""
    fig = Figure(figsize=(10, 3.4), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (model, series) in zip(axes, panels.items(), strict=True):
        for impl, pts in series.items():
            t, p = zip(*sorted(pts), strict=True)
            ax.plot(t, p, marker="o", ms=3, label=impl)
        ax.axhline(100, color="#555555", ls="--", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("tokens per GPU")
    axes[0].set_ylabel("% of floor (floor / time)")
    axes[-1].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return fig


# ---------------------------------------------------------------------------- stage notebooks
def plot_stage_ratios(panels, baseline: str, title: str):
    """One panel per model: each line a multiple of the baseline's time against tokens per GPU
    (``panels[model][label] = [(tokens, ratio), ...]``), log-log, the baseline dashed at 1."""
    with style():
        fig = Figure(figsize=(10.0, 3.3), layout="constrained")
        axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
        for ax, (model, lines) in zip(axes, panels.items(), strict=True):
            ax.axhline(1.0, color="#555555", ls="--", lw=1, label=baseline)
            ticks = set()
            for i, (label, pts) in enumerate(lines.items()):
                if pts:
                    tokens, ratios = zip(*pts, strict=True)
                    ticks.update(tokens)
                    ax.plot(tokens, ratios, "-o", ms=3.5, color=OKABE_ITO[i], label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log", base=2)
            ax.set_xticks(sorted(ticks), labels=[str(t) for t in sorted(ticks)], fontsize=7)
            ax.set_yticks([0.5, 0.7, 1, 1.4, 2], labels=["0.5", "0.7", "1", "1.4", "2"])
            ax.minorticks_off()
            ax.set_title(model, fontsize=9)
            ax.set_xlabel("tokens per GPU")
        axes[0].set_ylabel("time / stage-1 loop time")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=7)
        fig.suptitle(title, fontsize=9)
    return fig


def plot_ring_sweep(series, floor_s: float | None, gpu: str, source: str, title: str = ""):
    """Measured latency against ring depth, one line per tile shape (``series[label] = [(ring
    depth, seconds), ...]``), with the floor dashed; ``gpu`` and ``source`` come from the data."""
    with style():
        fig = Figure(figsize=(6.4, 3.4), layout="constrained")
        ax = fig.add_subplot()
        for i, (label, pts) in enumerate(series.items()):
            d, t = zip(*sorted(pts), strict=True)
            ax.plot(d, [s * 1e6 for s in t], "-o", ms=4, color=OKABE_ITO[i], label=label)
        if floor_s:
            ax.axhline(floor_s * 1e6, color="#555555", ls="--", label="floor (run's read ceiling)")
        ax.set_xlabel("ring depth (A/B entries per SM)")
        ax.set_ylabel("latency (us)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, title=f"measured on {gpu}", title_fontsize=7)
        ax.set_title(f"{title}\n{source}" if title else source, fontsize=8)
    return fig


def plot_stage_sweep(
    measured: Sequence[tuple[int, float]] | Mapping[str, Sequence[tuple[int, float]]] | None,
    modeled: Mapping[str, Sequence[tuple[int, float]]],
    measured_label: str,
    measured_floor: float | None = None,
    modeled_floor: float | None = None,
    measured_gpu: str = "H200",
    modeled_gpu: str = "B200",
    title: str = "",
):
    """Latency against ring depth: measured (left) and modeled (right), never mixed.

    ``measured`` is ``(ring entries, seconds)`` points (or a dict of labelled series), ``None`` when
    nothing is recorded; ``modeled`` maps a label to ``(ring entries, seconds)`` points from
    :func:`pearl_moe.model.perfmodel.predict`. Floors are drawn as dashed lines.
    """
    with style():
        fig = Figure(figsize=(10.0, 3.8), layout="constrained")
        ax_m, ax_p = fig.subplots(1, 2)
        series = measured if isinstance(measured, Mapping) else {"stage 3": measured or []}
        drew = False
        for i, (label, points) in enumerate(series.items()):
            if points:
                s, t = zip(*sorted(points), strict=True)
                ax_m.plot(s, np.array(t) * 1e6, "-o", ms=4, color=OKABE_ITO[i], label=label)
                drew = True
        if not drew:
            ax_m.text(
                0.5, 0.5, "no recorded measurement yet", ha="center", va="center",
                transform=ax_m.transAxes, color="#555555",
            )  # fmt: skip
        if measured_floor and drew:
            ax_m.axhline(measured_floor * 1e6, color="#555555", ls="--", label="floor")
        ax_m.set_title(f"{measured_gpu}, measured: {measured_label}", fontsize=8)
        for i, (label, points) in enumerate(modeled.items()):
            s, t = zip(*sorted(points), strict=True)
            ax_p.plot(s, np.array(t) * 1e6, ":o", ms=4, color=OKABE_ITO[i], label=label)
        if modeled_floor:
            ax_p.axhline(modeled_floor * 1e6, color="#555555", ls="--", label="floor (modeled)")
        ax_p.set_title(
            f"{modeled_gpu}, modeled (pearl_moe.model.perfmodel, not a measurement)", fontsize=8
        )
        for ax in (ax_m, ax_p):
            ax.set_xlabel("ring depth (A/B ring entries)")
            ax.set_ylabel("latency (us)")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        if title:
            fig.suptitle(title, fontsize=10)
    return fig


def _bar_parts(bar) -> tuple[str, float | None, str, float | None]:
    if len(bar) == 3:
        label, value, source = bar
        return label, value, source, None
    label, value, source, floor = bar
    return label, value, source, floor


def plot_latency_bars(
    bars: Sequence[tuple],
    floor: float | None = None,
    title: str = "",
):
    """Horizontal latency bars, each against the floor of its own GPU, one panel per GPU.

    A label that starts with a GPU's name ("H200: stage 1 ...", "B200 stage 4: ...") puts its bar
    in that GPU's panel, so measured and modeled GPUs never share an axis. ``bars`` are ``(label, seconds or None, source)`` or ``(label, seconds or None, source,
    floor_seconds)``. A source containing "modeled" draws the bar hatched (a model, not a
    measurement). Each bar's floor is a dark tick across that bar's row, and the bar says which
    fraction of its floor it reaches. ``floor`` is the floor of bars that give none (use it only
    when every such bar is on the same GPU). A missing value (None) is an empty row that says why.
    The sources are listed once under the title; when any bar is modeled the title says so, and
    a last title line says how close the model comes to the H200's measurements
    (:func:`pearl_moe.model.calibrate.trust_note`).
    """
    parts = [_bar_parts(b) for b in bars]
    # one panel per GPU: a measured H200 bar and a modeled B200 bar never share an axis
    panels: dict[str, list[int]] = {}
    for i, (label, *_rest) in enumerate(parts):
        head = label.split()[0].rstrip(":") if label.split() else ""
        panels.setdefault(head if head in _GPU_NAMES else "", []).append(i)
    floors = [f if f is not None else floor for *_, f in parts]
    sources: list[str] = []
    with style():
        fig = Figure(
            figsize=(8.0, 0.5 * len(parts) + 1.2 + 0.7 * len(panels)), layout="constrained"
        )
        axes = fig.subplots(
            len(panels), 1, squeeze=False, height_ratios=[len(v) for v in panels.values()]
        )[:, 0]
        for ax, (gpu, rows) in zip(axes, panels.items(), strict=True):
            y = np.arange(len(rows))[::-1]
            values = [parts[i][1] for i in rows if parts[i][1]]
            top = max(values + [floors[i] for i in rows if floors[i]] + [0.0]) * 1e6 or 1.0
            kinds = set()
            for yi, i in zip(y, rows, strict=True):
                _label, value, source, _ = parts[i]
                own_floor = floors[i]
                modeled = "modeled" in source
                if value:
                    kinds.add("modeled" if modeled else "measured")
                    if source not in sources:
                        sources.append(source)
                    ax.barh(
                        yi, value * 1e6, 0.6, color=OKABE_ITO[1] if modeled else OKABE_ITO[0],
                        hatch="//" if modeled else "", edgecolor="white",
                    )  # fmt: skip
                    reach = f", {own_floor / value:.0%} of its floor" if own_floor else ""
                    kind = "modeled" if modeled else "measured"
                    ax.text(
                        max(value, own_floor or 0) * 1e6, yi,
                        f"  {value * 1e6:.0f} us ({kind}){reach}", va="center", fontsize=7,
                    )  # fmt: skip
                else:
                    ax.text(0, yi, f" {source}", va="center", fontsize=7, color="#555555")
                if own_floor:
                    ax.plot([own_floor * 1e6] * 2, [yi - 0.42, yi + 0.42], color="#222222", lw=2.2)
            ax.set_yticks(y, [parts[i][0] for i in rows])
            ax.set_xlim(0, top * 1.75)
            ax.set_xlabel("latency (us)")
            ax.grid(axis="y", visible=False)
            if gpu:
                ax.set_ylabel(f"{gpu}: {' and '.join(sorted(kinds)) or 'no value'}", fontsize=8)
        any_model = any("modeled" in s for s in sources)
        handles = [Patch(color=OKABE_ITO[0], label="measured")]
        if any_model:
            handles.append(Patch(facecolor=OKABE_ITO[1], hatch="//", label="model"))
        if any(floors):
            handles.append(Line2D([], [], color="#222222", lw=2.2, label="floor of that bar's GPU"))
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=7)
        if any_model and "model" not in title.lower():
            title = f"{title}{': ' if title else ''}measured and model (hatched), one panel per GPU"
        named = [s for s in sources if "modeled" not in s]
        check = ""
        if any_model:
            from ..model.calibrate import decode_prefill_errors, trust_note

            named.append("model: pearl_moe.model.perfmodel, not a measurement")
            check = trust_note(decode_prefill_errors())
        heading = "\n".join(filter(None, [title, "; ".join(named), check]))
        if heading:
            axes[0].set_title(heading, fontsize=9)
    return fig


#: Labels that start with one of these name the GPU of their bar (one panel each).
_GPU_NAMES = ("H200", "H100", "B200", "B300", "GB200", "GB300")


def plot_recorded_vs_tokens(
    series: Mapping[str, Sequence[tuple[float, float]]],
    floor: Sequence[tuple[float, float]] | None,
    gpu: str,
    source: str,
    title: str = "",
):
    """Latency against tokens per GPU of recorded (or live) runs, the source said once.

    :func:`pearl_moe.course.plots.plot_latency_vs_tokens` with short legend entries ("stage 2", the legend
    titled "measured on H200") and the long source ("replayed from results/... (measured <date> on <GPU>)") as a
    second title line, so the legend stays inside the plot and the axes keep their width.
    """
    heading = f"{title}\n{source}" if title else source
    fig = plot_latency_vs_tokens(series, floor=floor, measured_on=gpu, title=heading)
    ax = fig.axes[0]
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, loc="upper left", title=source_title(gpu), title_fontsize=7)
    return fig


def say_model(fig, what: str = "model"):
    """Prefix ``fig``'s title (its suptitle, else each axes title) with ``what``: a figure drawn
    from a model (occupancy, budget, latency) says so where a reader looks first."""
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None and suptitle.get_text():
        if what.lower() not in suptitle.get_text().lower():
            suptitle.set_text(f"{what}: {suptitle.get_text()}")
        return fig
    for ax in fig.axes:
        text = ax.get_title()
        if text and what.lower() not in text.lower():
            ax.set_title(f"{what}: {text}")
    return fig


# ---------------------------------------------------------------------------- stage notebooks
def _stage_label(stage: int, config) -> str:
    extra = []
    if config.epilogue == "direct_store":
        extra.append(f"direct {config.direct_store_bits}-bit")
    else:
        extra.append("TMA store")
    if config.b_k_tiles > 1:
        extra.append(f"B entry = {config.b_k_tiles} K tiles")
    if config.acc_slots == 2:
        extra.append("split accumulator")
    return (
        f"stage {stage}\n{config.tile_m}x{config.tile_n}x{config.tile_k} {config.cta_group}-CTA\n"
        + ", ".join(extra)
    )


def plot_stage_budgets(stages, configs: Mapping | None = None):
    """Budget model of some stages' ladder configurations on both GPUs, side by side.

    Top: stacked shared-memory bars per CTA, B200 (sm_100a) left and H200 (sm_90a) right, one bar
    per stage (:func:`pearl_moe.course.plots.plot_smem_budget`). Below: the TMEM column map of each
    stage's B200 configuration (:func:`pearl_moe.course.plots.plot_tmem_map`). ``configs`` maps ``(arch,
    stage)`` to a configuration to draw instead of the ladder's
    (:func:`pearl_moe.kernels.ladder.stage_config`, deepest ring that fits).
    """
    from ..kernels.ladder import stage_config

    stages = list(stages)
    configs = dict(configs or {})

    def cfg(arch, s):
        return resolve(configs.get((arch, s)) or stage_config(arch, s))

    with style():
        fig = Figure(figsize=(10.0, 4.2 + 1.3 * len(stages)), layout="constrained")
        top, bottom = fig.subfigures(2, 1, height_ratios=[4.2, 1.3 * len(stages)])
        axes = top.subplots(1, 2)
        for ax, arch, gpu in zip(axes, ("sm_100a", "sm_90a"), ("B200", "H200"), strict=True):
            chosen = [cfg(arch, s) for s in stages]
            plot_smem_budget(
                chosen,
                gpu,
                labels=[_stage_label(s, c) for s, c in zip(stages, chosen, strict=True)],
                ax=ax,
            )
            ax.set_title(f"{gpu} ({arch}): shared memory per CTA, budget model", fontsize=9)
            ax.tick_params(axis="x", labelsize=7)
        maps = bottom.subplots(len(stages), 1, squeeze=False)[:, 0]
        for ax, s in zip(maps, stages, strict=True):
            plot_tmem_map(cfg("sm_100a", s), ax=ax)
            ax.set_title(f"stage {s}, B200: {ax.get_title()}", fontsize=8)
            if s != stages[-1]:
                ax.set_xlabel("")
        fig.suptitle(
            "Budget model (the compiled kernels are checked against it below): "
            + ", ".join(f"stage {s}" for s in stages),
            fontsize=10,
        )
    return fig


def same_tiles(before, after, problems: Sequence, gpu="B200") -> str:
    """Say (and check) that ``after`` lands its tiles as ``before`` does on every problem: the
    same tile count in the same rounds, so a stage that keeps its predecessor's tile has no new
    wave map to draw. Raises ``ValueError`` where the two differ (draw the maps there)."""
    gpu = get_gpu(gpu)
    lines = []
    for p in problems:
        a, b = occupancy(p, before, gpu=gpu), occupancy(p, after, gpu=gpu)
        if (a.total_tiles, a.waves(), a.wave_fractions()) != (
            b.total_tiles,
            b.waves(),
            b.wave_fractions(),
        ):
            raise ValueError(f"{p.label()}: the tiles land differently; draw the wave maps")
        lines.append(
            f"{p.label()}: {b.total_tiles} tiles in {b.waves()} round(s) on {gpu.sms} SMs, "
            f"last round {b.wave_fractions()[-1]:.0%} busy, as before"
        )
    return "\n".join(lines)


def plot_stage_occupancy(configs: Mapping, problems: Sequence, gpu="B200"):
    """Where a persistent kernel's tiles land: one SM x time map per (configuration, problem).

    ``configs`` maps a row label to a :class:`~pearl_moe.config.GemmConfig` (its tile and
    ``cta_group``); ``problems`` are :class:`~pearl_moe.workloads.GroupedProblem` (columns). A
    persistent CTA takes tiles ``c, c + SMs, ...``, so column ``r`` of a map is the ``r``-th round
    of tiles: the wave model of :mod:`pearl_moe.model.occupancy`, titled as a model. The maps of one
    problem (a column) share one time axis.
    """
    gpu = get_gpu(gpu)
    labels = list(configs)
    occs = [[occupancy(p, configs[label], gpu=gpu) for p in problems] for label in labels]
    slots = [max(row[j].waves() for row in occs) for j in range(len(problems))]
    with style():
        fig = Figure(figsize=(3.4 * len(problems), 2.3 * len(labels) + 0.8), layout="constrained")
        axes = fig.subplots(len(labels), len(problems), squeeze=False, sharex="col", sharey=True)
        for i, label in enumerate(labels):
            for j, problem in enumerate(problems):
                occ = occs[i][j]
                ax = axes[i][j]
                plot_occupancy_map(occ, "grouped", ax, slots[j])
                last = occ.wave_fractions()[-1] if occ.waves() else 0.0
                meta = problem.meta
                ax.set_title(
                    f"{label}\n{meta.get('model', problem.name)}, {meta.get('tokens_per_gpu', '?')} "
                    f"tok: {occ.total_tiles} tiles, {occ.waves()} round(s), last {last:.0%} busy",
                    fontsize=7,
                )
                ax.set_xlabel("time (rounds of tiles)" if i == len(labels) - 1 else "")
                if j:
                    ax.set_ylabel("")
        fig.legend(
            handles=[Patch(facecolor=IDLE_COLOR, edgecolor="#888888", label="idle SM")],
            loc="outside lower center",
            fontsize=7,
        )
        fig.suptitle(
            f"Wave model (no measurement): tiles of a persistent kernel on the {gpu.name} "
            f"({gpu.sms} SMs); colour = expert",
            fontsize=10,
        )
    return fig


def plot_ablation_step(step: Mapping | None):
    """A measured step, shape by shape: the paired ratio stage N / stage N - 1 (dot) and the range of
    its per-round ratios (bar), one colour per model, tokens per GPU along x; 1 = no change.

    ``step`` is :func:`~pearl_moe.course.measurements.ablation_step`; its source is the second title
    line. Without a step the axes say there is no recorded measurement.
    """
    with style():
        fig = Figure(figsize=(7.6, 3.6), layout="constrained")
        ax = fig.add_subplot()
        if not step:
            ax.text(
                0.5, 0.5, "no recorded measurement yet", ha="center", va="center",
                transform=ax.transAxes, color="#555555",
            )  # fmt: skip
            return fig
        rows = [r for r in step["rows"] if "ratio" in r]
        models = list(dict.fromkeys(r["model"] for r in rows))
        tokens = sorted({r["tokens"] for r in rows})
        width = 0.6 / max(len(models), 1)
        for i, model in enumerate(models):
            mine = [r for r in rows if r["model"] == model]
            x = (
                np.array([tokens.index(r["tokens"]) for r in mine])
                + (i - (len(models) - 1) / 2) * width
            )
            y = np.array([r["ratio"] for r in mine])
            err = np.array(
                [[r["ratio"] - r["lo"] for r in mine], [r["hi"] - r["ratio"] for r in mine]]
            )
            ax.errorbar(
                x, y, yerr=err, fmt="o", ms=5, capsize=3, color=OKABE_ITO[i % len(OKABE_ITO)],
                label=model,
            )  # fmt: skip
        ax.axhline(1.0, color="#555555", ls="--", lw=1.0)
        ax.set_xticks(range(len(tokens)), [str(t) for t in tokens])
        ax.set_xlabel("tokens per GPU")
        a, b = step["stage"] - 1, step["stage"]
        ax.set_ylabel(f"stage {b} / stage {a} (paired)")
        ax.grid(axis="x", visible=False)
        ax.legend(fontsize=7, loc="best")
        ax.set_title(
            f"H200, measured: stage {b} against stage {a} (< 1: stage {b} faster; bars: range "
            f"of the per-round ratios)\n{step['source']}",
            fontsize=8,
        )
    return fig


def plot_layer_bytes(
    cases: Mapping[str, Mapping[str, Mapping[str, float]]],
    floors: Mapping[str, float],
    title: str = "",
    ax: Axes | None = None,
) -> Figure:
    """HBM bytes of an MoE layer's passes, stacked per case and variant, over the layer's floor.

    ``cases`` maps a case label (e.g. "64 tok") to ``{variant: {step: bytes}}`` (e.g. "unfused",
    "fused activation"); ``floors`` gives each case's floor in bytes (what a fully fused layer
    moves at least). Each bar is a variant, its segments the steps in order; the dashed line at 1
    is the floor. A model of bytes, not a measurement: the title says so.
    """
    labels = list(cases)
    variants = list(dict.fromkeys(v for case in cases.values() for v in case))
    steps = list(dict.fromkeys(s for case in cases.values() for v in case.values() for s in v))
    colors = {step: OKABE_ITO[i % len(OKABE_ITO)] for i, step in enumerate(steps)}
    width = 0.8 / max(1, len(variants))
    with style():
        fig, ax = _axes(ax, (8.0, 3.4))
        for vi, variant in enumerate(variants):
            x = np.arange(len(labels)) + (vi - (len(variants) - 1) / 2) * width
            bottom = np.zeros(len(labels))
            for step in steps:
                values = np.array(
                    [cases[c].get(variant, {}).get(step, 0.0) / floors[c] for c in labels]
                )
                ax.bar(x, values, width * 0.9, bottom=bottom, color=colors[step],
                       hatch="//" if vi else "", edgecolor="white", linewidth=0.5,
                       label=step if vi == 0 else None)  # fmt: skip
                bottom += values
            for xi, top in zip(x, bottom, strict=True):
                ax.text(xi, top, f"{top:.2f}", ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
        ax.set_xticks(np.arange(len(labels)), labels)
        ax.set_ylabel("bytes / the layer's floor")
        handles, names = ax.get_legend_handles_labels()
        handles += [Patch(facecolor="white", edgecolor="grey", hatch="//" if i else "")
                    for i in range(len(variants))]  # fmt: skip
        names += [f"bar {i + 1}: {v}" for i, v in enumerate(variants)]
        ax.legend(handles, names, ncols=2, loc="upper left")
        ax.set_title(title or "HBM bytes per pass (modeled: every tensor once per pass)")
    return fig
