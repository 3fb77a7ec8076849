"""Plots: each returns a Figure with the artists the models say it should have.

The plots build matplotlib Figures directly (no pyplot), so no backend needs choosing here.
"""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.patches import Rectangle

from pearl_moe import GemmConfig, make_problem, smem_budget
from pearl_moe.config import resolve
from pearl_moe.course import plots
from pearl_moe.model.occupancy import occupancy

BLOG_CONFIGS = [
    GemmConfig(epilogue="tma_store"),
    GemmConfig(epilogue="direct_store"),
    GemmConfig(tile_m=64, epilogue="direct_store"),
    GemmConfig(tile_m=64, epilogue="direct_store", b_k_tiles=2),
]


@pytest.fixture(scope="module")
def glm_occ():
    return occupancy(make_problem("GLM 5.3", 64), (64, 64))


def test_importing_and_plotting_leave_rcparams_alone(glm_occ):
    before = dict(mpl.rcParams)
    plots.plot_occupancy_maps(glm_occ)
    assert dict(mpl.rcParams) == before


def test_occupancy_maps_side_by_side(glm_occ):
    fig = plots.plot_occupancy_maps(glm_occ)
    assert isinstance(fig, Figure)
    naive_ax, grouped_ax = fig.axes[:2]
    for ax, mode in ((naive_ax, "naive"), (grouped_ax, "grouped")):
        images = [a for a in ax.get_children() if isinstance(a, AxesImage)]
        assert len(images) == 1
        data = np.asarray(images[0].get_array())
        assert data.shape == (148, glm_occ.waves(mode))
        assert (data > 0).sum() == glm_occ.total_ctas  # 0 is idle
        assert f"{glm_occ.waves(mode)} waves" in ax.get_title()
    # One time axis for both, so the grouped map is visibly shorter.
    assert naive_ax.get_xlim() == grouped_ax.get_xlim() == (0, 32)


def test_occupancy_maps_reject_wrong_axes(glm_occ):
    fig = Figure()
    with pytest.raises(ValueError, match="two Axes"):
        plots.plot_occupancy_maps(glm_occ, ax=[fig.add_subplot()])


def test_utilization_lines_per_model_and_tile():
    tokens = [1, 16, 64, 1024]
    fig = plots.plot_utilization_vs_tokens(
        ["GLM 5.3", "Kimi K3"], tokens=tokens, tiles=[(64, 64), GemmConfig(tile_n=256)]
    )
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 2 * 2 * 2  # models x tiles x (grouped, naive)
    glm_grouped = next(ln for ln in lines if ln.get_label() == "GLM 5.3, 64x64, grouped")
    expected = occupancy(make_problem("GLM 5.3", 64), (64, 64)).utilization("grouped")
    assert glm_grouped.get_ydata()[tokens.index(64)] == pytest.approx(expected)
    assert len(plots.plot_utilization_vs_tokens(tokens=tokens, show_naive=False).axes[0].lines) == 1


def test_smem_bars_come_from_the_budget_model():
    fig = plots.plot_smem_budget(BLOG_CONFIGS)
    ax = fig.axes[0]
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(bars) == 4 * len(BLOG_CONFIGS)  # A, B, epilogue, barriers per config
    heights = np.zeros(len(BLOG_CONFIGS))
    for container in ax.containers:
        heights += [p.get_height() for p in container]
    totals = [smem_budget(resolve(c)).total / 1024 for c in BLOG_CONFIGS]
    assert heights == pytest.approx(totals)
    limit_lines = [ln for ln in ax.get_lines() if "limit" in ln.get_label()]
    assert len(limit_lines) == 1 and limit_lines[0].get_ydata()[0] == pytest.approx(227)
    assert [c.get_label() for c in ax.containers] == [
        "A ring",
        "B ring",
        "epilogue",
        "barriers",
    ]


def test_smem_bars_validate_labels():
    with pytest.raises(ValueError, match="labels"):
        plots.plot_smem_budget(BLOG_CONFIGS, labels=["one"])
    with pytest.raises(ValueError, match="at least one"):
        plots.plot_smem_budget([])


@pytest.mark.parametrize(
    "config, slots",
    [
        (GemmConfig(tile_n=256), [(0, 256), (256, 256)]),
        (GemmConfig(tile_m=256, tile_n=512, cta_group=2), [(0, 512)]),
        (GemmConfig(tile_m=256, tile_n=512, cta_group=2, acc_slots=2), [(0, 256), (256, 256)]),
        (GemmConfig(tile_n=64), [(0, 64), (64, 64)]),
    ],
)
def test_tmem_map_rectangles(config, slots):
    ax = plots.plot_tmem_map(config).axes[0]
    acc = [p for p in ax.patches if p.get_label().startswith("acc buffer")]
    assert [(p.get_x(), p.get_width()) for p in acc] == slots
    assert ax.get_xlim() == (0, 512)


def test_tmem_map_needs_blackwell():
    with pytest.raises(ValueError, match="no tensor memory"):
        plots.plot_tmem_map(GemmConfig(arch="sm_90a"))


SERIES = {"ours": [(64, 4e-4), (16, 3e-4)], "quack": [(16, 5e-4), (64, 6e-4)]}
FLOOR = [(16, 2e-4), (64, 2.5e-4)]


def test_latency_labels_measured():
    ax = plots.plot_latency_vs_tokens(SERIES, FLOOR, measured_on="H200").axes[0]
    labels = [ln.get_label() for ln in ax.get_lines()]
    # one source for every curve: said once, as the legend's title, not in every entry
    assert labels == ["ours", "quack", "floor (modeled)"]
    assert ax.get_legend().get_title().get_text() == "measured on H200"
    ours = ax.get_lines()[0]
    assert list(ours.get_xdata()) == [16, 64]  # sorted by tokens
    assert ours.get_ydata() == pytest.approx([300, 400])  # microseconds


def test_latency_labels_modeled_and_mixed():
    ax = plots.plot_latency_vs_tokens(SERIES).axes[0]
    assert ax.get_legend().get_title().get_text() == "modeled"
    assert all(ln.get_linestyle() == ":" for ln in ax.get_lines())  # modeled curves are dotted
    floored = plots.plot_latency_vs_tokens(
        SERIES, FLOOR, "H200", floor_label="floor (from measured ceilings)"
    )
    assert floored.axes[0].get_lines()[-1].get_label() == "floor (from measured ceilings)"
    mixed = plots.plot_latency_vs_tokens(SERIES, measured_on={"ours": None, "quack": "B200"})
    labels = [ln.get_label() for ln in mixed.axes[0].get_lines()]
    assert labels == ["ours (modeled)", "quack (measured on B200)"]
    with pytest.raises(ValueError, match="quack"):
        plots.plot_latency_vs_tokens(SERIES, measured_on={"ours": "H200"})


def test_functions_draw_into_a_given_axes(glm_occ):
    fig = Figure()
    ax = fig.add_subplot()
    assert plots.plot_smem_budget(BLOG_CONFIGS[:1], ax=ax) is fig
    assert plots.plot_occupancy_map(glm_occ, "naive", ax=ax) is fig


def test_figure_png_is_a_png(glm_occ):
    data = plots.figure_png(plots.plot_occupancy_maps(glm_occ))
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
