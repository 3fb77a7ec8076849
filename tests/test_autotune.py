"""The tuned default of ``grouped_gemm``: buckets, the heuristic, the per-GPU table, the candidate
space, and the wiring of ``stage=None`` / ``config=None`` in the public call (CPU, fake GPU)."""

from __future__ import annotations

import functools
import json
import math
import types
from dataclasses import asdict

import pytest
import torch

from pearl_moe.bench import candidates, table_studies
from pearl_moe.config import GemmConfig
from pearl_moe.kernels import api, autotune
from pearl_moe.kernels.ladder import stage_config
from pearl_moe.results import read_run

GLM = (4096, 6144, 32)  # n, k, local experts at EP=8


pytestmark = pytest.mark.usefixtures("package_tuning_table")  # tests/conftest.py


def _table(entries, gpu="H200", arch="sm_90a"):
    return {"schema": autotune.TABLE_SCHEMA, "gpu": gpu, "arch": arch, "entries": entries}


def _entry(bucket, config, stage=3, shape=GLM):
    n, k, e = shape
    return {
        "n": n,
        "k": k,
        "experts": e,
        "bucket": bucket,
        "stage": stage,
        "config": asdict(config),
    }


def test_buckets_are_octaves_of_rows_per_expert():
    assert autotune.rows_bucket(8, 32) == -2  # GLM, 1 token: 1/4 row per expert
    assert autotune.rows_bucket(512, 32) == 4  # 64 tokens: 16 rows per expert
    assert autotune.rows_bucket(64 * 16, 112) == 3  # Kimi K3, 64 tokens: 9.1 rows per expert
    assert autotune.rows_bucket(0, 32) == -8
    # the measured token counts of one model never share a bucket
    for experts, top_k in ((32, 8), (48, 6), (112, 16)):
        buckets = [autotune.rows_bucket(t * top_k, experts) for t in (1, 16, 64, 256, 1024, 4096)]
        assert len(set(buckets)) == 6


def test_heuristic_follows_the_h200_measurements():
    autotune.use_table(_table([]))  # no measured entries: the heuristic answers
    one = autotune.pick("sm_90a", *GLM, rows=8)
    assert (one.config.tile_m, one.config.tile_n) == (64, 256) and one.stage == 3
    assert one.source.startswith("heuristic")
    decode = autotune.pick("sm_90a", *GLM, rows=512)
    assert (decode.config.tile_m, decode.config.tile_n) == (64, 128)
    assert decode.config.ring_depth == GemmConfig(arch="sm_90a", tile_m=64).resolved().ring_depth
    prefill = autotune.pick_config("sm_90a", *GLM, rows=4096 * 8)
    assert prefill == (3, stage_config("sm_90a", 3).resolved())
    assert autotune.pick_config("sm_100a", *GLM, rows=512) == (
        3,
        stage_config("sm_100a", 3).resolved(),
    )


def test_table_entry_wins_then_the_neighbours_vote_then_heuristic(tmp_path, monkeypatch):
    wide = GemmConfig(arch="sm_90a", tile_m=64, tile_n=256, tile_k=64, ring_depth=4)
    path = tmp_path / "H200.json"
    path.write_text(json.dumps(_table([_entry(4, wide)])))
    monkeypatch.setenv(autotune.ENV_TABLE, str(path))
    autotune.clear_cache()
    exact = autotune.pick("sm_90a", *GLM, rows=512)
    assert exact.config == wide and exact.source.startswith("table H200")
    near = autotune.pick("sm_90a", *GLM, rows=2048)  # bucket 6: two octaves away
    assert near.config == wide and "vote of 1 nearest" in near.source
    far = autotune.pick("sm_90a", *GLM, rows=4096 * 8)  # bucket 10: beyond MAX_DISTANCE
    assert far.source.startswith("heuristic")
    other = autotune.pick("sm_90a", 6144, 7168, 48, rows=384)  # a shape near the entry's
    assert other.config == wide and "vote" in other.source
    tiny = autotune.pick("sm_90a", 256, 512, 4, rows=4096)  # nothing measured near it
    assert tiny.source.startswith("heuristic")
    # a GPU of the same arch with no table of its own is served by the H200's
    borrowed = autotune.pick("sm_90a", *GLM, rows=512, gpu="H100")
    assert borrowed.config == wide and borrowed.source.startswith("table H200 (for H100): ")
    assert autotune.table_gpus("sm_90a", "H100") == ["H100", "H200"]
    assert autotune.table_gpus("sm_90a", "H200") == ["H200"]
    assert autotune.table_gpus("sm_100a", "B300") == ["B300"]  # no sm_100a table to borrow
    assert autotune.pick("sm_100a", *GLM, rows=512, gpu="B300").source.startswith("heuristic")
    monkeypatch.setenv(autotune.ENV_TABLE, "off")
    autotune.clear_cache()
    assert autotune.pick("sm_90a", *GLM, rows=512).source.startswith("heuristic")


def test_a_gpus_own_table_comes_first_and_the_borrowed_one_serves_the_rest(tmp_path, monkeypatch):
    """Both tables on disk at once: an H100 with a table of a few shapes of its own takes its own
    entry (and its own vote) where it has one, and the H200's for every other shape; the H200
    never reads the H100's."""
    wide = GemmConfig(arch="sm_90a", tile_m=64, tile_n=256, tile_k=64, ring_depth=4)
    narrow = GemmConfig(arch="sm_90a", tile_m=64, tile_n=64, tile_k=64, ring_depth=8)
    other = (2048, 1024, 8)  # a layer far from GLM's in every dimension
    (tmp_path / "H200.json").write_text(
        json.dumps(_table([_entry(4, wide), _entry(-1, wide, shape=other)]))
    )
    (tmp_path / "H100.json").write_text(json.dumps(_table([_entry(4, narrow)], gpu="H100")))
    monkeypatch.delenv(autotune.ENV_TABLE, raising=False)
    monkeypatch.setattr(autotune, "TABLE_DIR", tmp_path)
    autotune.clear_cache()
    own = autotune.pick("sm_90a", *GLM, rows=512, gpu="H100")
    assert own.config == narrow and own.source.startswith("table H100: ")
    voted = autotune.pick("sm_90a", *GLM, rows=2048, gpu="H100")  # its own entry's neighbour
    assert voted.config == narrow and voted.source.startswith("table H100: vote")
    far = autotune.pick("sm_90a", *other, rows=4, gpu="H100")  # nothing of its own near
    assert far.config == wide and far.source.startswith("table H200 (for H100): ")
    assert autotune.pick("sm_90a", *GLM, rows=512, gpu="H200").config == wide
    autotune.clear_cache()


def test_a_borrowed_entry_for_the_very_shape_comes_before_the_own_vote(tmp_path, monkeypatch):
    """An H100 whose own table only has a neighbour of the shape takes the H200's entry for the
    shape itself (both tables of 132 SMs), and its own vote where the H200 has no entry either; a
    GPU of another SM count (a PCIe card's 114) votes with its own table first."""
    wide = GemmConfig(arch="sm_90a", tile_m=64, tile_n=256, tile_k=64, ring_depth=4)
    narrow = GemmConfig(arch="sm_90a", tile_m=64, tile_n=64, tile_k=64, ring_depth=8)
    (tmp_path / "H200.json").write_text(json.dumps({**_table([_entry(6, wide)]), "sm_count": 132}))
    own = {**_table([_entry(4, narrow)], gpu="H100"), "sm_count": 132}
    (tmp_path / "H100.json").write_text(json.dumps(own))
    monkeypatch.delenv(autotune.ENV_TABLE, raising=False)
    monkeypatch.setattr(autotune, "TABLE_DIR", tmp_path)
    autotune.clear_cache()
    assert autotune.rows_bucket(2048, GLM[2]) == 6
    entry = autotune.pick("sm_90a", *GLM, rows=2048, gpu="H100")
    assert entry.config == wide and entry.source.startswith("table H200 (for H100): ")
    voted = autotune.pick("sm_90a", *GLM, rows=1024, gpu="H100")  # bucket 5: no entry anywhere
    assert voted.config == narrow and voted.source.startswith("table H100: vote")
    (tmp_path / "H100.json").write_text(json.dumps({**own, "sm_count": 114}))
    autotune.clear_cache()
    pcie = autotune.pick("sm_90a", *GLM, rows=2048, gpu="H100")
    assert pcie.config == narrow and pcie.source.startswith("table H100: vote")
    autotune.clear_cache()


def test_a_neighbours_wave_fitted_tile_is_voted_for_at_this_shapes_wave_width():
    """At one row per expert the tuner times each shape's own wave-fitted width: a neighbour
    whose fastest tile is its own (n = 12288 over 4 active experts: 192 columns, 256 tiles,
    two nearly full waves) votes for the same tile at this shape's width (n = 12800 over 2:
    224 columns, 116 tiles in one wave), a width it never timed; with the twins off it cannot;
    above one row per expert the vote keeps to the timed widths."""
    base = GemmConfig(arch="sm_90a", tile_m=16, tile_n=128, tile_k=64, shift_a_box=True,
                      epilogue="direct_store")  # fmt: skip
    s5 = lambda c: "s5 " + c.resolved().describe()  # noqa: E731
    fitted, plain = base.with_(tile_n=192), base
    there = (12288, 4096, 16)
    assert autotune.wave_width(12288, 4) == 192 and autotune.wave_width(12800, 2) == 224
    entry = _timed(there, 0.25, {s5(fitted): 100.0, s5(plain): 104.0})
    near = [(0.5, entry)]
    voted = autotune.vote(near, "sm_90a", 12800, 4096, 2 / 16, experts=16)
    assert voted[0][2] == base.with_(tile_n=224).resolved()
    try:
        autotune.WAVE_TWINS = False
        off = autotune.vote(near, "sm_90a", 12800, 4096, 2 / 16, experts=16)
    finally:
        autotune.WAVE_TWINS = True
    assert {c.tile_n for _, _, c in off} == {128, 192}
    entry16 = _timed(there, 16, {s5(fitted): 100.0, s5(plain): 104.0})
    busy = autotune.vote([(0.5, entry16)], "sm_90a", 12800, 4096, 16.0, experts=16)
    assert {c.tile_n for _, _, c in busy} == {128, 192}


def test_entries_the_kernels_cannot_run_are_skipped():
    direct = stage_config("sm_90a", 3).with_(epilogue="direct_store")
    good = GemmConfig(arch="sm_90a", tile_m=64, tile_n=64, tile_k=64)
    entries = [
        _entry(4, direct, stage=3),  # stage 3 has no direct store: refused by the ladder
        _entry(4, good, stage=9),  # no such stage
        _entry(4, GemmConfig(arch="sm_100a"), stage=3),  # another architecture
        _entry(5, good, stage=3),  # the next bucket: taken instead
    ]
    autotune.use_table(_table(entries))
    choice = autotune.pick("sm_90a", *GLM, rows=512)
    assert choice.config == good.resolved() and "vote" in choice.source


def _timed(shape, rpe, times, skewed=None):
    """A table entry as the tuner writes it: every candidate's time by label ("s<stage> ...")."""
    n, k, e = shape
    best = min(times, key=times.get)
    stage, label = best.split(" ", 1)
    entry = {
        "n": n, "k": k, "experts": e, "bucket": autotune.rows_bucket(round(rpe * e), e),
        "rows_per_expert": rpe, "stage": int(stage[1:]), "label": label,
        "config": asdict(GemmConfig.from_label(label)), "candidates": times,
    }  # fmt: skip
    if skewed:
        entry["skewed_candidates"] = skewed
    return entry


A = "s6 sm_90a 16x128x64 1cta r12 B2 shiftA direct"
B = "s6 sm_90a 32x256x64 1cta r6 B2 shiftA direct"
C = "s5 sm_90a 64x128x64 1cta r9 shiftA direct"


def test_the_vote_picks_what_is_fast_across_the_neighbours_not_one_neighbours_winner():
    # The nearest entry prefers A by 1%; its two neighbours find A 20% slower than B.
    entries = [
        _timed((4096, 4096, 32), 2, {A: 100.0, B: 101.0, C: 130.0}),
        _timed((4096, 4096, 32), 8, {A: 120.0, B: 100.0, C: 110.0}),
        _timed((8192, 4096, 32), 4, {A: 120.0, B: 100.0, C: 140.0}),
    ]
    autotune.use_table(_table(entries))
    choice = autotune.pick("sm_90a", 4096, 4096, 32, rows=32 * 3)  # 3 rows per expert
    assert choice.config.describe() == B.split(" ", 1)[1] and choice.stage == 6
    assert "vote of 3 nearest" in choice.source
    near = autotune.neighbours(autotune.load_table("H200"), 4096, 4096, 32, 32 * 3)
    assert [e["rows_per_expert"] for _, e in near] == [2, 4, 8]
    scores = {c.describe(): s for s, _, c in autotune.vote(near, "sm_90a", 4096, 4096, 3)}
    assert scores[B.split(" ", 1)[1]] < scores[A.split(" ", 1)[1]] < scores[C.split(" ", 1)[1]]
    assert min(scores.values()) >= 1.0
    # a measured shape keeps its own pick
    assert autotune.pick("sm_90a", 4096, 4096, 32, rows=64).config.describe() == A.split(" ", 1)[1]


def test_the_vote_charges_untimed_candidates_and_asks_for_the_skewed_worst_case():
    # B was timed only at the far entry; skewed routing makes A 30% slower at the near one.
    entries = [
        _timed((4096, 4096, 32), 16, {A: 100.0, C: 102.0}, skewed={A: 130.0, C: 101.0}),
        _timed((4096, 4096, 32), 64, {B: 90.0, C: 100.0}),
    ]
    autotune.use_table(_table(entries))
    near = autotune.neighbours(autotune.load_table("H200"), 4096, 4096, 32, 32 * 16)
    scores = {c.describe(): s for s, _, c in autotune.vote(near, "sm_90a", 4096, 4096, 16)}
    label = {x: x.split(" ", 1)[1] for x in (A, B, C)}
    # Near (16 rows per expert): C 1.02 (the worse of balanced 1.02 and skewed 1.00), A 1.30;
    # far (64): B best, C 1.11 there. B's 32-row tile takes 2 m tiles there and 1 here, so its
    # time carries over shorter and it stays the far entry's best.
    assert scores[label[C]] < scores[label[B]] < scores[label[A]]
    w_near, w_far = 1 / 0.5, 1 / (2 + 0.5)
    expect_b = (autotune.UNTIMED**w_near) ** (1 / (w_near + w_far))
    assert scores[label[B]] == pytest.approx(expect_b)


def test_a_tile_that_needs_more_m_tiles_here_is_charged_for_them():
    # At 32 rows per expert the 32-row tile B is best; at 48 it needs two m tiles per expert.
    entries = [_timed((4096, 4096, 32), 32, {B: 100.0, C: 104.0})]
    autotune.use_table(_table(entries))
    near = autotune.neighbours(autotune.load_table("H200"), 4096, 4096, 32, 32 * 48)
    scores = {c.tile_m: s for s, _, c in autotune.vote(near, "sm_90a", 4096, 4096, 48)}
    assert scores[64] == 1.0 and scores[32] == pytest.approx(2**autotune.M_TILE_EXPONENT / 1.04)
    assert autotune.pick("sm_90a", 4096, 4096, 32, rows=32 * 48).config.tile_m == 64


W96 = "s6 sm_90a 16x96x64 1cta r14 B2 shiftA direct"
SWAP = "s6 sm_90a 16x256x64 1cta r6 B2 shiftA swapAB direct"  # weight rows as M: not fusable
TMA = "s3 sm_90a 64x256x64 1cta r5 tma"  # a TMA store: the fused epilogue stores directly


def test_a_fused_activation_runs_a_tile_that_was_timed():
    """With the activation in the epilogue the pick is a timed candidate that runs it as
    measured (direct store, width a multiple of 32 on sm_90a, no swap): the entry's winner if it is one,
    else the fastest such candidate of the entry, else the vote among such candidates; the
    plain pick (adapted by the caller) only when no neighbour timed one."""
    label = lambda x: x.split(" ", 1)[1]  # noqa: E731
    entries = [
        _timed(GLM, 1 / 4, {SWAP: 100.0, TMA: 101.0, B: 104.0, A: 106.0}),
        _timed(GLM, 2, {A: 100.0, SWAP: 103.0}),
        _timed((4096, 4096, 32), 1 / 4, {SWAP: 100.0, B: 103.0, A: 108.0}),
    ]
    autotune.use_table(_table(entries))
    plain = autotune.pick("sm_90a", *GLM, rows=8)
    assert plain.config.describe() == label(SWAP)
    fused = autotune.pick("sm_90a", *GLM, rows=8, fused=True)
    assert fused.config.describe() == label(B) and fused.stage == 6  # 1.04x: the fastest ready
    assert "fused activation runs as measured: 1.040x" in fused.source
    assert autotune.activation_ready(fused.config) and not autotune.activation_ready(plain.config)
    # the entry's winner is ready: the same pick either way
    assert autotune.pick("sm_90a", *GLM, rows=64, fused=True) == autotune.pick(
        "sm_90a", *GLM, rows=64
    )
    # no entry for this shape: the vote, among ready candidates only
    voted = autotune.pick("sm_90a", 4096, 5120, 32, rows=8, fused=True)
    assert voted.config.describe() == label(B)
    assert "among tiles a fused activation runs as measured" in voted.source
    assert autotune.pick("sm_90a", 4096, 5120, 32, rows=8).config.describe() == label(SWAP)
    # no neighbour timed a ready candidate: the plain pick
    autotune.use_table(_table([_timed(GLM, 1 / 4, {SWAP: 100.0, TMA: 104.0})]))
    assert autotune.pick("sm_90a", *GLM, rows=8, fused=True) == autotune.pick(
        "sm_90a", *GLM, rows=8
    )


def test_a_96_wide_winner_is_the_fused_pick_on_sm90():
    """On sm_90a the fused epilogue takes widths that are multiples of 32: a 96-wide winner is
    the fused pick itself, and ``fuse_activation`` loses nothing by fusing."""
    label = lambda x: x.split(" ", 1)[1]  # noqa: E731
    autotune.use_table(_table([{**_timed(GLM, 1 / 4, {W96: 100.0, B: 104.0}), "median_us": 1e2}]))
    fused = autotune.pick("sm_90a", *GLM, rows=8, fused=True)
    assert fused.config.describe() == label(W96) and fused == autotune.pick("sm_90a", *GLM, rows=8)
    assert autotune.fuse_activation("sm_90a", *GLM, rows=8)


def test_the_activation_is_fused_unless_its_tiles_lose_more_than_a_pass_costs():
    """``fuse_activation``: fuse, unless the entry's fastest activation-ready tile is slower than
    its fastest tile by more than a separate activation pass costs (7 us plus 7 ps an output)."""
    entry = _timed(GLM, 1 / 4, {SWAP: 100.0, TMA: 101.0, B: 104.0, A: 106.0})
    autotune.use_table(_table([{**entry, "median_us": 100.0}]))
    # B, the fastest ready tile, is 1.04x: 4 us lost against 7 + 8 x 4096 x 7e-6 = 7.2 us
    assert autotune.fuse_activation("sm_90a", *GLM, rows=8)
    entry = _timed(GLM, 1 / 4, {SWAP: 100.0, TMA: 101.0, B: 110.0})
    autotune.use_table(_table([{**entry, "median_us": 100.0}]))
    assert not autotune.fuse_activation("sm_90a", *GLM, rows=8)  # 10 us lost
    # the same loss at prefill, where the pass is long: fuse
    big = _timed(GLM, 1024, {SWAP: 100.0, B: 110.0})
    autotune.use_table(_table([{**big, "median_us": 100.0}]))
    assert autotune.fuse_activation("sm_90a", *GLM, rows=32 * 1024)
    # the loss is against the entry's own pick: here the worse of balanced and skewed
    skewed = _timed(GLM, 1 / 4, {SWAP: 100.0, B: 110.0}, skewed={SWAP: 112.0, B: 100.0})
    autotune.use_table(_table([{**skewed, "median_us": 100.0}]))
    assert autotune.fuse_activation("sm_90a", *GLM, rows=8)  # B 1.10 against SWAP's own 1.12
    # no ready tile was timed: the plain GEMM and the pass; a shape the table lacks: fuse
    autotune.use_table(_table([{**_timed(GLM, 1 / 4, {SWAP: 100.0, TMA: 101.0}), "median_us": 1}]))
    assert not autotune.fuse_activation("sm_90a", *GLM, rows=8)
    assert autotune.fuse_activation("sm_90a", 4096, 5120, 32, rows=8)


def test_the_h200_table_fuses_every_course_gate_up_layer(package_tuning_table):
    """On the H200 every course gate+up layer fuses at every measured size: the fused epilogue
    runs each entry's winner or a timed tile within the activation pass's cost of it (DeepSeek
    V4 Pro's and Kimi K3's 1-token winners are 96 wide, which sm_90a fuses)."""
    layers = {"GLM 5.3": (4096, 6144, 32, 8), "DeepSeek V4 Pro": (6144, 7168, 48, 6),
              "Kimi K3": (6144, 3584, 112, 16)}  # fmt: skip
    for model, (n, k, experts, top_k) in layers.items():
        for tokens in (1, 16, 64, 256, 1024, 4096):
            rows = tokens * top_k
            assert autotune.fuse_activation("sm_90a", n, k, experts, rows, "H200"), (model, tokens)
    pick = autotune.pick("sm_90a", 6144, 7168, 48, 6, "H200", True)
    assert pick.config.tile_n == 96 and autotune.activation_ready(pick.config)
    # on sm_100a a fused tile is a multiple of 64 wide
    narrow = stage_config("sm_100a", 5).with_(tile_n=96, epilogue="direct_store")
    assert not autotune.activation_ready(narrow)
    assert autotune.activation_ready(narrow.with_(tile_n=128))


def test_grouped_gemm_with_an_activation_asks_for_a_fused_pick(fake_gpu, monkeypatch):
    asked = []
    real = autotune.pick_config

    def spy(*args, **kw):
        asked.append(kw.get("fused"))
        return real(*args, **kw)

    from pearl_moe.kernels import interleave_gate_up

    monkeypatch.setattr(autotune, "pick_config", spy)
    A, W, offs = _inputs()
    api.grouped_gemm(A, W, offs, check=False)
    api.grouped_gemm(A, interleave_gate_up(W), offs, check=False, activation="swiglu")
    assert asked == [False, True]
    config = fake_gpu[-1][2]
    assert config.activation == "swiglu" and autotune.activation_ready(config)


def test_wave_cost_counts_the_sm_slots_a_tile_width_leaves_empty():
    w96 = GemmConfig.from_label("sm_90a 16x96x64 1cta r15 shiftA direct")
    w128 = GemmConfig.from_label("sm_90a 16x128x64 1cta r12 shiftA direct")
    # Qwen3-30B-A3B at 1 token (EP8): 8 of 16 experts active, 96 and 128 tiles on 132 SMs
    assert autotune.wave_cost(1536, 16, 8 / 16, w96) == pytest.approx(132 / 128)
    assert autotune.wave_cost(1536, 16, 8 / 16, w128) == pytest.approx(132 / 96)
    # one active expert of n = 16384: 171 tiles take two waves, 128 tiles one
    assert autotune.wave_cost(16384, 16, 1 / 16, w96) == pytest.approx(264 / 171)
    assert autotune.wave_cost(16384, 16, 1 / 16, w128) == pytest.approx(132 / 128)
    # from one row per expert on every expert is active; 40 rows take three 16-row tiles
    assert autotune.wave_cost(1536, 16, 40, w128) == pytest.approx(
        math.ceil(16 * 3 * 12 / 132) * 132 / (16 * 3 * 12)
    )


def test_the_vote_charges_a_tile_width_whose_waves_empty_out_here():
    # Measured with 8 active experts, the 96-wide tile won by 3% (1368 tiles: 11 nearly full
    # waves). Here one expert is active: 171 tiles, a second wave a third full, while the
    # 128-wide tile's 128 tiles still fit one wave.
    w96 = "s5 sm_90a 16x96x64 1cta r15 shiftA direct"
    w128 = "s5 sm_90a 16x128x64 1cta r12 shiftA direct"
    shape = (16384, 5120, 16)
    autotune.use_table(_table([_timed(shape, 8 / 16, {w96: 100.0, w128: 103.0})]))
    near = autotune.neighbours(autotune.load_table("H200"), *shape, 1)
    without = autotune.vote(near, "sm_90a", 16384, 5120, 1 / 16)  # no expert count: no wave term
    assert without[0][2].describe() == w96.split(" ", 1)[1]
    choice = autotune.pick("sm_90a", *shape, rows=1)
    assert choice.config.describe() == w128.split(" ", 1)[1], choice.source
    # the charge: (wave cost here / there) ** WAVE_EXPONENT, then relative to the best again
    scores = {c.describe(): s for s, _, c in autotune.vote(near, "sm_90a", 16384, 5120, 1 / 16, 16)}
    charge = ((264 / 171) / (1452 / 1368)) ** autotune.WAVE_EXPONENT
    assert scores[w96.split(" ", 1)[1]] == pytest.approx(100.0 * charge / 103.0)


def test_the_vote_beats_the_heuristic_on_models_it_has_not_seen():
    """Leave each model out of the committed H200 table (all its entries), let the others vote,
    and look the pick up among the hidden entry's own measurements: the vote must lose less than
    the heuristic."""
    import math

    table = json.loads((autotune.TABLE_DIR / "H200.json").read_text())
    rows = table_studies.leave_one_model_out(table)
    from pearl_moe.bench import shape_sets

    course = {"GLM 5.3", "DeepSeek V4 Pro", "Kimi K3"}
    assert {r["model"] for r in rows} == course | set(shape_sets.TUNING_MODELS)
    assert len(rows) == len(table["entries"])
    paired = [r for r in rows if r["regret"] and r["heuristic_regret"]]
    assert len(paired) >= 0.8 * len(rows)

    def geomean(values):
        return math.exp(sum(map(math.log, values)) / len(values))

    voted = geomean([r["regret"] for r in paired])
    guessed = geomean([r["heuristic_regret"] for r in paired])
    assert voted < guessed and voted <= 1.05, (voted, guessed)


def test_transfer_regret_looks_the_borrowed_pick_up_in_the_own_rounds():
    """A borrowed table's answer (its entry for the shape, else its vote) is looked up among the
    own GPU's times for that shape; a candidate the own GPU did not time has no regret."""
    shape = (4096, 4096, 32)
    refused = stage_config("sm_90a", 3).with_(
        epilogue="direct_store"
    )  # stage 3 has no direct store
    borrowed = _table(
        [
            _timed(shape, 8, {A: 100.0, B: 104.0}),
            _entry(4, refused, stage=3, shape=(4096, 4096, 16)),  # a twin the kernel cannot run
        ]
    )
    own = _table(
        [
            _timed(shape, 8, {A: 110.0, B: 100.0}),  # the same shape and bucket: its entry
            _timed(shape, 16, {A: 120.0, C: 100.0}),  # an octave up: the vote (of one)
            _timed((4096, 4096, 16), 16, {B: 100.0, C: 101.0}),  # twin refused: the vote, A
        ],
        gpu="H100",
    )
    rows = table_studies.transfer_regret(own, borrowed)
    assert [r["borrowed"] for r in rows] == [A, A, A]
    assert [r["how"] for r in rows] == ["entry", "vote of 2", "vote of 2"]
    assert [r["regret"] for r in rows] == [pytest.approx(1.1), pytest.approx(1.2), None]
    with pytest.raises(ValueError, match="two architectures"):
        table_studies.transfer_regret(own, {**borrowed, "arch": "sm_100a"})


def test_the_h200_tables_picks_on_the_h100s_prefill_entries():
    """The figures docs/tuning.md and ``autotune.table_gpus`` quote: on the H100's own entries (the
    whole tuning set, 109), the H200 table has an entry for every shape, and its picks took 1.022x
    the H100's fastest in its rounds (geomean), at most 1.129x, where the H100's own vote with the
    entry's model hidden took 1.029x, at most 1.205x (better on 34 entries, worse on 30, 44 within
    1%); on the prefill entries (above 256 rows per expert, 27) 1.028x, at most 1.073x; at 8192
    tokens none is the 128 x 128 split-accumulator tile that cost up to 1.37x when the H200 voted
    there."""
    from pearl_moe.bench.compare import geomean

    own = json.loads((autotune.TABLE_DIR / "H100.json").read_text())
    borrowed = json.loads((autotune.TABLE_DIR / "H200.json").read_text())
    rows = table_studies.transfer_regret(own, borrowed)
    assert len(rows) == 109 and all(r["regret"] for r in rows)
    assert all(r["how"] == "entry" for r in rows)
    assert geomean([r["regret"] for r in rows]) == pytest.approx(1.022, abs=5e-4)
    assert max(r["regret"] for r in rows) == pytest.approx(1.129, abs=5e-4)
    # the vote's pick was timed at all but one entry (in the entry's order)
    hidden = table_studies.leave_one_model_out(own)
    paired = [(r["regret"], h["regret"]) for r, h in zip(rows, hidden, strict=True) if h["regret"]]
    assert len(paired) == 108
    assert geomean([h for _, h in paired]) == pytest.approx(1.029, abs=5e-4)
    assert max(h for _, h in paired) == pytest.approx(1.205, abs=5e-4)
    vote_better = [1 for e, h in paired if h < e - 0.01]
    entry_better = [1 for e, h in paired if e < h - 0.01]
    assert (len(vote_better), len(entry_better)) == (34, 30)
    prefill = [r for r, e in zip(rows, own["entries"], strict=True) if e["rows_per_expert"] > 256]
    assert len(prefill) == 27
    assert geomean([r["regret"] for r in prefill]) == pytest.approx(1.028, abs=5e-4)
    assert max(r["regret"] for r in prefill) == pytest.approx(1.073, abs=5e-4)
    at_8192 = [r for r in rows if "8192 tokens" in r["measured_at"]]
    assert len(at_8192) == 13
    assert not [r for r in at_8192 if r["borrowed"].endswith("128x128x64 1cta r7 direct pingpong")]
    # the H100's own 8192-token winners: 11 of 13 are 128 x 192 split-accumulator or 256 x 192 tiles
    at_8192 = [r["own"] for r in rows if "8192 tokens" in r["measured_at"]]
    wide = [w for w in at_8192 if "256x192x64" in w or ("128x192x64" in w and "pingpong" in w)]
    assert (len(wide), len(at_8192)) == (11, 13)


def test_picks_depend_on_the_exact_rows_not_on_which_call_came_first():
    # no entry in bucket 5 (23-45 rows per expert): the vote decides, from the exact rows
    entries = [_timed((4096, 4096, 32), 8, {A: 100.0, B: 100.5, C: 103.0})]
    autotune.use_table(_table(entries))
    rows = (32 * 24, 32 * 40)  # 24 and 40 rows per expert, both bucket 5
    assert {autotune.rows_bucket(r, 32) for r in rows} == {5}
    fresh = {}
    for r in rows:
        autotune.clear_cache()
        fresh[r] = autotune.pick("sm_90a", 4096, 4096, 32, rows=r)
    assert fresh[rows[0]].config != fresh[rows[1]].config  # the m tiles differ: 16-row A loses
    autotune.clear_cache()
    for r in (*rows, *reversed(rows)):
        assert autotune.pick("sm_90a", 4096, 4096, 32, rows=r) == fresh[r]


def test_config_labels_read_back_into_configs():
    table = json.loads((autotune.TABLE_DIR / "H200.json").read_text())
    labels = {lb.split(" ", 1)[1] for e in table["entries"] for lb in e["candidates"]}
    labels |= {"sm_100a 256x512x64 2cta r* direct256 acc1 split", "sm_90a 64x128x64 1cta r4 tma",
               "sm_90a 16x128x64 1cta r12 shiftA pdl direct swiglu"}  # fmt: skip
    for label in labels:
        assert GemmConfig.from_label(label).describe() == label
    for bad in ("sm_90a 64x128 1cta r4 tma", "sm_90a 64x128x64 1cta r4 tma wobble", "x"):
        with pytest.raises(ValueError, match="not a config label"):
            GemmConfig.from_label(bad)


def test_missing_stage_modules_are_skipped(monkeypatch):
    monkeypatch.setattr(autotune, "stage_available", lambda arch, stage: stage == 3)
    direct = stage_config("sm_90a", 3).with_(epilogue="direct_store").resolved()
    with pytest.raises(ValueError, match="stage 4"):
        autotune.stage_for(direct)
    autotune.use_table(_table([_entry(4, direct, stage=4)]))
    assert autotune.pick("sm_90a", *GLM, rows=512).source.startswith("heuristic")
    cands = candidates.candidates("sm_90a", *GLM, rows=512)
    assert cands and {s for s, _ in cands} == {3}
    assert all(c.epilogue == "tma_store" and c.b_k_tiles == 1 for _, c in cands)


@pytest.mark.parametrize("tokens", [1, 64, 1024, 4096])
@pytest.mark.parametrize("shape, top_k", [(GLM, 8), ((6144, 3584, 112), 16)])
def test_candidates_are_pruned_runnable_and_include_the_defaults(shape, top_k, tokens):
    n, k, experts = shape
    rows = tokens * top_k
    cands = candidates.candidates("sm_90a", n, k, experts, rows, limit=16)
    assert 3 <= len(cands) <= 16
    configs = [c for _, c in cands]
    assert len({tuple(sorted(asdict(c).items())) for c in configs}) == len(configs)
    assert autotune.heuristic("sm_90a", n, k, experts, rows).config in configs
    assert stage_config("sm_90a", 3).resolved() in configs
    for stage, c in cands:
        assert c.ring_depth is not None and stage == autotune.stage_for(c, n, k)
        assert not api.can_implement(c, stage, n, k)
        if c.tile_n == 192 and rows / experts <= candidates.PREFILL_ROWS:
            assert n % 192 == 0  # below prefill, 192-wide tiles only where they divide n
    if tokens <= 64:
        assert configs[0].tile_m == 64  # decode: the heuristic's 64-row tile first


@pytest.mark.parametrize("model", ["GLM 5.3", "DeepSeek V4 Pro", "Kimi K3"])
def test_serial_walk_twins_fill_the_free_slots_at_prefill_only(model):
    from pearl_moe.workloads import make_problem

    for tokens in (1, 64, 256, 1024, 4096):
        p = make_problem(model, tokens, ep=8)
        # a limit above the prefill space (48 configurations) leaves slots for twins
        cands = candidates.candidates("sm_90a", p.n, p.k, p.experts, p.rows, limit=60)
        twins = [c for _, c in cands if c.walk == "serial"]
        base = [c for _, c in cands if c.walk != "serial"]
        assert len(cands) <= 60
        full = candidates.candidates("sm_90a", p.n, p.k, p.experts, p.rows, limit=len(base))
        assert [c for _, c in full] == base  # twins only take slots the space leaves free
        if p.rows / p.experts < candidates.SERIAL_WALK_ROWS:
            assert not twins
            continue
        assert twins and all(c.acc_slots == 1 for c in twins)
        assert all(c.with_(walk="warp-parallel") in base for c in twins)  # a twin of a candidate
        assert [c for _, c in cands][: len(base)] == base  # the space itself comes first


def test_grouped_order_twins_come_only_when_asked_and_only_at_prefill():
    """``group_twins``: ``n_group=8`` twins of 128- and 256-row candidates, split accumulator first,
    after the space itself (which they leave as it was); none by default or at decode."""
    from pearl_moe.workloads import make_problem

    p = make_problem("GLM 5.3", 4096, ep=8)
    plain = candidates.candidates("sm_90a", p.n, p.k, p.experts, p.rows, limit=48)
    asked = candidates.candidates("sm_90a", p.n, p.k, p.experts, p.rows, limit=48, group_twins=6)
    assert asked[: len(plain)] == plain and not any(c.n_group for _, c in plain)
    twins = asked[len(plain) :]
    assert len(twins) == 6 and all(c.n_group == 8 and c.tile_m >= 128 for _, c in twins)
    assert twins[0][1].acc_slots == 2  # the split-accumulator tiles first
    for stage, twin in twins:
        assert twin.with_(n_group=0) in [c for _, c in plain]
        assert stage == autotune.stage_for(twin, p.n, p.k)
    d = make_problem("GLM 5.3", 16, ep=8)
    decode = candidates.candidates("sm_90a", d.n, d.k, d.experts, d.rows, limit=28, group_twins=6)
    assert decode == candidates.candidates("sm_90a", d.n, d.k, d.experts, d.rows, limit=28)


@pytest.fixture
def fake_gpu(monkeypatch):
    """``grouped_gemm`` on CPU tensors as if on an H200; compiles and launches recorded."""
    from pearl_moe.kernels.api import validate

    calls = []
    monkeypatch.setattr(api, "validate", functools.partial(validate, device_type="cpu"))
    monkeypatch.setattr(api, "arch_of", lambda device: "sm_90a")
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda device: types.SimpleNamespace(multi_processor_count=132),
    )
    monkeypatch.setattr(api, "compiled_kernel", lambda *a: calls.append(a) or "fn")
    monkeypatch.setattr(
        api, "stage_module", lambda arch, stage: types.SimpleNamespace(launch=lambda *a, **kw: None)
    )
    import pearl_moe.kernels.host as host

    monkeypatch.setattr(host, "cuda_stream", lambda device=None: None)
    return calls


def _inputs(rows=512, n=256, k=128, experts=32):
    A = torch.randn(rows, k).bfloat16()
    W = torch.randn(experts, n, k).bfloat16()
    offs = torch.arange(1, experts + 1, dtype=torch.int32) * (rows // experts)
    return A, W, offs


def test_grouped_gemm_without_stage_or_config_runs_the_tuned_pick(fake_gpu):
    A, W, offs = _inputs()
    api.grouped_gemm(A, W, offs, check=False)
    arch, stage, config, n, k, experts, sms = fake_gpu[-1]
    assert (stage, config) == autotune.pick_config("sm_90a", 256, 128, 32, 512)
    assert (config.tile_m, config.tile_n) == (64, 128)  # 16 rows per expert
    wide = GemmConfig(arch="sm_90a", tile_m=64, tile_n=256, tile_k=64, ring_depth=4)
    autotune.use_table(_table([_entry(4, wide, shape=(256, 128, 32))]))
    api.grouped_gemm(A, W, offs, check=False)
    assert fake_gpu[-1][1:3] == (3, wide)


def test_stage_alone_keeps_meaning_the_course_stage(fake_gpu):
    A, W, offs = _inputs()
    api.grouped_gemm(A, W, offs, stage=3, check=False)
    assert fake_gpu[-1][1:3] == (3, api.default_config("sm_90a", 3))
    api.grouped_gemm(A, W, offs, stage=2, check=False)
    assert fake_gpu[-1][1:3] == (2, api.default_config("sm_90a", 2))


def test_config_alone_runs_on_the_first_stage_that_takes_it(fake_gpu, monkeypatch):
    A, W, offs = _inputs()
    cfg = GemmConfig(arch="sm_90a", tile_m=64, tile_n=64, tile_k=64)
    api.grouped_gemm(A, W, offs, config=cfg, check=False)
    assert fake_gpu[-1][1:3] == (3, cfg.resolved())
    monkeypatch.setattr(autotune, "stage_available", lambda arch, stage: stage == 3)
    with pytest.raises(ValueError, match="no kernel stage here runs"):
        api.grouped_gemm(A, W, offs, config=cfg.with_(epilogue="direct_store"), check=False)


def test_committed_h200_table_gives_the_picks_of_the_committed_compare_run():
    """The default call on an H200 is what results/H200/compare.json.gz measured as ``pearl``, except
    at the shapes named below, whose table entries a later tuning run of the table's own record
    measured again with the run's pick among their candidates: there the pick is that entry's
    fastest candidate, and docs/performance.md's compare block lists the change (``Picks changed
    since this run``) until ``bench --resume --remeasure-changed`` times them again. A pick changed by
    anything else (the picker's rule, an entry edited without a new tuning) fails here."""
    from pathlib import Path

    from pearl_moe.workloads import make_problem

    root = Path(__file__).resolve().parent.parent
    run = read_run(root / "results" / "H200" / "compare.json.gz")
    table = autotune.load_table("H200")  # the table pick reads
    page = (root / "docs" / "performance.md").read_text()
    block = page.split("<!-- compare:begin -->")[1].split("<!-- compare:end -->")[0]
    tuning_runs = {table["env"]["date"], *(r["env"]["date"] for r in table["earlier_runs"])}
    # the course's gate+up entries at 4096 tokens, tuned again on 2026-12-02 over the current
    # prefill candidates (48 a shape; they had held 3-5)
    retuned = {f"{m}|gate_up|4096|EP8|balanced" for m in ("GLM 5.3", "DeepSeek V4 Pro", "Kimi K3")}
    picks = [r for r in run["records"] if r["impl"] == "pearl"]
    assert len(picks) >= 18
    changed = set()
    for r in picks:
        model, projection, tokens, ep, routing = r["problem"].split("|")
        p = make_problem(model, int(tokens), ep=int(ep[2:]), routing=routing, projection=projection)
        choice = autotune.pick("sm_90a", p.n, p.k, p.experts, p.rows, gpu="H200")
        assert choice.source.startswith("table H200")
        assert not api.can_implement(choice.config, choice.stage, p.n, p.k)
        if choice.config.describe() == r["config"]["config"]:
            assert choice.stage == r["config"]["stage"]
            continue
        changed.add(r["problem"])
        bucket = autotune.rows_bucket(p.rows, p.experts)
        (entry,) = autotune._table_entries("sm_90a", p.n, p.k, p.experts, bucket, "H200")
        assert entry["tuned_at"] in tuning_runs and entry["tuned_at"] > run["env"]["date"]
        fastest = min(entry["candidates"], key=entry["candidates"].get)
        assert (
            f"s{choice.stage} {choice.config.describe()}" == f"s{entry['stage']} {entry['label']}"
        )
        assert f"s{entry['stage']} {entry['label']}" == fastest
        assert choice.source == f"table H200: {entry['measured_at']}"  # the entry, not a vote
        timed = f"s{r['config']['stage']} {r['config']['config']}"
        assert timed in entry["candidates"], (r["problem"], timed)
        assert f"{r['problem']}: {r['config']['config']} -> {choice.config.describe()}" in block
    assert changed == retuned


def test_decode_candidates_include_the_width_that_fills_the_waves():
    # Qwen3-30B-A3B gate+up at 16 tokens, EP=8: 16 experts x 1536 / 128 = 192 tiles (1.45 waves
    # of 132 SMs); 1536 / 192 = 8 tiles per expert: 128 tiles, one wave 97% busy.
    assert autotune.wave_width(1536, 16) == 192
    assert autotune.wave_width(1536, 8) == 96  # 128 tiles instead of 96
    assert autotune.wave_width(4096, 32) == 256  # 512 tiles: 3.9 waves at any width
    widths = {c.tile_n for _, c in candidates.candidates("sm_90a", 1536, 2048, 16, 128, limit=40)}
    assert 192 in widths


def test_between_64_and_256_rows_per_expert_the_space_has_quacks_clustered_tiles():
    """Kimi K3's gate+up at 1024 tokens (146 rows per expert), where quack-tuned's clustered
    split-accumulator tile beat our 64-row split-accumulator picks: with the tuner's prefill limit
    (49) its space holds the 128 x 192 split-accumulator tile in clusters of two along M (quack's
    default) and cluster twins of the 128-row tiles, but no 256-row tile; DeepSeek V4 Pro's (128
    rows per expert) holds quack-tuned's 128 x 256 tile in clusters along N; at 64 rows per expert
    none of them."""
    from pearl_moe.workloads import make_problem

    p = make_problem("Kimi K3", 1024, ep=8)
    assert candidates.CLUSTER_ROWS < p.rows / p.experts <= candidates.PREFILL_ROWS
    space = {
        c.describe() for _, c in candidates.candidates("sm_90a", p.n, p.k, p.experts, p.rows, 49)
    }
    assert "sm_90a 128x192x64 1cta r5 clusterM2 direct pingpong" in space
    assert {
        "sm_90a 128x128x64 1cta r6 clusterM2 tma",
        "sm_90a 128x256x64 1cta r4 clusterM2 tma",
    } <= space
    assert not [c for c in space if " 256x" in c]
    v4 = make_problem("DeepSeek V4 Pro", 1024, ep=8)
    assert v4.rows / v4.experts == 128
    v4_space = candidates.candidates("sm_90a", v4.n, v4.k, v4.experts, v4.rows, 49)
    assert any((c.tile_m, c.tile_n, c.cluster_n) == (128, 256, 2) for _, c in v4_space)
    rows = candidates.CLUSTER_ROWS * p.experts
    at_128 = [c for _, c in candidates.candidates("sm_90a", p.n, p.k, p.experts, rows, 49)]
    assert not [c for c in at_128 if c.cluster_m * c.cluster_n > 1 or c.tile_m == 256]
    assert not [c for c in at_128 if c.acc_slots == 2 and (c.tile_m, c.tile_n) == (128, 192)]


def test_the_192_row_split_accumulator_tile_is_tried_where_it_pads_an_experts_rows_less():
    """The 192 x 128 split-accumulator tile (alone and paired along N) joins the space where an
    average expert's rows pad to fewer rows in 192-row tiles than in 128-row ones: Kimi K3 at 1024
    tokens (146 rows: one 192-row tile against two 128-row ones); not at 128 or
    256 rows per expert (DeepSeek V4 Pro and GLM 5.3 at 1024 tokens), where it lost on an H100.
    It comes right after the small tiles, so that the tune CLI's smaller limits hold it too."""
    from pearl_moe.workloads import make_problem

    def rows192(problem, limit=49):
        space = candidates.candidates(
            "sm_90a", problem.n, problem.k, problem.experts, problem.rows, limit
        )
        return [c for _, c in space if c.tile_m == 192]

    kimi_problem = make_problem("Kimi K3", 1024, ep=8)
    kimi = rows192(kimi_problem)
    assert [(c.tile_n, c.cluster_n, c.acc_slots, c.epilogue) for c in kimi] == [
        (128, 2, 2, "direct_store"),
        (128, 1, 2, "direct_store"),
    ]
    assert rows192(kimi_problem, limit=24) == kimi  # within the tune CLI's limits too
    assert not rows192(make_problem("DeepSeek V4 Pro", 1024, ep=8))
    assert not rows192(make_problem("GLM 5.3", 1024, ep=8))
    base = autotune.stage_config("sm_90a", 3)
    n, k = kimi_problem.n, kimi_problem.k
    for c in candidates._rows192_candidates(base, 146, n):  # what the kernel accepts, unfiltered
        c = c.resolved()
        assert not api.can_implement(c, autotune.stage_for(c, n, k), n, k)
    offered = [r for r in range(1, 1025) if candidates._rows192_candidates(base, r, 4096)]
    assert offered == [*range(129, 193), *range(513, 577), *range(897, 961)]
    assert len(candidates._rows192_candidates(base, 146, 128)) == 1  # no second n tile to pair


def test_the_prefill_space_adds_256_row_tiles_and_2_cta_clusters():
    """At prefill the tuner also times 256-row tiles and, for tiles of 128 rows and more, twins
    in clusters of two CTAs sharing A (``cluster_n=2``) or B (``cluster_m=2``); not at decode,
    never on sm_100a."""
    from pearl_moe.workloads import make_problem

    for tokens in (1, 64, 256, 4096):
        p = make_problem("GLM 5.3", tokens, ep=8)
        space = [c for _, c in candidates.candidates("sm_90a", p.n, p.k, p.experts, p.rows, 60)]
        clustered = [c for c in space if c.cluster_n * c.cluster_m == 2]
        tall = [c for c in space if c.tile_m == 256]
        if p.rows / p.experts <= candidates.CLUSTER_ROWS:
            assert not clustered and not tall
            continue
        if p.rows / p.experts <= candidates.PREFILL_ROWS:  # between: clusters, no 256-row tiles
            assert clustered and not tall
            continue
        # at prefill 192-wide tiles are tried even where 192 does not divide n (4096 here)
        assert {(c.tile_m, c.tile_n) for c in tall} == {(256, 128), (256, 192)}
        assert all(c.tile_m >= 128 and c.b_k_tiles == 1 for c in clustered)
        single = [c.with_(cluster_n=1, cluster_m=1) for c in clustered if c.acc_slots == 1]
        assert all(c in space for c in single)
        assert any(c.acc_slots == 2 for c in clustered)  # the split-accumulator twins
        # quack's default Hopper configuration is among them
        quack_default = "sm_90a 128x192x64 1cta r5 clusterM2 direct pingpong"
        assert quack_default in {c.describe() for c in clustered}
        # the shared operand is the larger tile: A (along N) when tile_m >= tile_n, else B; and
        # the 128 x 192 split-accumulator tile shares either
        along_n = {c.describe() for c in clustered if c.cluster_n == 2 and c.tile_m < c.tile_n}
        assert along_n == {"sm_90a 128x192x64 1cta r5 clusterN2 direct pingpong"}
        assert all(c.tile_n >= c.tile_m for c in clustered if c.cluster_m == 2)
        assert {c.cluster_m for c in clustered} == {1, 2}
        for c in clustered + tall:
            assert not api.can_implement(c, autotune.stage_for(c, p.n, p.k), p.n, p.k)
    blackwell = candidates.candidates("sm_100a", 4096, 6144, 32, 32 * 1024, 60)
    assert all(c.cluster_n == c.cluster_m == 1 for _, c in blackwell)


def test_default_choice_is_what_the_default_call_launches(fake_gpu):
    """``api.default_choice`` (what the layer benchmark records beside its times) is the stage
    and configuration the default call compiles: plain, with the fused activation, and with the
    gather of A."""
    from pearl_moe.kernels import interleave_gate_up

    for rows, n, k, experts in ((512, 256, 128, 32), (16, 1536, 1024, 16), (6, 768, 512, 8)):
        A, W, _ = _inputs(rows, n, k, experts)
        offs = torch.linspace(0, rows, experts + 1)[1:].round().to(torch.int32)  # ragged, real
        cases = ((None, False), ("swiglu", False), (None, True), ("swiglu", True))
        for activation, gather in cases:
            weight = interleave_gate_up(W) if activation else W
            index = {"a_index": torch.arange(rows, dtype=torch.int32)} if gather else {}
            api.grouped_gemm(A, weight, offs, check=False, activation=activation, **index)
            arch, stage, config = fake_gpu[-1][:3]
            want = api.default_choice("sm_90a", n, k, experts, rows, None, activation, gather)
            assert (stage, config) == want, (rows, n, activation, gather)
            assert config.gather_a == gather and config.activation == activation
    with pytest.raises(ValueError, match="sm_90a kernels only"):
        api.default_choice("sm_100a", 256, 128, 32, 512, None, None, True)
