"""Solution of 02-expert-tile: which rows CTA (m tile, expert) owns, clamped at the expert's end.

The grid is stage 2's: ``x`` runs over as many m tiles as the *total* row count needs (no expert
can have more), ``z`` over the experts. Each CTA loads one ``BM x BK`` box of A from its tile's
first row with the TMA and copies the rows that belong to its expert to ``out``, a stand-in for
the GEMM's mainloop and its clipped store: rows past the expert's end are loaded but never stored.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass.memory import SmemAllocator

from pearl_moe.kernels.host import placeholder_ptr

BM, BK = 128, 64  # one box of A per CTA: BM rows, BK columns
THREADS = 128


@cute.jit
def expert_tile(mOffs: cute.Tensor, expert: Int32, m_tile: Int32, rows: Int32):
    """``(row0, valid)``: the first row of m tile ``m_tile`` of ``expert``, and how many of the
    tile's ``BM`` rows belong to the expert (0 or less: none, the CTA has nothing to do)."""
    # Expert e owns rows [offs[e - 1], offs[e]) (0 before the first), clamped into [0, rows]:
    # offsets that are negative, decreasing or past the end give an empty or shorter expert,
    # never a row outside A or out.
    start = Int32(0)
    if expert > 0:
        start = cutlass.min(cutlass.max(mOffs[expert - 1], Int32(0)), rows)
    end = cutlass.min(cutlass.max(mOffs[expert], start), rows)
    row0 = start + m_tile * BM
    return row0, cutlass.min(end - row0, BM)


@cute.kernel
def copy_tiles(tma: cute.CopyAtom, mA: cute.Tensor, mOffs: cute.Tensor, mOut: cute.Tensor,
               layout: cute.ComposedLayout):  # fmt: skip
    tidx, _, _ = cute.arch.thread_idx()
    m_tile, _, expert = cute.arch.block_idx()
    smem = SmemAllocator()
    sA = smem.allocate_tensor(cutlass.BFloat16, layout.outer, 1024, layout.inner)  # (BM, BK)
    full = smem.allocate_array(cutlass.Int64, 1, byte_alignment=8)
    if tidx == 0:
        cute.arch.mbarrier_init(full, 1)
        cute.arch.mbarrier_init_fence()
    cute.arch.barrier()
    row0, valid = expert_tile(mOffs, expert, m_tile, cute.size(mA, mode=[0]))
    if valid > 0:  # a CTA whose m tile starts past its expert's end does nothing
        # (BM, BK): the box from row row0, which need not be a multiple of BM (domain_offset)
        gA = cute.local_tile(cute.domain_offset((row0, 0), mA), (BM, BK), (0, 0))
        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
        )
        if tidx < 32:  # warp 0 loads: one lane arms the barrier, cute.copy elects one to copy
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(full, BM * BK * 2)
            cute.copy(tma, tAgA, tAsA, tma_bar_ptr=full)
        cute.arch.mbarrier_wait(full, 0)
        # box rows >= valid belong to the next expert (or lie past the end): never store them
        for i in cutlass.range(tidx, BM * BK, THREADS):
            if i // BK < valid:
                mOut[row0 + i // BK, i % BK] = sA[i // BK, i % BK]


@cute.jit
def host(a: cute.Pointer, offs: cute.Pointer, out: cute.Pointer, rows: Int32,
         experts: cutlass.Constexpr, stream: cuda.CUstream):  # fmt: skip
    mA = cute.make_tensor(a, cute.make_layout((rows, BK), stride=(BK, 1)))
    mOffs = cute.make_tensor(offs, cute.make_layout(experts))  # E end offsets (torch grouped_mm)
    mOut = cute.make_tensor(out, cute.make_layout((rows, BK), stride=(BK, 1)))
    atom = cute.make_layout((8, BK), stride=(BK, 1))  # the 128-byte swizzle's 8 x 64 atom
    layout = cute.make_composed_layout(
        cute.make_swizzle(3, 4, 3), 0, cute.tile_to_shape(atom, (BM, BK), (0, 1))
    )
    op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
    tma, mA_tma = cute.nvgpu.cpasync.make_tiled_tma_atom(op, mA, layout, (BM, BK))
    # x: as many m tiles as all rows need (no expert has more); z: one slice per expert
    grid = ((rows + BM - 1) // BM, 1, experts)
    copy_tiles(tma, mA_tma, mOffs, mOut, layout).launch(
        grid=grid, block=[THREADS, 1, 1], stream=stream
    )


def example_args():  # placeholder pointers, 512 rows, 32 experts: no GPU, no memory
    ptr = placeholder_ptr
    return ptr(), ptr(cutlass.Int32, 4), ptr(), 512, 32, cuda.CUstream(0)
