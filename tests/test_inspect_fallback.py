"""Where the DSL refuses to dump SASS (an nvdisasm older than CUDA 13.3, as on a GPU machine with
an older toolkit), inspect disassembles the cubin itself and must report the same facts."""

from __future__ import annotations

import os

import pytest

from pearl_moe.config import GemmConfig
from pearl_moe.course import kernel_report as ins


def test_fallback_disassembly_reports_the_same_families(
    tmp_path, monkeypatch, wheel_nvdisasm_on_path
):
    monkeypatch.setenv("PEARL_MOE_CACHE", str(tmp_path / "dsl"))
    requests = [(1, GemmConfig(arch="sm_90a"), None, None, None, None)]
    (dsl,) = ins.compile_many(requests, use_cache=False)
    assert dsl.sass_tool.startswith("CuTe DSL")

    # The DSL may not dump SASS: the worker keeps PTX and cubin only; nvdisasm on PATH reads it.
    monkeypatch.setenv("PEARL_MOE_CACHE", str(tmp_path / "fallback"))
    once = ins._run_worker_once
    monkeypatch.setattr(
        ins,
        "_run_worker_once",
        lambda arch, jobs, timeout, keep: once(arch, jobs, timeout, "ptx,cubin"),
    )
    (fallback,) = ins.compile_many(requests, use_cache=False)
    assert fallback.sass_tool == "nvdisasm"
    assert fallback.families == dsl.families and fallback.families["HGMMA (wgmma)"] > 0
    assert fallback.smem_bytes == dsl.smem_bytes


def test_no_disassembler_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(os.path, "exists", lambda p: False)
    with pytest.raises(RuntimeError, match="nvidia-cuda-nvdisasm"):
        ins.disassemble(b"not a cubin")
