"""The roofline: ridge points and where the MoE shapes sit (derived numbers, no timing)."""

import pytest

from pearl_moe.course.plots import plot_roofline
from pearl_moe.hardware import B200, H200
from pearl_moe.model import roofline
from pearl_moe.model.perfmodel import CALIBRATED
from pearl_moe.workloads import make_problem


def test_ridge_points_by_hand():
    assert roofline.ridge_point(B200) == pytest.approx(2.25e15 / 8e12)  # 281 FLOP/B
    assert roofline.ridge_point("H200") == pytest.approx(989e12 / 4.8e12)  # 206 FLOP/B
    measured = roofline.ridge_point("H200", "measured")
    assert 150 < measured < roofline.ridge_point("H200")  # the measured peak falls further
    with pytest.raises(ValueError):
        roofline.ridge_point(B200, "measured")
    with pytest.raises(ValueError):
        roofline.ridge_point(B200, "guessed")


def test_intensity_is_about_rows_per_expert_at_decode():
    p = make_problem("GLM 5.3", 64)  # 512 rows over 32 experts
    assert roofline.arithmetic_intensity(p) == pytest.approx(16, rel=0.02)
    assert roofline.point("GLM 5.3", 64).intensity == pytest.approx(
        roofline.arithmetic_intensity(p)
    )


def test_decode_is_io_bound_and_prefill_compute_bound_everywhere():
    pts = roofline.points()
    assert {p.tokens_per_gpu for p in pts} == {16, 64, 256, 4096}
    assert len(pts) == 12
    for roof in roofline.roofs() + [roofline.modeled_b200_roof()]:
        for p in pts:
            assert p.bound_on(roof) == ("compute" if p.phase == "prefill" else "memory"), (
                roof.label(),
                p,
            )


def test_crossover_lies_between_decode_and_prefill():
    b200 = roofline.datasheet_roof(B200)
    for model in ("GLM 5.3", "DeepSeek V4 Pro", "Kimi K3"):
        t = roofline.crossover_tokens(model, b200)
        assert 256 < t < 4096
        assert (
            roofline.point(model, t).intensity
            >= b200.ridge
            > roofline.point(model, t - 1).intensity
        )


def test_b200_modeled_roof_matches_the_latency_model():
    roof = roofline.modeled_b200_roof()
    assert roof.bytes_per_s == pytest.approx(
        B200.hbm_bytes_per_s * CALIBRATED.hbm_efficiency, rel=0.02
    )
    assert roof.flops_per_s == pytest.approx(
        B200.bf16_dense_flops * CALIBRATED.mma_efficiency, rel=0.02
    )
    assert "modeled" in roof.source and roof.gpu == "B200"


def test_floor_from_a_point():
    p = roofline.point("GLM 5.3", 64)
    roof = roofline.datasheet_roof(H200)
    assert p.floor_seconds(roof) == pytest.approx(p.bytes_moved / 4.8e12)


def test_plot_is_labeled_derived():
    fig = plot_roofline()
    title = fig.axes[0].get_title()
    assert "derived" in title.lower()
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert any("ridge 281" in label for label in labels)
