"""Widgets: built headlessly, a value change redraws; invalid combinations show the reason."""

from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets", reason="widgets need ipywidgets (a dependency of pearl-moe)")

from pearl_moe import GemmConfig, make_problem  # noqa: E402
from pearl_moe.course.widgets import OccupancyExplorer, SmemBudgetExplorer  # noqa: E402
from pearl_moe.model.occupancy import occupancy  # noqa: E402


def _shown(explorer):
    kinds = []
    for out in explorer.output.outputs:
        kinds += list(out.get("data", {})) or [out.get("name")]
    return kinds


def test_occupancy_explorer_redraws_on_change():
    ex = OccupancyExplorer()
    assert ex.redraws == 1 and ex.last_figure is not None
    assert "image/png" in _shown(ex)
    first = ex.last_figure
    assert ex.last_text == occupancy(make_problem("GLM 5.3", 64), (64, 64)).summary()
    ex.tokens.value = 1024
    assert ex.redraws == 2 and ex.last_figure is not first
    assert ex.last_text == occupancy(make_problem("GLM 5.3", 1024), (64, 64)).summary()
    ex.tile.value = "256x512 (2-CTA)"
    assert "2-CTA" in ex.last_text
    ex.gpu.value = "H200"
    assert "132 SMs" in ex.last_text


def test_occupancy_explorer_shows_value_errors():
    ex = OccupancyExplorer()
    # Every offered EP degree divides the models' expert counts; offer one that does not.
    ex.ep.options = [*ex.ep.options, 3]
    ex.ep.value = 3
    assert ex.last_figure is None
    assert "does not divide" in ex.last_error
    assert [o.get("name") for o in ex.output.outputs] == ["stdout"]
    ex.ep.value = 8
    assert ex.last_error is None and "image/png" in _shown(ex)


def test_smem_explorer_redraws_and_reports_invalid_configs():
    ex = SmemBudgetExplorer()
    assert "216.2 KB" in ex.last_text  # six ring entries and the 24 KB TMA-store buffer
    ex.epilogue.value = "direct_store"
    assert ex.redraws == 2 and "r7" in ex.last_text
    ex.cta_group.value = 2
    ex.tile_m.value = 64
    assert ex.last_figure is None
    assert "64-row tiles need 1-CTA mode" in ex.last_error
    assert any(o.get("name") == "stdout" for o in ex.output.outputs)
    ex.cta_group.value = 1
    assert ex.last_error is None and ex.last_figure is not None
    assert len(ex.last_figure.subfigs) == 2  # SMEM bars and TMEM map on Blackwell


def test_smem_explorer_hopper_has_no_tmem_panel():
    ex = SmemBudgetExplorer(GemmConfig(arch="sm_90a", ring_depth=4))
    assert ex.ring_depth.value == 4 and "r4" in ex.last_text
    assert len(ex.last_figure.subfigs) == 0 and len(ex.last_figure.axes) == 1


def test_smem_explorer_too_many_stages_is_an_error():
    ex = SmemBudgetExplorer()
    ex.ring_depth.value = 16
    assert "needs" in ex.last_error and "per block" in ex.last_error


# ---------------------------------------------------------------------------- new controls
def test_occupancy_explorer_routing_skew_changes_the_map():
    from pearl_moe.course.widgets import OccupancyExplorer as Explorer
    from pearl_moe.model.occupancy import skewed_counts

    ex = Explorer(tile="128x128 (1-CTA)")
    balanced = ex.last_text
    ex.routing.value = "skewed"
    assert ex.redraws == 2 and ex.last_figure is not None
    assert "routing: skewed (skew 1.2)" in ex.last_text and ex.last_text != balanced
    mild = ex.last_text
    ex.skew.value = 2.5
    assert ex.redraws == 3 and ex.last_text != mild
    counts = skewed_counts(64, 32, 8, 2.5)
    assert f"rows per expert {min(counts)}..{max(counts)}" in ex.last_text
    assert max(counts) > 2 * 16  # hot experts take far more than the balanced 16 rows
    assert sum(counts) == 64 * 8
    ex.routing.value = "balanced"
    assert ex.last_text == balanced


def test_skewed_counts_validates():
    from pearl_moe.model.occupancy import skewed_counts

    assert skewed_counts(10, 4, 2, 0.0) == skewed_counts(10, 4, 2, 0.0)  # reproducible
    assert sum(skewed_counts(10, 4, 2, 1.0)) == 20
    with pytest.raises(ValueError):
        skewed_counts(10, 4, 2, -1.0)
    with pytest.raises(ValueError):
        skewed_counts(10, 4, 5, 1.0)


def test_smem_explorer_accumulator_controls():
    ex = SmemBudgetExplorer(GemmConfig(arch="sm_100a", tile_n=256))
    assert "acc2" in ex.last_text  # two 256-column accumulators fit TMEM
    ex.acc_buffers.value = 1
    assert "acc1" in ex.last_text and ex.last_figure is not None
    ex.tile_n.value = 512
    ex.cta_group.value = 2
    ex.tile_m.value = 256
    ex.acc_slots.value = 2
    assert ex.last_error is None and "split" in ex.last_text
    ex.acc_buffers.value = 2  # a split accumulator is one buffer
    assert "acc_slots=2 is for a single accumulator" in ex.last_error


def test_smem_explorer_store_bits():
    ex = SmemBudgetExplorer(GemmConfig(arch="sm_100a", epilogue="direct_store"))
    ex.store_bits.value = 128
    assert ex.last_error is None and "direct128" in ex.last_text
    ex.epilogue.value = "tma_store"
    assert "needs epilogue='direct_store'" in ex.last_error


def test_smem_explorer_says_why_hopper_cannot():
    ex = SmemBudgetExplorer(GemmConfig(arch="sm_100a"))
    ex.gpu.value = "H200"  # an sm_100a kernel on an H200
    assert "runs sm_90a code" in ex.last_error and ex.last_figure is None
    ex.arch.value = "sm_90a"
    assert ex.last_error is None and "on the H200" in ex.last_text
    ex.cta_group.value = 2  # a 2-CTA tile on an H200
    assert "Blackwell" in ex.last_error
    ex.cta_group.value = 1
    ex.tile_n.value = 256
    ex.acc_slots.value = 2  # a split-accumulator warpgroup holds a whole tile's accumulator
    assert ex.tile_m.value == 128
    assert "must be at most 192 registers" in ex.last_error
    ex.tile_n.value = 128  # 128 x 128: 128 registers per thread
    ex.epilogue.value = "direct_store"
    assert ex.last_error is None and "pingpong" in ex.last_text
    ex.tile_m.value = 64
    assert ex.last_error is None and "pingpong" in ex.last_text


def test_latency_explorer_moves_with_its_knobs():
    from pearl_moe.course.widgets import LatencyExplorer

    ex = LatencyExplorer()
    assert "modeled" in ex.last_figure.axes[0].get_title()
    assert ex.last_text.startswith("modeled ")

    def modeled_us():
        return float(ex.last_text.split()[1])

    base = modeled_us()
    ex.latency.value = 4.0  # a slower memory needs more bytes in flight
    slow = modeled_us()
    assert slow > base
    ex.ring_depth.value = 2
    assert modeled_us() > slow
    ex.ring_depth.value = "auto"
    ex.latency.value = 1.5
    ex.bandwidth.value = 2.0  # starve HBM: the model becomes memory-bound
    assert "limited by memory" in ex.last_text
    ex.bandwidth.value = 7.0
    ex.tile_m.value = 64
    assert "A entry 8.0 KB" in ex.last_text
    redraws = ex.redraws
    ex.gpu.value = "H200"
    assert "H200" in ex.last_figure.axes[0].get_title()
    assert ex.redraws == redraws + 1
    # the H200's own bandwidth, not the 7.0 TB/s set for the B200 above
    from pearl_moe.hardware import H200
    from pearl_moe.model.perfmodel import CALIBRATED, hbm_ceiling

    assert ex.bandwidth.value == pytest.approx(hbm_ceiling(H200, CALIBRATED) / 1e12, abs=0.05)
    assert ex.bandwidth.value < 5.0
    ex.ring_depth.value = 12  # more entries than shared memory holds
    assert ex.last_figure is None and "needs" in ex.last_error
