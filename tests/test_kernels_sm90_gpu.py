"""The options of the sm_90a kernels on a real Hopper GPU, against an fp32 reference (``pytest -m gpu``).

What both kernel families share (every stage on edge cases, the course models, the fused
activation, unchecked offsets, CUDA graphs, prefill repeats) is in ``test_kernels_gpu.py``, many
tiles a CTA in ``test_multi_tile_gpu.py``; the checks are
:mod:`pearl_moe.diagnostics.gpu_cases`'. Here: the Hopper options in other combinations than the
course's ladder (clusters, ping-pong, 8- to 256-row tiles, swapped operands, tile orders), the
ping-pong ring positions, the walks and A's rows through an index. Inputs are fresh random
numbers, outputs are poisoned with NaN first, and the tolerance is twice PyTorch's own bf16 error
on the same inputs plus a small floor (see pearl_moe.bench.verify).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
        reason="needs a Hopper (sm_90) GPU",
    ),
]

from pearl_moe.bench.verify import random_inputs, run_checked  # noqa: E402
from pearl_moe.diagnostics import gpu_cases  # noqa: E402
from pearl_moe.kernels import grouped_gemm  # noqa: E402
from pearl_moe.kernels.ladder import stage_config  # noqa: E402
from pearl_moe.workloads import MODELS, make_problem  # noqa: E402

#: The options of stages 4-7 in other combinations than the course's ladder (stage, changes).
VARIANTS = {
    "s4-64x256": (4, dict(tile_m=64, tile_n=256)),
    "s4-128x64": (4, dict(tile_n=64)),
    "s6-128x128-wideB": (6, dict(tile_m=128)),
    "s6-64x256-wideB": (6, dict(tile_n=256)),
    "s7-narrowB": (7, dict(b_k_tiles=1)),
    "s7-64x256": (7, dict(tile_n=256)),
    "s7-ring3": (7, dict(ring_depth=3)),
    "s7-128x128": (7, dict(tile_m=128, tile_n=128)),  # one warpgroup, two m64 blocks per tile
    "s7-128x128-narrowB-shiftA": (7, dict(tile_m=128, b_k_tiles=1, shift_a_box=True)),
    # beyond the post: A boxes kept inside A, and tiles of fewer rows than the 64-row wgmma
    "s4-shiftA": (4, dict(shift_a_box=True)),
    "s5-16rows": (5, dict(tile_m=16)),
    "s5-8rows-shiftA": (5, dict(tile_m=8, shift_a_box=True)),
    "s6-16rows-shiftA": (6, dict(tile_m=16, shift_a_box=True)),
    "s7-32rows-shiftA": (7, dict(tile_m=32, shift_a_box=True)),
    # swapped operands: weights as the wgmma's M, tokens as its N
    "s5-16x128-swapAB": (5, dict(tile_m=16, shift_a_box=True, swap_ab=True)),
    "s6-8x128-swapAB": (6, dict(tile_m=8, shift_a_box=True, swap_ab=True)),
    "s6-32x256-swapAB": (6, dict(tile_m=32, tile_n=256, shift_a_box=True, swap_ab=True)),
    "s5-64x128-swapAB-noshift": (5, dict(tile_m=64, swap_ab=True)),
    # 256-row tiles: two consumer warpgroups of 128 rows each (two m64 blocks per k block)
    "s3-256x128": (3, dict(tile_m=256)),
    "s4-256x128": (4, dict(tile_m=256, tile_n=128)),
    "s4-256x192-shiftA": (4, dict(tile_m=256, tile_n=192, shift_a_box=True)),
    # clusters of two CTAs along N sharing A by multicast (an odd count of n tiles leaves the
    # second CTA of the last pair a tile past n: n = 136 with 128-wide tiles, 2816 with 256)
    "s3-128x128-clusterN2": (3, dict(cluster_n=2)),
    "s4-128x256-clusterN2-shiftA": (4, dict(tile_m=128, tile_n=256, cluster_n=2, shift_a_box=True)),
    "s4-256x128-clusterN2": (4, dict(tile_m=256, tile_n=128, cluster_n=2)),
    "s7-128x128-pingpong-clusterN2": (7, dict(tile_m=128, b_k_tiles=1, cluster_n=2)),
    # a ping-pong warpgroup that owns a 128 x 192 tile (192 accumulator registers), and the same
    # in clusters of two along M (quack's default Hopper configuration)
    "s7-128x192-pingpong": (7, dict(tile_m=128, tile_n=192, b_k_tiles=1)),
    # a ping-pong warpgroup's 192-row tile (three m64 blocks), alone and paired along N
    "s7-192x128-pingpong": (7, dict(tile_m=192, tile_n=128, b_k_tiles=1, ring_depth=None)),
    "s7-192x128-pingpong-clusterN2-shiftA": (
        7,
        dict(tile_m=192, tile_n=128, b_k_tiles=1, cluster_n=2, shift_a_box=True, ring_depth=None),
    ),
    "s7-128x192-pingpong-clusterM2": (7, dict(tile_m=128, tile_n=192, b_k_tiles=1, cluster_m=2)),
    # and along N, sharing A (quack-tuned's choice on one held-out 4096-token down projection)
    "s7-128x192-pingpong-clusterN2": (7, dict(tile_m=128, tile_n=192, b_k_tiles=1, cluster_n=2)),
    # below prefill the tuner pairs every tile along N (an expert's rows fill one or two m tiles):
    # 128 x 192 alone, with the TMA store and the direct store
    "s3-128x192-clusterN2": (3, dict(tile_n=192, cluster_n=2, ring_depth=None)),
    "s4-128x192-clusterN2-shiftA": (4, dict(tile_n=192, cluster_n=2, shift_a_box=True)),
    # clusters of two CTAs along M sharing B (an odd count of m tiles in an expert leaves the
    # second CTA rows past the expert: computed, never stored)
    "s3-128x128-clusterM2": (3, dict(cluster_m=2)),
    "s4-128x256-clusterM2": (4, dict(tile_m=128, tile_n=256, cluster_m=2)),
    "s7-128x128-pingpong-clusterM2-shiftA": (
        7,
        dict(tile_m=128, b_k_tiles=1, cluster_m=2, shift_a_box=True),
    ),
    # tiles in groups of n tiles, odd groups walking m backwards (groups of 2: the edge cases'
    # 3-4 n tiles give a second, narrower group), also in clusters along M
    "s7-128x128-pingpong-ng2": (7, dict(tile_m=128, b_k_tiles=1, n_group=2)),
    "s3-128x128-clusterM2-ng2": (3, dict(cluster_m=2, n_group=2)),
    "s4-ng8": (4, dict(n_group=8)),
    # the tile scheduler's first walk (one expert per dependent load)
    "s6-serialwalk": (6, dict(walk="serial")),
    "s7-serialwalk": (7, dict(walk="serial")),
}


def _check(stage, counts, n, k, W=None, seed=0, cu_seqlens=False, config=None):
    case = gpu_cases.Case("", stage, config, tuple(counts), n, k)
    res = gpu_cases.check_case(case, seed=seed, W=W, cu_seqlens=cu_seqlens)
    assert res["ok"], res
    return res


EDGE_CASES = [
    ((0, 37, 0, 0, 200, 0, 1, 0), 2816, 4096),
    ((5, 127, 129, 0, 3), 136, 200),
    ((1,), 4096, 6144),
    ((300, 0, 0, 0), 1024, 1024),
    # 3 n tiles of 128 (or 2 of 256, the second partial): with 2-CTA clusters the second CTA of
    # the last pair gets a tile wholly past n
    ((70, 0, 260, 9), 384, 512),
]


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("counts, n, k", EDGE_CASES)
def test_option_variants(variant, counts, n, k):
    stage, changes = VARIANTS[variant]
    config = stage_config("sm_90a", stage).with_(**changes)
    _check(stage, counts, n, k, seed=len(counts), config=config)


#: Ping-pong edge cases for the ring positions a warpgroup moves over the other's tiles: one K
#: tile (a single step), B entries of two K tiles over an odd count of K tiles (the B ring moves
#: ceil(k_tiles / 2) entries a tile), and K tiles a multiple of the ring depth (the phase bits).
PINGPONG_RING_CASES = {
    "one-k-tile": (dict(tile_m=128, b_k_tiles=1), lambda depth: 64),
    "wide-b-odd-k-tiles": (dict(b_k_tiles=2), lambda depth: 192),
    "k-tiles-twice-the-ring": (dict(tile_m=128, b_k_tiles=1), lambda depth: 2 * depth * 64),
}


@pytest.mark.parametrize("case", list(PINGPONG_RING_CASES))
def test_pingpong_ring_positions_over_the_other_warpgroups_tiles(case):
    """Enough tiles that every CTA runs several (432 tiles of 128 x 128 on 132 CTAs; 64-row tiles
    more), so both warpgroups skip the other's tiles many times, at the K counts where stepping
    the ring positions could go wrong."""
    changes, k_of = PINGPONG_RING_CASES[case]
    config = stage_config("sm_90a", 7).with_(**changes).resolved()
    assert config.acc_slots == 2
    _check(7, (1500, 0, 1025, 7, 600), 2048, k_of(config.ring_depth), seed=3, config=config)


#: (n, k, shift_a_box): 2-3 tiles a CTA of 132 at n = 2048, 9-10 at 8192 (the ring wraps at one
#: K tile, the turn passes back and forth); a K tail (200 = 3 K tiles + 8) and K tiles twice the
#: ring (640); A boxes kept inside A.
MANY_192_ROW_TILES = {
    "n2048-k64": (2048, 64, False),
    "n8192-k64": (8192, 64, False),
    "n8192-k200-shiftA": (8192, 200, True),
    "n2048-k640": (2048, 640, False),
}


@pytest.mark.parametrize("case", list(MANY_192_ROW_TILES))
@pytest.mark.parametrize("cluster_n", (1, 2))
def test_192_row_pingpong_tiles_over_many_tiles(cluster_n, case):
    """Experts of 1500 and 1025 rows end 156 and 65 rows into their last 192-row tile, one of 7
    rows fits in one, an empty one has none; both ping-pong warpgroups take several tiles."""
    n, k, shift = MANY_192_ROW_TILES[case]
    config = stage_config("sm_90a", 7).with_(
        tile_m=192, tile_n=128, b_k_tiles=1, cluster_n=cluster_n, shift_a_box=shift,
        ring_depth=None,
    ).resolved()  # fmt: skip
    _check(7, (1500, 0, 1025, 7, 600), n, k, seed=13, config=config)


@pytest.mark.parametrize("walk", ("warp-parallel", "serial"))
def test_walks_over_many_ragged_experts(walk):
    """112 experts (four 32-lane steps of the warp-parallel walk), skewed routing: empty experts
    and experts that end mid-tile on both sides of each 32-expert boundary."""
    p = make_problem("Kimi K3", 64, ep=8, routing="skewed", seed=5)
    config = stage_config("sm_90a", 6).with_(walk=walk)
    _check(6, p.counts, p.n, p.k, seed=5, config=config)


@pytest.mark.parametrize(
    "stage, changes",
    [(7, dict(tile_m=128, b_k_tiles=1, n_group=8)),
     (3, dict(tile_n=192, cluster_m=2, n_group=8, ring_depth=None))],
)  # fmt: skip
def test_a_grouped_tile_order_is_right_at_prefill(stage, changes):
    """Groups of 8 n tiles at prefill (Kimi K3, 4096 tokens, skewed: 48 n tiles of 128, 32 of
    192, so many groups and both directions over m), every tile written once."""
    p = make_problem("Kimi K3", 4096, ep=8, routing="skewed", seed=11)
    config = stage_config("sm_90a", stage).with_(**changes)
    _check(stage, p.counts, p.n, p.k, seed=11, config=config)


#: gather_a configurations (stage, config): TMA store and direct store, 64 to 256 rows, ping-pong
GATHERED = {
    "s3-128x128-gatherA-tma": (3, stage_config("sm_90a", 3).with_(gather_a=True)),
    "s4-128x128-gatherA-direct": (4, stage_config("sm_90a", 4).with_(gather_a=True)),
    "s5-64x128-gatherA-direct": (5, stage_config("sm_90a", 5).with_(gather_a=True)),
    "s3-256x128-gatherA-tma": (3, stage_config("sm_90a", 3).with_(tile_m=256, gather_a=True)),
    "s7-pingpong-gatherA": (7, stage_config("sm_90a", 7).with_(b_k_tiles=1, gather_a=True)),
}
GATHER_CASES = [
    ((0, 37, 0, 0, 200, 0, 1, 0), 2816, 4096),  # zero-row experts, ragged ends
    ((5, 127, 129, 0, 3), 136, 200),  # k not a multiple of tile_k (zero-filled K tail)
    ((70, 0, 260, 9), 384, 512),
    ((1,), 4096, 6144),  # a single row
]


def _top_k_index(rows, tokens, seed):
    """A random permutation of the rows folded onto ``tokens`` tokens: every token appears about
    ``rows / tokens`` times (top-k routing), in no order."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    perm = torch.randperm(rows, generator=g, device="cuda")
    return (perm % tokens).to(torch.int32)


@pytest.mark.parametrize("name", list(GATHERED))
@pytest.mark.parametrize("counts, n, k", GATHER_CASES)
def test_gather_a_equals_the_materialized_gather(name, counts, n, k):
    """``grouped_gemm(x, W, offs, a_index=idx)`` against the fp32 reference of ``x[idx]``, and bit
    for bit against the same tile on the copy ``x[idx]`` (the same wgmma on the same values)."""
    stage, config = GATHERED[name]
    rows = sum(counts)
    tokens = max(1, (rows + 1) // 2)  # fewer tokens than rows: the index repeats them
    g = torch.Generator(device="cuda").manual_seed(rows)
    x = torch.randn(tokens, k, generator=g, device="cuda").to(torch.bfloat16)
    _, W, offs = random_inputs(counts, n, k, seed=rows)
    idx = _top_k_index(rows, tokens, seed=rows)
    gathered = x[idx.long()]
    res = run_checked(
        lambda _A, W, o, out: grouped_gemm(
            x, W, o, out=out, stage=stage, config=config, a_index=idx
        ),
        gathered,
        W,
        offs,
        offs.tolist(),
    )
    assert res["ok"], res
    out = grouped_gemm(x, W, offs, stage=stage, config=config, a_index=idx)
    plain = grouped_gemm(gathered, W, offs, stage=stage, config=config.with_(gather_a=False))
    torch.cuda.synchronize()
    assert torch.equal(out, plain)


def _course_gather_picks():
    """The MoE layer's gate+up gather picks (``api.default_choice(..., gather=True)``, from the
    H200 table the package ships) at the course models' prefill token counts, plain and fused:
    the 128-row and wider tiles :func:`api.with_gather` keeps (a tile the layer runs only
    there), each ``(id, n, k, stage, config)`` once."""
    from pearl_moe.kernels import api

    picks, seen = [], set()
    for model in ("GLM 5.3", "DeepSeek V4 Pro", "Kimi K3"):
        for tokens in (1024, 4096):
            p = make_problem(MODELS[model], tokens, ep=8, projection="gate_up")
            for activation in (None, "swiglu"):
                stage, config = api.default_choice(
                    "sm_90a", p.n, p.k, p.experts, p.rows, "H200", activation, gather=True
                )
                key = (p.n, p.k, stage, config)
                if key not in seen:
                    seen.add(key)
                    picks.append((f"{model}-{tokens}-{config.describe()}", p.n, p.k, stage, config))
    return picks


COURSE_GATHER_PICKS = _course_gather_picks()


@pytest.mark.parametrize("pick", COURSE_GATHER_PICKS, ids=[p[0] for p in COURSE_GATHER_PICKS])
def test_the_layers_gather_picks_at_prefill(pick):
    """Each such pick on the course model's (n, k), ragged counts with a tokenless expert (fewer
    rows than the layer, the same kernel), fused ones on interleaved weights: against the fp32
    reference of the materialized gather ``x[idx]``, into a NaN-poisoned output."""
    from pearl_moe.bench.verify import compare, reference
    from pearl_moe.kernels import interleave_gate_up
    from pearl_moe.moe.reference import gated, grouped_mm_loop

    _, n, k, stage, config = pick
    counts = (300, 0, 517, 129)
    rows, tokens = sum(counts), 400
    g = torch.Generator(device="cuda").manual_seed(n + k)
    x = torch.randn(tokens, k, generator=g, device="cuda").to(torch.bfloat16)
    _, W, offs = random_inputs(counts, n, k, seed=n + k)
    idx = _top_k_index(rows, tokens, seed=n + k)
    gathered, host = x[idx.long()], offs.tolist()
    if config.activation is None:
        res = run_checked(
            lambda _A, W, o, out: grouped_gemm(x, W, o, out=out, stage=stage, config=config,
                                               a_index=idx),
            gathered, W, offs, host,
        )  # fmt: skip
        assert res["ok"], (config.describe(), res)
        return
    out = torch.full((rows, n // 2), float("nan"), dtype=torch.bfloat16, device="cuda")
    grouped_gemm(x, interleave_gate_up(W), offs, out=out, stage=stage, config=config,
                 activation=config.activation, a_index=idx)  # fmt: skip
    torch.cuda.synchronize()
    ref = gated(reference(gathered, W, host), config.activation)
    torch_out = gated(grouped_mm_loop(gathered, W, host), config.activation).to(torch.bfloat16)
    res = compare(out, ref, torch_out)
    assert res["ok"], (config.describe(), res)


def test_gather_a_default_config_and_unchecked_call():
    """No config: the tuned pick with the gather (or the plain 128 x 128 gather tile);
    ``check=False`` skips the host copies and gives the same output."""
    counts, n, k = (0, 37, 0, 0, 200, 0, 1, 0), 2816, 4096
    rows = sum(counts)
    x = torch.randn(100, k, device="cuda").to(torch.bfloat16)
    _, W, offs = random_inputs(counts, n, k, seed=3)
    idx = _top_k_index(rows, 100, seed=3)
    res = run_checked(
        lambda _A, W, o, out: grouped_gemm(x, W, o, out=out, a_index=idx),
        x[idx.long()],
        W,
        offs,
        offs.tolist(),
    )
    assert res["ok"], res
    checked = grouped_gemm(x, W, offs, a_index=idx)
    unchecked = grouped_gemm(x, W, offs, a_index=idx, check=False)
    torch.cuda.synchronize()
    assert torch.equal(checked, unchecked)
