"""The ping-pong tile's epilogue through shared memory + TMA: the static SASS of both epilogues
(the trial patch applying to the package: ``test_trial_patches.py``)."""

import json

from analysis import data


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
