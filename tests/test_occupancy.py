"""The occupancy model: the blog's GLM 5.3 decode numbers, waves, maps and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pearl_moe import B200, H200, GemmConfig, make_problem
from pearl_moe.model.occupancy import IDLE, occupancy, tiles_per_expert


@pytest.fixture(scope="module")
def glm_decode():
    return make_problem("GLM 5.3", 64)


def test_glm_decode_problem_is_the_blogs(glm_decode):
    # 512 tokens over 8 GPUs, EP=8, top-8: 32 GEMMs of (16, 6144) @ (6144, 4096).
    assert glm_decode.experts == 32
    assert set(glm_decode.counts) == {16}
    assert (glm_decode.k, glm_decode.n) == (6144, 4096)


def test_one_expert_fills_a_fraction_of_a_b200(glm_decode):
    occ = occupancy(glm_decode, (64, 64), gpu=B200)
    assert occ.ctas_per_expert == (64,) * 32  # ceil(16/64) * ceil(4096/64)
    fraction = occ.wave_fractions("naive")[0]
    assert fraction == pytest.approx(64 / 148)
    # The blog calls this "about a third" of the 148 SMs; the computed value is 0.43.
    assert 0.3 < fraction < 0.45


def test_grouped_launch_has_32x_the_ctas(glm_decode):
    occ = occupancy(glm_decode, (64, 64))
    assert occ.total_ctas == 32 * 64 == 2048
    assert occ.naive_launches == 32 and occ.grouped_launches == 1
    assert occ.waves("grouped") == math.ceil(2048 / 148)
    assert occ.waves("naive") == 32
    assert occ.utilization("naive") == pytest.approx(64 / 148)
    assert occ.utilization("grouped") == pytest.approx(2048 / (148 * 14))
    assert occ.wave_speedup == pytest.approx(32 / 14)
    assert occ.row_fill == pytest.approx(16 / 64)


def test_wave_fractions_are_full_then_remainder(glm_decode):
    fractions = occupancy(glm_decode, (64, 64)).wave_fractions("grouped")
    assert fractions[:-1] == [1.0] * 13
    assert fractions[-1] == pytest.approx((2048 - 13 * 148) / 148)


def test_two_cta_tiles_take_two_sms(glm_decode):
    cfg = GemmConfig(tile_m=256, tile_n=256, cta_group=2)
    occ = occupancy(glm_decode, cfg)
    assert occ.tiles_per_expert == (16,) * 32
    assert occ.ctas_per_expert == (32,) * 32
    assert occ.concurrent_tiles == 74
    grid = occ.occupancy_map()
    assert (grid != IDLE).sum() == occ.total_ctas
    # The two CTAs of a pair sit on adjacent SMs and work on the same expert.
    assert np.array_equal(grid[0::2], grid[1::2])


def test_config_and_tuple_agree(glm_decode):
    cfg = GemmConfig(tile_m=64, tile_n=128)
    assert occupancy(glm_decode, cfg) == occupancy(glm_decode, (64, 128))


def test_maps_account_for_every_cta():
    counts = [0, 300, 5, 129]
    occ = occupancy(counts, (128, 128), n=1024, gpu=H200)
    assert occ.tiles_per_expert == (0, 24, 8, 16)
    for mode in ("grouped", "naive"):
        grid = occ.occupancy_map(mode)
        assert grid.shape == (132, occ.waves(mode))
        for e, ctas in enumerate(occ.ctas_per_expert):
            assert (grid == e).sum() == ctas
    naive = occ.occupancy_map("naive")
    # Each launch starts in its own slot, so no slot mixes experts in the naive loop.
    for slot in range(naive.shape[1]):
        busy = set(naive[:, slot].tolist()) - {IDLE}
        assert len(busy) == 1
    assert occ.naive_launches == 3  # the empty expert is skipped


def test_empty_problem_has_no_waves():
    occ = occupancy([0, 0], (64, 64), n=256)
    assert occ.total_ctas == 0 and occ.waves() == 0 and occ.utilization() == 0.0
    assert occ.occupancy_map().shape == (148, 0)


def test_tiles_per_expert_rounds_up():
    assert tiles_per_expert([1, 64, 65], 100, 64, 64) == [2, 2, 4]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(problem=[16, 16], tile=(64, 64)), "n is required"),
        (dict(problem=[16, -1], tile=(64, 64), n=64), "non-negative"),
        (dict(problem=[], tile=(64, 64), n=64), "at least one expert"),
        (dict(problem=[16], tile=(0, 64), n=64), "tile_m"),
        (dict(problem=[16], tile=(64,), n=64), "tile must be"),
        (dict(problem=[16], tile=(64, 64), n=64, cta_group=3), "cta_group"),
        (dict(problem=[16], tile=(65, 64), n=64, cta_group=2), "must be even"),
        (dict(problem=[16], tile=(64, 64), n=64, gpu="A100"), "unknown GPU"),
        (dict(problem="16", tile=(64, 64), n=64), "sequence of row counts"),
        (dict(problem=[16], tile=GemmConfig(), n=64, cta_group=2), "contradicts"),
    ],
)
def test_bad_input_raises_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        occupancy(**kwargs)


def test_bad_mode_raises(glm_decode):
    with pytest.raises(ValueError, match="mode"):
        occupancy(glm_decode, (64, 64)).occupancy_map("serial")
