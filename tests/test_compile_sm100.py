"""Compile every sm_100a stage on the CPU and check the SASS against the design and budget model.

No GPU is needed: CuTe DSL compiles for sm_100a anywhere. Compiles run in one worker process
(``pearl_moe.inspect``) and are cached on disk, so a second run takes seconds.
"""

from __future__ import annotations

import pytest

from pearl_moe.config import GemmConfig
from pearl_moe.inspect import compile_many

CASES = {
    "s1-128x128x64": (1, GemmConfig(tile_m=128, tile_n=128, tile_k=64, ring_depth=6)),
    "s1-128x128x64-s5": (1, GemmConfig(tile_m=128, tile_n=128, tile_k=64, ring_depth=5)),
    "s2-128x128x64": (2, GemmConfig(tile_m=128, tile_n=128, tile_k=64, ring_depth=6)),
    "s3-128x128x64-acc2": (3, GemmConfig(tile_m=128, tile_n=128, tile_k=64, ring_depth=6)),
    "s3-128x256x64-1cta": (3, GemmConfig(tile_m=128, tile_n=256, tile_k=64, ring_depth=4)),
    "s3-256x256x64-2cta": (
        3,
        GemmConfig(tile_m=256, tile_n=256, tile_k=64, cta_group=2, ring_depth=6),
    ),
}


@pytest.fixture(scope="module")
def reports():
    names = list(CASES)
    compiled = compile_many([(stage, cfg, None, None, None, None) for stage, cfg in CASES.values()])
    return dict(zip(names, compiled, strict=True))


@pytest.mark.parametrize("name", list(CASES))
def test_tensor_core_and_tma_instructions(reports, name):
    fam = reports[name].families
    assert fam["UTC*MMA (tcgen05.mma)"] > 0, "no tcgen05 MMA (UTC*MMA) in the SASS"
    assert fam["HGMMA (wgmma)"] == 0, "Hopper wgmma in a Blackwell kernel"
    assert fam["UTCBAR (tcgen05.commit)"] > 0
    assert fam["LDTM (tcgen05.ld)"] > 0, "epilogue does not read TMEM with tcgen05.ld"
    assert fam["UTMALDG (TMA load)"] > 0
    assert fam["UTMASTG (TMA store)"] > 0, "TMA-store epilogue missing"


@pytest.mark.parametrize("name", list(CASES))
def test_smem_and_tmem_match_budget_model(reports, name):
    report = reports[name]
    assert report.smem_bytes > 0
    assert report.smem_bytes == report.model_smem_bytes, (
        f"{report.label}: kernel launches with {report.smem_bytes} B of SMEM, "
        f"budget model says {report.model_smem_bytes} B"
    )
    assert report.tmem_columns == report.model_tmem_columns


def test_two_cta_uses_cta_group_2(reports):
    ptx = reports["s3-256x256x64-2cta"].ptx
    assert "tcgen05.mma.cta_group::2" in ptx
    assert "tcgen05.alloc.cta_group::2" in ptx
    assert "tcgen05.mma.cta_group::1" not in ptx


def test_one_cta_uses_cta_group_1(reports):
    ptx = reports["s3-128x256x64-1cta"].ptx
    assert "tcgen05.mma.cta_group::1" in ptx
    assert "cta_group::2" not in ptx


def test_grouped_stages_store_through_per_expert_descriptors(reports):
    # the epilogue acquires the descriptor written by the per-expert descriptor kernel
    for name in ("s2-128x128x64", "s3-128x256x64-1cta", "s3-256x256x64-2cta"):
        ptx = reports[name].ptx
        assert "fence.proxy.tensormap::generic.acquire" in ptx, name
        assert len(reports[name].launches) == 2, "descriptor kernel + GEMM kernel"


def test_deeper_ring_costs_exactly_one_stage(reports):
    # blog arithmetic: a 128x128x64 ring entry is 16 KB of A + 16 KB of B, plus its full and
    # empty mbarriers; measured on the compiled kernels, not on the model
    five, six = reports["s1-128x128x64-s5"], reports["s1-128x128x64"]
    assert six.smem_bytes - five.smem_bytes == 128 * 64 * 2 + 128 * 64 * 2 + 2 * 8


def test_stage_rejects_unsupported_config():
    from pearl_moe.kernels.sm100 import stage1_gemm

    with pytest.raises(ValueError, match="cta_group"):
        stage1_gemm.build(GemmConfig(tile_m=256, tile_n=128, cta_group=2, ring_depth=4))
