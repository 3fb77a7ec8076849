"""Scratch kernels from a notebook cell: compiled for both targets in worker processes."""

from __future__ import annotations

import pytest

from pearl_moe.course import ScratchReport, compile_scratch, load_ipython_extension
from pearl_moe.course.scratch import cute_compile, parse_expect_tx

SOURCE = """
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.memory import SmemAllocator

from pearl_moe.kernels.host import placeholder_ptr

BM, BK = 64, 128


@cute.kernel
def load_tile(tma: cute.CopyAtom, mA: cute.Tensor, mOut: cute.Tensor, layout: cute.ComposedLayout):
    tidx, _, _ = cute.arch.thread_idx()
    m_tile, _, _ = cute.arch.block_idx()
    smem = SmemAllocator()
    sA = smem.allocate_tensor(cutlass.BFloat16, layout.outer, 1024, layout.inner)
    full = smem.allocate_array(cutlass.Int64, 1, byte_alignment=8)
    gA = cute.local_tile(mA, (BM, BK), (m_tile, 0))
    tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
        tma, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
    )
    if tidx == 0:
        cute.arch.mbarrier_init(full, 1)
        cute.arch.mbarrier_init_fence()
    cute.arch.barrier()
    if tidx == 0:
        cute.arch.mbarrier_arrive_and_expect_tx(full, BM * BK * 2)
        cute.copy(tma, tAgA, tAsA, tma_bar_ptr=full)
    cute.arch.mbarrier_wait(full, 0)
    for i in cutlass.range(tidx, BM * BK, 128):
        mOut[m_tile * BM + i // BK, i % BK] = sA[i // BK, i % BK]


@cute.jit
def host(a: cute.Pointer, out: cute.Pointer, m: cutlass.Int32, k: cutlass.Constexpr, stream: cuda.CUstream):
    mA = cute.make_tensor(a, cute.make_layout((m, k), stride=(k, 1)))
    mOut = cute.make_tensor(out, cute.make_layout((m, BK), stride=(BK, 1)))
    atom = cute.make_layout((8, 64), stride=(64, 1))
    layout = cute.make_composed_layout(
        cute.make_swizzle(3, 4, 3), 0, cute.tile_to_shape(atom, (BM, BK), (0, 1))
    )
    op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
    tma, mA_tma = cute.nvgpu.cpasync.make_tiled_tma_atom(op, mA, layout, (BM, BK))
    load_tile(tma, mA_tma, mOut, layout).launch(
        grid=((m + BM - 1) // BM, 1, 1), block=[128, 1, 1], stream=stream
    )


def example_args():
    return placeholder_ptr(), placeholder_ptr(), 512, 6144, cuda.CUstream(0)
"""


def test_expect_tx_is_read_from_ptx():
    ptx = """
	mov.b32 	%r7, 16384;
	mbarrier.arrive.expect_tx.shared.b64 %rd3, [%r11], %r7;
	mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r12], 4096;
"""
    assert parse_expect_tx(ptx) == [16384, 4096]
    assert parse_expect_tx("no barriers here") == []


@pytest.mark.slow
def test_a_cell_compiles_for_both_targets(tmp_path, monkeypatch):
    monkeypatch.setenv("PEARL_MOE_CACHE", str(tmp_path))
    reports = compile_scratch(SOURCE)
    assert list(reports) == ["sm_100a", "sm_90a"]
    for arch, rep in reports.items():
        assert isinstance(rep, ScratchReport) and rep.arch == arch and not rep.cached
        # the 64 x 128 bf16 box plus one 8-byte mbarrier
        assert rep.smem_bytes == 64 * 128 * 2 + 8 and rep.threads == 128
        assert rep.expect_tx == [64 * 128 * 2]
        # 128 bf16 = 256 bytes per row, wider than the 128-byte swizzle: two TMA boxes
        assert rep.families["UTMALDG (TMA load)"] == 2
        assert any(line.startswith("UTMALDG") for line in rep.sass_lines(r"^UTMALDG"))
    again = compile_scratch(SOURCE, "sm_90a")
    assert again["sm_90a"].cached and again["sm_90a"].smem_bytes == reports["sm_90a"].smem_bytes


@pytest.mark.slow
def test_the_cell_magic_prints_and_keeps_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PEARL_MOE_CACHE", str(tmp_path))
    ns: dict = {}
    cute_compile('--arch sm_90a --sass "UTMALDG" --as mine', SOURCE, ns)
    out = capsys.readouterr().out
    assert "sm_90a: 128 threads per CTA, 16392 B shared memory" in out
    assert "UTMALDG.2D" in out and set(ns["mine"]) == {"sm_90a"}


def test_a_broken_cell_reports_the_workers_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PEARL_MOE_CACHE", str(tmp_path))
    with pytest.raises(RuntimeError, match="must define 'example_args'"):
        compile_scratch("x = 1\ndef host():\n    pass\n", "sm_90a")
    with pytest.raises(ValueError, match="targets"):
        compile_scratch(SOURCE, "sm_80")


def test_extension_registers_the_cell_magic():
    registered = {}

    class FakeIPython:
        user_ns: dict = {}

        def register_magic_function(self, fn, magic_kind, magic_name):
            registered[magic_name] = (fn, magic_kind)

    load_ipython_extension(FakeIPython())
    assert registered["cute_compile"][1] == "cell"


def test_a_refused_sass_dump_falls_back_to_disassembling_the_cubin(
    tmp_path, monkeypatch, wheel_nvdisasm_on_path
):
    """A GPU machine's CUDA 13.0 nvdisasm is too old for the DSL's own SASS dump: the scratch
    compile runs again keeping PTX and cubin only, and still reports the kernel's SASS."""
    from pearl_moe.course import scratch

    monkeypatch.setenv("PEARL_MOE_CACHE", str(tmp_path))
    keeps = []
    start, wait = scratch._start_worker, scratch._wait_worker

    def start_spy(*args, keep="ptx,cubin,sass"):
        keeps.append(keep)
        return start(*args, keep=keep)

    def wait_refusing_sass(arch, proc, tmp, timeout):
        if keeps[-1].endswith("sass"):
            proc.kill()
            proc.communicate()
            tmp.cleanup()
            raise RuntimeError("nvdisasm at '/usr/local/cuda/bin/nvdisasm' reports version 13.0")
        return wait(arch, proc, tmp, timeout)

    monkeypatch.setattr(scratch, "_start_worker", start_spy)
    monkeypatch.setattr(scratch, "_wait_worker", wait_refusing_sass)
    report = scratch.compile_scratch(SOURCE, "sm_90a", use_cache=False)["sm_90a"]
    assert keeps == ["ptx,cubin,sass", "ptx,cubin"]
    assert report.sass_tool == "nvdisasm"
    assert report.families["UTMALDG (TMA load)"] == 2
