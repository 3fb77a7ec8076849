"""Widgets: built headlessly, a value change redraws; invalid combinations show the reason."""

from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets", reason="widgets need ipywidgets (a dependency of pearl-moe)")

from pearl_moe import GemmConfig, make_problem  # noqa: E402
from pearl_moe.occupancy import occupancy  # noqa: E402
from pearl_moe.widgets import OccupancyExplorer, SmemBudgetExplorer  # noqa: E402


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
