import pytest

from pearl_moe.config import GemmConfig
from pearl_moe.hardware import B200, H200
from pearl_moe.kernels.ladder import stage_config
from pearl_moe.model.perfmodel import (
    CALIBRATED,
    ModelParams,
    bytes_in_flight,
    l2_throughput,
    predict,
)
from pearl_moe.workloads import GroupedProblem, make_problem


@pytest.mark.parametrize("tokens", [1, 16, 64, 256, 1024, 4096])
@pytest.mark.parametrize("arch", ["sm_100a", "sm_90a"])
def test_never_faster_than_the_floor(tokens, arch):
    p = make_problem("GLM 5.3", tokens)
    r = predict(p, GemmConfig(arch=arch))
    assert r.seconds > r.floor_seconds and 0 < r.fraction_of_floor < 1
    assert r.label == "modeled"


def test_grouped_launch_beats_the_per_expert_loop_at_decode():
    p = make_problem("GLM 5.3", 64)
    grouped = predict(p, GemmConfig())
    naive = predict(p, GemmConfig(), per_expert_launches=True)
    assert naive.launches == 32 and grouped.launches == 1
    assert naive.seconds > 1.5 * grouped.seconds


def test_more_stages_help_while_bytes_in_flight_limit_bandwidth():
    # One expert with one tile column keeps a few SMs busy: latency, not HBM, is the limit.
    p = GroupedProblem(k=8192, n=1024, counts=(16,))
    slow_memory = ModelParams(memory_latency_s=4e-6)
    times = [
        predict(p, GemmConfig(ring_depth=s), params=slow_memory).seconds for s in (2, 3, 4, 5, 6)
    ]
    assert all(a > b for a, b in zip(times, times[1:], strict=False))
    assert predict(p, GemmConfig(ring_depth=2), params=slow_memory).bound == "latency"


def test_large_batches_are_math_bound():
    # The prefill tile of the post (stage 7 on Blackwell: 2-CTA 256 x 512) is MMA-bound at 4096
    # tokens. (The model used to say this of the 1-CTA 128 x 128 tile too; that tile reads 32 KB
    # per 2 MFLOP through L2, more than the L2 can serve at the B200's MMA rate: see below.)
    r = predict(make_problem("GLM 5.3", 4096), stage_config("sm_100a", 7), stage=7)
    assert r.bound == "math"


def test_small_tiles_at_prefill_lose_to_the_big_2cta_tile():
    r = predict(make_problem("GLM 5.3", 4096), GemmConfig())
    assert r.bound != "math"  # 128 x 128 tiles do not reach the MMA rate at prefill
    big = predict(make_problem("GLM 5.3", 4096), stage_config("sm_100a", 7), stage=7)
    assert big.seconds < 0.7 * r.seconds


def test_empty_problem_costs_one_launch():
    r = predict(GroupedProblem(k=64, n=64, counts=(0, 0)), GemmConfig())
    assert r.waves == 0 and r.seconds == ModelParams().launch_overhead_s


# ---------------------------------------------------------------------------- mechanisms
def test_padding_rows_are_not_hbm_bytes():
    # HBM sees each active expert's weights once, the real rows of A once and the output once,
    # however much of each A box is padding.
    p = make_problem("GLM 5.3", 64)  # 16 rows per expert in 128-row tiles
    for tile_m in (128, 64):
        r = predict(p, GemmConfig(arch="sm_90a", tile_m=tile_m), H200)
        assert r.hbm_bytes == pytest.approx(p.bytes_moved(), rel=1e-6)


def test_bytes_in_flight_split_at_decode():
    # The arithmetic: at 16 rows per expert a 16 KB A entry holds 2 KB of the expert's
    # rows; the other 14 KB are other experts' rows served from L2 (or zero-fill at A's end).
    b = bytes_in_flight(make_problem("GLM 5.3", 64), GemmConfig(arch="sm_90a"), H200)
    assert b.a_entry == 16 * 1024
    assert b.a_real == pytest.approx(2 * 1024)
    assert b.a_padding_l2 + b.a_zero_fill == pytest.approx(14 * 1024)
    assert b.hbm_per_entry == pytest.approx(18 * 1024)  # 16 KB of weights + 2 KB of A
    # A stage-1 launch sees only its expert's rows: all padding is past A's end
    b1 = bytes_in_flight(make_problem("GLM 5.3", 64), GemmConfig(arch="sm_90a"), H200, stage=1)
    assert b1.a_padding_l2 == 0 and b1.a_zero_fill == pytest.approx(14 * 1024)


def test_64_row_tiles_beat_128_row_tiles_at_equal_depth_on_the_h200():
    # Measured on the H200 (results/H200/stage_sweep.json): 64-row tiles are faster at every depth.
    p = make_problem("GLM 5.3", 64)
    for depth in range(2, 7):
        t128 = predict(p, GemmConfig(arch="sm_90a", ring_depth=depth), H200).seconds
        t64 = predict(p, GemmConfig(arch="sm_90a", tile_m=64, ring_depth=depth), H200).seconds
        assert t64 < t128, depth


def test_the_posts_configurations_are_told_apart_on_the_b200():
    p = make_problem("GLM 5.3", 64)
    tma6 = predict(p, GemmConfig(arch="sm_100a"), B200).seconds
    direct7 = predict(p, GemmConfig(arch="sm_100a", epilogue="direct_store"), B200).seconds
    rows64 = predict(
        p, GemmConfig(arch="sm_100a", tile_m=64, epilogue="direct_store"), B200
    ).seconds
    assert direct7 < tma6 and rows64 < direct7
    assert rows64 < 0.97 * tma6  # not "all within 1 %"


def test_loaded_latency_grows_with_bytes_in_flight():
    p = make_problem("GLM 5.3", 64)
    lat = [
        predict(p, GemmConfig(arch="sm_90a", tile_m=64, ring_depth=d), H200).loaded_latency_s
        for d in (2, 4, 7)
    ]
    assert lat[0] >= CALIBRATED.memory_latency_s * 0.999
    assert lat[0] < lat[1] < lat[2]


def test_stage_structure():
    p = make_problem("GLM 5.3", 4096)
    cfg = GemmConfig(arch="sm_90a")
    s1, s2, s3 = (predict(p, cfg, H200, stage=s) for s in (1, 2, 3))
    assert (s1.launches, s2.launches, s3.launches) == (32, 1, 1)
    assert s2.seconds > s3.seconds  # 254k empty CTAs of stage 2's grid cost SM time
    with pytest.raises(ValueError):
        predict(p, cfg, H200, stage=9)


def test_measured_ceilings_replace_the_modeled_ones():
    p = make_problem("GLM 5.3", 64)
    cfg = GemmConfig(arch="sm_90a", tile_m=64, ring_depth=7)
    slow = predict(p, cfg, H200, hbm_bytes_per_s=2e12, mma_flops_per_s=800e12)
    fast = predict(p, cfg, H200, hbm_bytes_per_s=4.3e12, mma_flops_per_s=800e12)
    assert slow.seconds > fast.seconds
    assert slow.floor_seconds == pytest.approx(p.floor_seconds(2e12, 800e12))


def test_b200_assumptions_scale_from_the_h200():
    assert l2_throughput(B200, CALIBRATED) / l2_throughput(H200, CALIBRATED) == pytest.approx(
        B200.hbm_bytes_per_s / H200.hbm_bytes_per_s
    )


def test_old_parameter_names_still_read():
    params = ModelParams()
    assert params.bandwidth_efficiency == params.hbm_efficiency
    assert params.math_efficiency == params.mma_efficiency


def test_the_scheduler_walk_is_serial_or_warp_parallel():
    from pearl_moe.model.perfmodel import walk_steps

    assert walk_steps(112, "serial") == 112 and walk_steps(112, "warp-parallel") == 4
    assert walk_steps(48) == 2  # the default: the warp-parallel walk of this tree
    with pytest.raises(ValueError, match="scheduler"):
        walk_steps(32, "binary")
    p = make_problem("Kimi K3", 1)
    cfg = stage_config("sm_90a", 3)
    serial = predict(p, cfg, H200, stage=3, scheduler="serial")
    parallel = predict(p, cfg, H200, stage=3, scheduler="warp-parallel")
    gap = serial.seconds - parallel.seconds
    assert gap == pytest.approx((112 - 4) * CALIBRATED.walk_step_s)
    assert serial.time_by_bound["walk"] == pytest.approx(112 * CALIBRATED.walk_step_s)
    # stage 2 launches one CTA per tile: no walk
    s2 = [predict(p, cfg, H200, stage=2, scheduler=w).seconds for w in ("serial", "warp-parallel")]
    assert s2[0] == s2[1]


def test_trailing_empty_ctas_fill_the_idle_sms_of_the_last_round():
    # 1 token per GPU: the experts with rows come first, the empty ones trail the grid
    from pearl_moe.config import resolve
    from pearl_moe.model.perfmodel import _structure

    p = make_problem("DeepSeek V4 Pro", 1)
    cfg = resolve(stage_config("sm_90a", 2), H200)
    _, (interleaved, trailing), tiles = _structure(tuple(p.counts), p.k, p.n, cfg, 2, H200.sms)
    assert tiles == 6 * 48 and interleaved == 0 and trailing == 42 * 48
    # 64 tokens: every expert has rows, the empty m slots sit between real tiles
    q = make_problem("GLM 5.3", 64)
    _, (interleaved, trailing), tiles = _structure(tuple(q.counts), q.k, q.n, cfg, 2, H200.sms)
    assert tiles == 32 * 32 and interleaved + trailing == 3 * tiles
    assert trailing == 3  # only the last n tile's empty m slots come after the last real CTA
    # 2016 empty CTAs fit in the 108 SMs the third, 24-tile round leaves idle: no extra time
    # beyond the launch; Kimi K3's 4608 trailing CTAs do not fit in the 24 idle SMs of its last round
    hidden = predict(p, cfg, H200, stage=2).time_by_bound["launch"]
    assert hidden == pytest.approx(CALIBRATED.launch_overhead_s)
    k = make_problem("Kimi K3", 1)
    # 4608 trailing CTAs: what does not fit in the idle SMs of the last round is shared by all 132
    # (about 3 us; the launch alone is a few ns)
    extra = predict(k, cfg, H200, stage=2).time_by_bound["launch"] - CALIBRATED.launch_overhead_s
    assert 1e-6 < extra < 4608 * CALIBRATED.cta_overhead_s / H200.sms


def test_wide_b_entries_halve_the_row_segments_of_b():
    # L2 work counts one row segment per contiguous run of a row in a ring entry
    p = make_problem("GLM 5.3", 4096)
    narrow = predict(p, stage_config("sm_90a", 5), H200, stage=5)
    wide = predict(p, stage_config("sm_90a", 6), H200, stage=6)
    # 16 m tiles per n tile: three of every four neighbouring tiles read their B box with the first
    # while they stay in step (neighbour_merge, fading over drift_rounds): the ratio lies
    # between the one with no merging and the one with the full merge of round 0
    seg = CALIBRATED.row_request_bytes

    def ratio(b_rows, a_rows=64):
        per_k_narrow = a_rows * (128 + seg) + b_rows * (128 + seg)
        per_k_wide = a_rows * (128 + seg) + b_rows * (128 + seg / 2)
        return per_k_wide / per_k_narrow

    merged = ratio(128 * (1 - CALIBRATED.neighbour_merge * 3 / 4))
    assert ratio(128) < wide.l2_bytes / narrow.l2_bytes < merged
    apart = CALIBRATED.with_(neighbour_merge=0.0)  # neighbours that never read a box together
    unmerged = predict(p, stage_config("sm_90a", 5), H200, stage=5, params=apart)
    wide_apart = predict(p, stage_config("sm_90a", 6), H200, stage=6, params=apart)
    assert wide_apart.l2_bytes / unmerged.l2_bytes == pytest.approx(ratio(128), rel=0.02)
    # the model counts no HBM re-reads: its L2 requests alone make wide B about 7% faster here
    assert 0.9 < wide.seconds / narrow.seconds < 0.95
    # at decode HBM binds: wide B changes little
    d = make_problem("GLM 5.3", 64)
    ratio = (
        predict(d, stage_config("sm_90a", 6), H200, stage=6).seconds
        / predict(d, stage_config("sm_90a", 5), H200, stage=5).seconds
    )
    assert 0.95 < ratio < 1.05


def test_the_epilogue_parameter_is_per_arch():
    p = make_problem("GLM 5.3", 4096)
    cfg90, cfg100 = stage_config("sm_90a", 6), stage_config("sm_100a", 6)
    slow = CALIBRATED.with_(epilogue_s=CALIBRATED.epilogue_s * 2)
    assert (
        predict(p, cfg90, H200, stage=6, params=slow).seconds
        > predict(p, cfg90, H200, stage=6).seconds
    )
    assert predict(p, cfg100, B200, stage=6, params=slow).seconds == pytest.approx(
        predict(p, cfg100, B200, stage=6).seconds
    )


def test_swapped_operands_compute_no_padding_rows():
    from pearl_moe.model import perfmodel

    plain = GemmConfig(arch="sm_90a", tile_m=16, epilogue="direct_store", shift_a_box=True)
    swapped = plain.with_(swap_ab=True)
    assert perfmodel._mma_rows(plain) == 64  # a 64-row wgmma over a 16-row A box
    assert perfmodel._mma_rows(swapped) == 16  # 64 weight rows x 16 tokens per wgmma
    p = make_problem("GLM 5.3", 1, ep=8)  # compute is no bound at 1 token: same time either way
    a, b = predict(p, plain.resolved()), predict(p, swapped.resolved())
    assert a.seconds == pytest.approx(b.seconds, rel=0.02)


def test_neighbours_share_b_boxes_only_while_in_step_and_only_with_1cta_tiles():
    """The L2 term saves ``neighbour_merge`` of a B box's work for tiles whose neighbours read the
    same box, fading over ``drift_rounds`` rounds; 2-CTA tiles share nothing this way."""
    problem = make_problem("GLM 5.3", 4096, ep=8)
    cfg = stage_config("sm_90a", 5)
    base = predict(problem, cfg, H200, stage=5)
    apart = predict(problem, cfg, H200, stage=5, params=CALIBRATED.with_(neighbour_merge=0.0))
    drifting = predict(problem, cfg, H200, stage=5, params=CALIBRATED.with_(drift_rounds=1.0))
    assert base.l2_bytes < drifting.l2_bytes < apart.l2_bytes
    pair = stage_config("sm_100a", 7)
    one = predict(problem, pair, B200, stage=7)
    none = predict(problem, pair, B200, stage=7, params=CALIBRATED.with_(neighbour_merge=0.0))
    assert one.l2_bytes == none.l2_bytes
