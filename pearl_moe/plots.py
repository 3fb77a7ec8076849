"""The course's plots, in one house style.

Every function takes an optional ``ax`` and returns the :class:`~matplotlib.figure.Figure` it drew
on. Figures are built with :class:`matplotlib.figure.Figure` rather than pyplot, so nothing here
touches global state: no backend is chosen, no rcParams change on import, and a notebook never shows
a figure twice. The style is applied per figure through :func:`style`.

Numbers are never recomputed here: budgets come from :mod:`pearl_moe.budget`, tiles and waves from
:mod:`pearl_moe.occupancy`, so a plot cannot disagree with the models it shows.
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
from matplotlib.patches import Patch, Rectangle

from .budget import resolve, smem_budget, tmem_columns
from .config import GemmConfig
from .hardware import B200, GpuSpec, get_gpu
from .occupancy import IDLE, Occupancy, occupancy
from .workloads import get_model, make_problem

__all__ = [
    "OKABE_ITO",
    "STYLE",
    "style",
    "plot_occupancy_map",
    "plot_occupancy_maps",
    "plot_utilization_vs_tokens",
    "plot_smem_budget",
    "plot_tmem_map",
    "plot_latency_vs_tokens",
    "plot_roofline",
    "plot_calibration",
    "plot_stage_projection",
    "plot_ring_depth_sweep",
    "plot_ablation_steps",
    "plot_vs_floor",
    "figure_png",
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


# ---------------------------------------------------------------------------- roofline
def plot_roofline(roofs=None, points=None, ax: Axes | None = None) -> Figure:
    """Attainable FLOP/s against arithmetic intensity (log-log) for each roof, with the MoE shapes.

    ``roofs``: :class:`pearl_moe.roofline.Roof` list (default: B200 and H200 datasheets, H200
    measured); ``points``: :class:`~pearl_moe.roofline.RooflinePoint` list (default: the three
    models at 16/64/256 and 4096 tokens per GPU). Derived numbers only: no kernel was timed.
    """
    from . import roofline

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
    """Modeled against measured latency (log-log) for the rows of :func:`pearl_moe.calibrate.evaluate`:
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
    (e.g. :func:`pearl_moe.calibrate.trust_note`) goes on a second title line.
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
        title = f"{gpu}, modeled (pearl_moe.perfmodel, not a measurement): stages side by side"
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
    [(ring_depth, seconds), ...]`` from :func:`pearl_moe.perfmodel.predict`. Titled as modeled."""
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
            f"{gpu}, modeled (pearl_moe.perfmodel, not a measurement)"
            + (f": {title}" if title else ""),
            fontsize=9,
        )
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
