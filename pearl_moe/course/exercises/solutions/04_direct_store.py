"""Solution: the direct store on sm_100a, TMEM -> registers -> bf16 -> 256-bit global stores.

One CTA of four warps drains one 128 x 128 fp32 accumulator from tensor memory into rows
``128 * m_tile ...`` of a bf16 output that has ``m`` rows. ``tcgen05.ld.32x32b`` gives thread
``t`` lane ``t``, i.e. accumulator row ``t``: after the conversion a 32-column subtile is 64
contiguous bytes of one output row in registers, two 256-bit stores. Rows at or past ``m`` belong
to the next expert; a thread holds a single row, so one compare guards all of its stores.

A 256-bit store needs a 32-byte aligned address, and the copy atom is only accepted where the
compiler can prove it: the output pointer promises 32 bytes (``example_args``), the tile's rows
are 256 bytes apart and its subtiles 64 bytes apart, so every vector starts on a 32-byte boundary.

``fill_tmem`` stands in for the MMA warp: it writes the tile's fp32 values into tensor memory
where a 128-row MMA would leave them (row r in lane r).
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import CopyR2GOp, tcgen05
from cutlass.memory import SmemAllocator

from pearl_moe.kernels.host import placeholder_ptr

BM, BN = 128, 128  # one accumulator tile: 128 rows (TMEM lanes) x 128 fp32 columns
EPI_N = 32  # columns drained per step: 32 fp32 registers per thread
THREADS = 128  # four warps; warp w may read only TMEM lanes 32 w to 32 w + 31
LANE = 1 << 16  # a TMEM address holds the lane in bits 16 and up, the column in bits 0-15
VEC = 16  # bf16 per 256-bit store


@cute.jit
def fill_tmem(tidx, r2t, gAcc_s, tAcc_s):
    """The MMA's part, played by a copy: fp32 tile from global memory -> registers -> TMEM."""
    thr = r2t.get_slice(tidx)
    src, dst = thr.partition_S(gAcc_s), thr.partition_D(tAcc_s)
    regs = cute.make_rmem_tensor(src[(None, None, None, 0, 0)].shape, cutlass.Float32)
    for j in cutlass.range(cute.size(src, mode=[4]), unroll=1):
        cute.autovec_copy(src[(None, None, None, 0, j)], regs)
        cute.copy(r2t, regs, dst[(None, None, None, 0, j)])
    cute.arch.fence_view_async_tmem_store()  # tcgen05.wait::st: the values are in TMEM


@cute.kernel
def store_tile(mAcc: cute.Tensor, mC: cute.Tensor, m: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    m_tile, _, _ = cute.arch.block_idx()
    holder = SmemAllocator().allocate_array(cutlass.Int32, 1)  # the TMEM address lands here
    if warp == 0:
        cute.arch.alloc_tmem(BN, holder)
    cute.arch.barrier()
    tmem = cute.arch.retrieve_tmem_ptr(cutlass.Float32, 16, holder)
    # (BM, BN) accumulator in TMEM: row r in lane r, column c in column c
    tAcc = cute.make_tensor(tmem, cute.make_layout((BM, BN), stride=(LANE, 1)))
    # (BM, EPI_N, 1, SUBTILES): the accumulator, the fp32 input, the output and the output's
    # (row, column) coordinates, cut into EPI_N-column subtiles
    tiler = (BM, EPI_N)
    tAcc_s = cute.flat_divide(tAcc, tiler)
    gAcc_s = cute.flat_divide(cute.local_tile(mAcc, (BM, BN), (m_tile, 0)), tiler)
    gC_s = cute.flat_divide(cute.local_tile(mC, (BM, BN), (m_tile, 0)), tiler)
    cC = cute.local_tile(cute.make_identity_tensor(mC.shape), (BM, BN), (m_tile, 0))
    cC_s = cute.flat_divide(cC, tiler)
    # tcgen05.ld / st .32x32b, EPI_N times: thread t <-> lane t, EPI_N consecutive columns
    rep = tcgen05.Repetition(EPI_N)
    ld = cute.make_copy_atom(tcgen05.Ld32x32bOp(rep), cutlass.Float32)
    st = cute.make_copy_atom(tcgen05.St32x32bOp(rep), cutlass.Float32)
    t2r = tcgen05.make_tmem_copy(ld, tAcc_s[(None, None, 0, 0)])
    fill_tmem(tidx, tcgen05.make_tmem_copy(st, tAcc_s[(None, None, 0, 0)]), gAcc_s, tAcc_s)

    thr = t2r.get_slice(tidx)
    tTR_t = thr.partition_S(tAcc_s)  # (T2R, 1, 1, 1, SUBTILES): this thread's values in TMEM,
    tTR_g = thr.partition_D(gC_s)  # where they go in the output,
    tTR_c = thr.partition_D(cC_s)  # and their (row, column)
    rAcc = cute.make_rmem_tensor(tTR_g[(None, None, None, 0, 0)].shape, cutlass.Float32)
    rC = cute.make_rmem_tensor(rAcc.shape, cutlass.BFloat16)
    # one store moves VEC bf16 = 256 bits (refused at compile time unless 32-byte aligned)
    store = cute.make_copy_atom(CopyR2GOp(), cutlass.BFloat16, num_bits_per_copy=16 * VEC)
    for j in cutlass.range_constexpr(BN // EPI_N):
        cute.copy(t2r, tTR_t[(None, None, None, 0, j)], rAcc)  # TMEM -> registers
        cute.arch.fence_view_async_tmem_load()  # tcgen05.wait::ld: the registers are valid
        rC.store(rAcc.load().to(cutlass.BFloat16))
        row = tTR_c[(None, None, None, 0, j)][0][0]  # the one row this thread holds
        if row < m:  # rows from m on are the next expert's
            # ((VEC, REST), 1, 1): the registers and their destination as 256-bit vectors
            dst = tTR_g[(None, None, None, 0, j)]
            cute.copy(store, cute.logical_divide(rC, (VEC,)), cute.logical_divide(dst, (VEC,)))
    cute.arch.barrier()  # every warp has read its lanes before TMEM is freed
    if warp == 0:
        cute.arch.relinquish_tmem_alloc_permit()
        cute.arch.dealloc_tmem(tmem, BN)


@cute.jit
def host(acc: cute.Pointer, out: cute.Pointer, m: cutlass.Int32, stream: cuda.CUstream):
    tiles = (m + BM - 1) // BM
    mAcc = cute.make_tensor(acc, cute.make_layout((tiles * BM, BN), stride=(BN, 1)))  # fp32
    mC = cute.make_tensor(out, cute.make_layout((m, BN), stride=(BN, 1)))  # bf16, m rows
    store_tile(mAcc, mC, m).launch(grid=(tiles, 1, 1), block=[THREADS, 1, 1], stream=stream)


def example_args():  # no GPU, no memory: placeholder pointers and what they promise
    acc = placeholder_ptr(cutlass.Float32, align=16)
    out = placeholder_ptr(cutlass.BFloat16, align=32)  # 256-bit stores need 32-byte alignment
    return acc, out, 1000, cuda.CUstream(0)
