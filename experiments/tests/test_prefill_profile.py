"""The prefill profile: L2 sectors against the sectors the TMA boxes hold."""

from analysis import data, ncu_metrics


def test_l2_merge():
    """L2 requests against the sectors the TMA boxes hold (GLM 5.3, 4096 tokens)."""
    from pearl_moe.bench.baselines import parse_variant, variant_config
    from pearl_moe.config import resolve
    from pearl_moe.hardware import H200
    from pearl_moe.model.perfmodel import _structure
    from pearl_moe.workloads import make_problem

    impls = [  # the order of the Nsight Compute step of power_cap/device_power_probe.sh
        "pearl-s3",
        "pearl-s5",
        "pearl-s6",
        "pearl-s6:walk=serial",
        "pearl-s7:tile_m=64+tile_n=256+b_k_tiles=1+shift_a_box=true",
        "pearl-s7:tile_m=128+tile_n=128+shift_a_box=true",
        "pearl-s3:tile_m=128+tile_n=256+ring_depth=4",
        "pearl-s3:tile_m=64+tile_n=64",
        "pearl-s3:tile_m=64+tile_n=256",
    ]
    by = ncu_metrics(data("prefill_profile", "ncu_glm4096.csv"))
    p = make_problem("GLM 5.3", 4096, ep=8)
    merge = {}
    for i, name in enumerate(impls):
        stage, overrides = parse_variant(name)
        c = resolve(variant_config("sm_90a", stage, overrides), H200)
        _, _, tiles = _structure(tuple(p.counts), p.k, p.n, c, stage, H200.sms)
        box_sectors = tiles * (p.k // c.tile_k) * (c.cta_tile_m + c.cta_tile_n) * c.tile_k * 2 / 32
        merge[name] = by[i]["lts__t_sectors.sum"] / box_sectors
    assert 0.545 <= min(merge.values()) and max(merge.values()) <= 0.965  # "0.55-0.96"
    assert 0.545 <= merge[impls[8]] <= merge[impls[4]] <= 0.605  # 64 x 256
    assert 0.605 <= merge[impls[6]] <= 0.615 and 0.955 <= merge[impls[7]] <= 0.965
    requests = {name: by[i]["lts__t_requests.sum"] for i, name in enumerate(impls)}
    assert 0.77 <= requests["pearl-s6"] / requests["pearl-s5"] <= 0.79  # "cut by 22%"
    assert 165e6 <= requests[impls[5]] <= 170e6 and 169e6 <= requests["pearl-s3"] <= 171e6
