"""The notebooks' own figures: latency bars, latency against tokens, the ring-depth sweep.

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

__all__ = ["plot_stage_sweep", "plot_latency_bars", "plot_recorded_vs_tokens", "say_model"]


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
    """Horizontal latency bars, each against the floor of its own GPU.

    ``bars`` are ``(label, seconds or None, source)`` or ``(label, seconds or None, source,
    floor_seconds)``. A source containing "modeled" draws the bar hatched (a model, not a
    measurement). Each bar's floor is a dark tick across that bar's row, and the bar says which
    fraction of its floor it reaches. ``floor`` is the floor of bars that give none (use it only
    when every such bar is on the same GPU). A missing value (None) is an empty row that says why.
    The sources are listed once under the title; when any bar is modeled the title says so.
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    parts = [_bar_parts(b) for b in bars]
    with style():
        fig = Figure(figsize=(8.0, 0.5 * len(parts) + 1.9), layout="constrained")
        ax = fig.add_subplot()
        y = np.arange(len(parts))[::-1]
        floors = [f if f is not None else floor for *_, f in parts]
        top = max([v for _, v, _, _ in parts if v] + [f for f in floors if f] + [0.0]) * 1e6 or 1.0
        sources: list[str] = []
        for yi, (_label, value, source, _), own_floor in zip(y, parts, floors, strict=True):
            modeled = "modeled" in source
            if value:
                if source not in sources:
                    sources.append(source)
                ax.barh(
                    yi, value * 1e6, 0.6, color=OKABE_ITO[1] if modeled else OKABE_ITO[0],
                    hatch="//" if modeled else "", edgecolor="white",
                )  # fmt: skip
                reach = f", {own_floor / value:.0%} of its floor" if own_floor else ""
                kind = "modeled" if modeled else "measured"
                ax.text(
                    max(value, own_floor or 0) * 1e6, yi, f"  {value * 1e6:.0f} us ({kind}){reach}",
                    va="center", fontsize=7,
                )  # fmt: skip
            else:
                ax.text(0, yi, f" {source}", va="center", fontsize=7, color="#555555")
            if own_floor:
                ax.plot([own_floor * 1e6] * 2, [yi - 0.42, yi + 0.42], color="#222222", lw=2.2)
        ax.set_yticks(y, [p[0] for p in parts])
        ax.set_xlim(0, top * 1.75)
        ax.set_xlabel("latency (us)")
        ax.grid(axis="y", visible=False)
        any_model = any("modeled" in s for s in sources)
        handles = [Patch(color=OKABE_ITO[0], label="measured")]
        if any_model:
            handles.append(Patch(facecolor=OKABE_ITO[1], hatch="//", label="model"))
        if any(floors):
            handles.append(Line2D([], [], color="#222222", lw=2.2, label="floor of that bar's GPU"))
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=7)
        if any_model and "model" not in title.lower():
            title = f"{title}{': ' if title else ''}measured and model (hatched)"
        named = [s for s in sources if "modeled" not in s]
        if any_model:
            named.append("model: pearl_moe.perfmodel, not a measurement")
        heading = "\n".join(filter(None, [title, "; ".join(named)]))
        if heading:
            ax.set_title(heading, fontsize=9)
    return fig


def plot_recorded_vs_tokens(
    series: Mapping[str, Sequence[tuple[float, float]]],
    floor: Sequence[tuple[float, float]] | None,
    gpu: str,
    source: str,
    title: str = "",
):
    """Latency against tokens per GPU of recorded (or live) runs, the source said once.

    :func:`pearl_moe.plots.plot_latency_vs_tokens` with short legend entries ("stage 2 (measured
    on H200)") and the long source ("replayed from results/... (measured <date> on <GPU>)") as a
    second title line, so the legend stays inside the plot and the axes keep their width.
    """
    from ..plots import plot_latency_vs_tokens

    heading = f"{title}\n{source}" if title else source
    fig = plot_latency_vs_tokens(series, floor=floor, measured_on=gpu, title=heading)
    ax = fig.axes[0]
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, loc="upper left")
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
