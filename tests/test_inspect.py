"""pearl_moe.course.kernel_report: SASS/PTX/IR parsing on known snippets, stage lookup, cache and CLI."""

from __future__ import annotations

import pytest

from pearl_moe.config import GemmConfig
from pearl_moe.course.kernel_report import (
    compile_stage,
    count_families,
    count_opcodes,
    main,
    parse_launches,
    parse_tmem_columns,
    stage_module_name,
)

SASS = """
        /*0070*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ;
        /*0080*/              @P0  UTMALDG.2D [UR8], [UR10] ;
        /*0090*/                   UTMASTG.2D [UR4], [UR6] ;
        /*00a0*/                   STG.E.ENL2.256 desc[UR4][R2.64], R4, R8 ;
        /*00b0*/                   STG.E.128 desc[UR4][R2.64], R4 ;
        /*00c0*/              @!P1 STG.E desc[UR4][R2.64], R4 ;
        /*00d0*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
        /*00e0*/                   SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [UR4], RZ ;
        /*00f0*/                   LDTM.x32 R4, tmem[UR4] ;
"""


def test_opcode_families_from_sass():
    ops = count_opcodes(SASS)
    assert ops["UTMALDG.2D"] == 1 and ops["STG.E"] == 1
    fam = count_families(ops)
    assert fam["UTC*MMA (tcgen05.mma)"] == 1
    assert fam["HGMMA (wgmma)"] == 1
    assert fam["UTMALDG (TMA load)"] == 1
    assert fam["UTMASTG (TMA store)"] == 1
    assert fam["STG.E.ENL2.256"] == 1
    assert fam["STG.E.128"] == 1
    assert fam["STG (other)"] == 1
    assert fam["SYNCS (mbarrier)"] == 1
    assert fam["LDTM (tcgen05.ld)"] == 1


def test_tmem_columns_from_ptx():
    ptx = (
        "\tmov.b32 \t%r105, 256;\n"
        "\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 \t[%r11], %r105;\n"
    )
    assert parse_tmem_columns(ptx) == 256
    assert parse_tmem_columns("no tensor memory here") == 0


def test_launch_smem_from_host_ir():
    struct = "!llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>"
    ir = "\n".join(
        [
            "  llvm.func @host() {",
            "    %17 = llvm.mlir.constant(192 : i32) : i32",
            "    %18 = llvm.mlir.constant(221360 : i64) : i64",
            f"    %89 = llvm.getelementptr %86[0, 1, 0] : (!llvm.ptr) -> !llvm.ptr, {struct}",
            "    llvm.store %17, %89 : i32, !llvm.ptr",
            f"    %92 = llvm.getelementptr %86[0, 2] : (!llvm.ptr) -> !llvm.ptr, {struct}",
            "    llvm.store %18, %92 : i64, !llvm.ptr",
        ]
    )
    # a grid that depends on a run-time value (the rows): no constant, 0
    assert parse_launches(ir) == [{"smem": 221360, "threads": 192, "grid": 0}]
    # a persistent kernel's grid is a compile-time constant (4 CTAs)
    fixed = ir.replace(
        "  llvm.func @host() {",
        "  llvm.func @host() {\n    %5 = llvm.mlir.constant(4 : i32) : i32\n"
        f"    %90 = llvm.getelementptr %86[0, 0, 0] : (!llvm.ptr) -> !llvm.ptr, {struct}\n"
        "    llvm.store %5, %90 : i32, !llvm.ptr",
    )
    assert parse_launches(fixed) == [{"smem": 221360, "threads": 192, "grid": 4}]


def test_stage_modules_are_found_by_number():
    assert stage_module_name(1, "sm_100a") == "pearl_moe.kernels.sm100.stage1_gemm"
    assert stage_module_name(3, "sm_100a") == "pearl_moe.kernels.sm100.stage3_persistent"
    assert stage_module_name(6, "sm_90a") == "pearl_moe.kernels.sm90.stage3_persistent"
    with pytest.raises(ModuleNotFoundError, match="no kernel for stage 9"):
        stage_module_name(9, "sm_100a")


def test_compile_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("PEARL_MOE_CACHE", str(tmp_path))
    config = GemmConfig(ring_depth=6)
    first = compile_stage(1, config)
    second = compile_stage(1, config)
    assert not first.cached and second.cached
    assert second.smem_bytes == first.smem_bytes == first.model_smem_bytes
    assert second.families == first.families
    assert "UTCHMMA" in second.sass


def test_cli_prints_report(capsys):
    assert (
        main(["--stage", "1", "--arch", "sm_100a", "--tile", "128x128x64", "--ring-depth", "6"])
        == 0
    )
    out = capsys.readouterr().out
    assert "SMEM      221360 B compiled, 221360 B budget model" in out
    assert "UTC*MMA" in out


def test_cli_rejects_impossible_config(capsys):
    assert main(["--stage", "3", "--tile", "96x128x64"]) == 1
    assert "tile_m=96" in capsys.readouterr().err
