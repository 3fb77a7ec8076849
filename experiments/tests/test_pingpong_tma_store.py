"""The ping-pong tile's epilogue through shared memory + TMA: the static SASS of both epilogues
and the A/B that decided it (the trial patch applying to the package: ``test_trial_patches.py``)."""

import json

from analysis import ab_ratios, data

from pearl_moe.bench.compare import geomean

#: the ping-pong tile the A/B timed with either epilogue (quack's default configuration)
DIRECT = "pearl-s7:tile_m=128+tile_n=192+b_k_tiles=1+cluster_m=2"


def test_the_direct_store_transposes_in_registers_where_stmatrix_and_tma_need_no_shuffles():
    """128 x 192 ping-pong in clusters of two along M (MiniMax-M2's down at 4096 tokens): the
    direct store writes 24 16-byte STG per thread after 100 SHFL and 404 SEL (a quad transpose
    per 32 columns), 1776 instructions in all; through a buffer set per warpgroup it is 24 STSM
    and 6 TMA stores, 1192 instructions, at one ring entry less (4 of 40 KB) to fit 2 x 3 x 8 KB
    of epilogue buffers in 227 KB."""
    runs = json.loads(data("pingpong_tma_store", "sass_epilogue.json").read_text())["runs"]
    direct, tma = runs["direct"], runs["tma"]
    assert direct["config"] == "sm_90a 128x192x64 1cta r5 clusterM2 direct pingpong"
    assert tma["config"] == "sm_90a 128x192x64 1cta r4 clusterM2 tma pingpong"
    assert (direct["instructions"], direct["SEL"], direct["SHFL"], direct["STG"]) == (
        1776,
        404,
        100,
        24,
    )
    assert (tma["instructions"], tma["STSM"], tma["UTMASTG"], tma["STG"]) == (1192, 24, 6, 0)
    assert direct["HGMMA"] == tma["HGMMA"] == 8
    assert tma["smem_bytes"] == 213120 <= 227 * 1024


def _ratios(reference: str) -> dict:
    return ab_ratios("pingpong_tma_store", "pingpong_tma_ab.json.gz", reference)


def test_the_tma_store_took_longer_than_the_direct_store_on_an_h100():
    """The held-out set's 20 layers at 4096 tokens, six interleaved rounds: the 128 x 192
    ping-pong tile in clusters along M took 1.015x the direct store's time with the TMA store
    (0.984-1.069x; MiniMax-M2's down 1.058x at EP=1 and 0.998x at EP=8, Qwen3-235B-A22B's down
    at EP=1 1.062x); the default call took 0.968x quack's default (worst 1.041, MiniMax-M2's
    down at EP=8)."""
    tma = _ratios(DIRECT)[DIRECT + "+epilogue=tma_store"]
    assert len(tma) == 20
    assert round(geomean(list(tma.values())), 3) == 1.015
    assert (round(min(tma.values()), 3), round(max(tma.values()), 3)) == (0.984, 1.069)
    assert round(tma["MiniMax-M2|down|4096|EP1|balanced"], 3) == 1.058
    assert round(tma["MiniMax-M2|down|4096|EP8|balanced"], 3) == 0.998
    assert round(tma["Qwen3-235B-A22B|down|4096|EP1|balanced"], 3) == 1.062
    ours = _ratios("quack")["pearl"]
    assert round(geomean(list(ours.values())), 3) == 0.968
    worst = max(ours, key=ours.get)
    assert (worst, round(ours[worst], 3)) == ("MiniMax-M2|down|4096|EP8|balanced", 1.041)
