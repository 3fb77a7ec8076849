"""Plots of the latency model: every title says the numbers are modeled (or derived)."""

from pearl_moe.course.plots import (
    plot_calibration,
    plot_occupancy_maps,
    plot_stage_projection,
    plot_utilization_vs_tokens,
)
from pearl_moe.model import calibrate
from pearl_moe.model.occupancy import occupancy
from pearl_moe.model.perfmodel import stage_projection
from pearl_moe.workloads import make_problem


def test_calibration_plot_has_one_marker_per_record():
    records, _ = calibrate.load_records()
    rows = calibrate.evaluate(records)
    fig = plot_calibration(rows)
    ax = fig.axes[0]
    drawn = sum(len(line.get_xdata()) for line in ax.get_lines()[1:])
    assert drawn == len(rows)
    assert "model" in ax.get_title().lower() and "measure" in ax.get_title().lower()


def test_stage_projection_is_labeled_modeled():
    proj = stage_projection(models=("GLM 5.3",), tokens=(64,), stages=(3, 5))
    ((key, preds),) = proj.items()
    data = {"GLM 64": {s: p.seconds for s, p in preds.items()}}
    fig = plot_stage_projection(data, {"GLM 64": preds[3].floor_seconds})
    assert "modeled" in fig.axes[0].get_title()
    assert all(p.label == "modeled" for p in preds.values())


def test_stage_projection_says_how_far_the_model_is_from_the_h200():
    """The B200 bars carry the H200 check on a second title line: decode (up to 256 tokens per
    GPU, 253 records) within 18%, prefill (189 records) within 27%."""
    errors = calibrate.decode_prefill_errors()
    assert (errors["decode"]["records"], errors["prefill"]["records"]) == (253, 189)
    note = calibrate.trust_note(errors)
    assert note == (
        "the model against the H200 (calibrate): decode (up to 256 tokens per GPU) within 18% "
        "(median 4%), prefill within 27% (median 7%)"
    )
    proj = stage_projection(models=("GLM 5.3",), tokens=(64,), stages=(3, 5))
    ((_, preds),) = proj.items()
    data = {"GLM 64": {s: p.seconds for s, p in preds.items()}}
    fig = plot_stage_projection(data, {"GLM 64": preds[3].floor_seconds}, note=note)
    first, second = fig.axes[0].get_title().split("\n")
    assert "modeled" in first and second == note


def test_wave_model_figures_say_model():
    occ = occupancy(make_problem("GLM 5.3", 64), (64, 64))
    assert "model" in plot_occupancy_maps(occ)._suptitle.get_text().lower()
    fig = plot_utilization_vs_tokens("GLM 5.3", tokens=(16, 64))
    assert "model" in fig.axes[0].get_title().lower()
