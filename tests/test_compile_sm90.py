"""Compile every sm_90a stage on the CPU and check the SASS against the design and budget model.

The sm_90a kernels live in ``pearl_moe.kernels.sm90.stage{N}_*`` (documented interface:
``build(config)``, ``compile_fake(config, m, n, k, experts)``). All three stages exist, so a missing
module, an import error or a compile error fails (these kernels ran on the H200; they must keep
compiling).
"""

from __future__ import annotations

import pytest

from pearl_moe.config import GemmConfig
from pearl_moe.inspect import compile_many

CASES = {
    "s1-128x128x64": (
        1,
        GemmConfig(arch="sm_90a", tile_m=128, tile_n=128, tile_k=64, ring_depth=6),
    ),
    "s2-128x128x64": (
        2,
        GemmConfig(arch="sm_90a", tile_m=128, tile_n=128, tile_k=64, ring_depth=6),
    ),
    "s3-128x128x64": (
        3,
        GemmConfig(arch="sm_90a", tile_m=128, tile_n=128, tile_k=64, ring_depth=6),
    ),
}


@pytest.fixture(scope="module")
def reports():
    compiled = compile_many([(stage, cfg, None, None, None, None) for stage, cfg in CASES.values()])
    return dict(zip(CASES, compiled, strict=True))


@pytest.mark.parametrize("name", list(CASES))
def test_wgmma_and_tma_instructions(reports, name):
    fam = reports[name].families
    assert fam["HGMMA (wgmma)"] > 0, "no wgmma (HGMMA) in the SASS"
    assert fam["UTC*MMA (tcgen05.mma)"] == 0, "tcgen05 instruction in a Hopper kernel"
    assert fam["LDTM (tcgen05.ld)"] == 0
    assert fam["UTMALDG (TMA load)"] > 0
    assert fam["UTMASTG (TMA store)"] > 0, "TMA-store epilogue missing"
    assert fam["STG.E.ENL2.256"] == 0, "256-bit stores do not exist on sm_90"


@pytest.mark.parametrize("name", list(CASES))
def test_smem_matches_budget_model_and_no_tmem(reports, name):
    report = reports[name]
    assert report.smem_bytes > 0
    assert report.smem_bytes == report.model_smem_bytes, (
        f"{report.label}: kernel launches with {report.smem_bytes} B of SMEM, "
        f"budget model says {report.model_smem_bytes} B"
    )
    assert report.tmem_columns == 0
