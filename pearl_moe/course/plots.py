"""The notebooks' own figures: latency bars, latency against tokens, the ring-depth sweep, and for
the stage notebooks 05-08 a stage's budgets beside the previous stage's, its tiles on the SMs, and
its measured step.

Every figure says where its numbers come from. A bar or curve is either *measured* (live on this
GPU, or replayed from a recorded run, with the file and date) or *modeled*
(:mod:`pearl_moe.perfmodel`, never a measurement); a figure that shows a model says "model" in its
title. Each latency is drawn against the floor of its own GPU: an H200 floor next to a B200 bar
would make the bar look faster than physics allows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..plots import OKABE_ITO, style

__all__ = [
    "plot_stage_sweep",
    "plot_latency_bars",
    "plot_recorded_vs_tokens",
    "say_model",
    "plot_stage_budgets",
    "plot_stage_occupancy",
    "plot_ablation_step",
]


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
    :func:`pearl_moe.perfmodel.predict`. Floors are drawn as dashed lines.
    """
    from matplotlib.figure import Figure

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
            f"{modeled_gpu}, modeled (pearl_moe.perfmodel, not a measurement)", fontsize=8
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
    (:func:`pearl_moe.calibrate.trust_note`).
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

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
            from ..calibrate import decode_prefill_errors, trust_note

            named.append("model: pearl_moe.perfmodel, not a measurement")
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

    :func:`pearl_moe.plots.plot_latency_vs_tokens` with short legend entries ("stage 2", the legend
    titled "measured on H200") and the long source ("replayed from results/... (measured <date> on <GPU>)") as a
    second title line, so the legend stays inside the plot and the axes keep their width.
    """
    from ..plots import plot_latency_vs_tokens, source_title

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
        extra.append("2 acc slots" if config.arch == "sm_100a" else "ping-pong")
    return (
        f"stage {stage}\n{config.tile_m}x{config.tile_n}x{config.tile_k} {config.cta_group}-CTA\n"
        + ", ".join(extra)
    )


def plot_stage_budgets(stages, configs: Mapping | None = None):
    """Budget model of some stages' ladder configurations on both GPUs, side by side.

    Top: stacked shared-memory bars per CTA, B200 (sm_100a) left and H200 (sm_90a) right, one bar
    per stage (:func:`pearl_moe.plots.plot_smem_budget`). Below: the TMEM column map of each
    stage's B200 configuration (:func:`pearl_moe.plots.plot_tmem_map`). ``configs`` maps ``(arch,
    stage)`` to a configuration to draw instead of the ladder's
    (:func:`pearl_moe.kernels.ladder.stage_config`, deepest ring that fits).
    """
    from matplotlib.figure import Figure

    from ..budget import resolve
    from ..kernels.ladder import stage_config
    from ..plots import plot_smem_budget, plot_tmem_map

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
    from ..hardware import get_gpu
    from ..occupancy import occupancy

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
    of tiles: the wave model of :mod:`pearl_moe.occupancy`, titled as a model. The maps of one
    problem (a column) share one time axis.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from ..hardware import get_gpu
    from ..occupancy import occupancy
    from ..plots import IDLE_COLOR, plot_occupancy_map

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

    ``step`` is :func:`~pearl_moe.course.results.ablation_step`; its source is the second title
    line. Without a step the axes say there is no recorded measurement.
    """
    from matplotlib.figure import Figure

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
