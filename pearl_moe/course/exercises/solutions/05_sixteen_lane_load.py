"""Solution: reading a 64-row accumulator out of tensor memory, one row per thread.

An M = 64 MMA on one CTA leaves its accumulator in lanes 0-15 of each 32-lane TMEM quarter: row
``r`` in lane ``32 (r // 16) + r % 16``, i.e. the layout ``((16, 4), BN) : ((1, 32), 1)`` in lanes
(times ``LANE`` in a TMEM address). Warp ``w`` may read only its own quarter, so each of the four
warps reads 16 rows, with a 16-lane (16-datapath) form of ``tcgen05.ld``. Of those,
``16x32bx2`` gives threads 0-15 of a warp one row each and threads 16-31 the same rows' other half
of the subtile's columns: ``EPI_N / 2 = 16`` contiguous columns of one row per thread, one 256-bit
store after the conversion. (``16x256b``, what CUTLASS's ``get_tmem_load_op`` picks for M = 64,
hands each thread two columns of each of two rows: 32-bit stores.)

``fill_tmem`` stands in for the MMA warp: it writes the tile's fp32 values where an M = 64 MMA
would leave them; it uses the 16x256b store, any 16-lane form would do. The store loop takes the
widest vector the registers allow (at most 256 bits) and guards it at the expert's end.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import CopyR2GOp, tcgen05
from cutlass.memory import SmemAllocator

from pearl_moe.kernels.host import placeholder_ptr

BM, BN = 64, 128  # one accumulator tile: 64 rows x 128 fp32 columns
EPI_N = 32  # columns drained per step
THREADS = 128  # four warps; warp w may read only TMEM lanes 32 w to 32 w + 31
LANE = 1 << 16  # a TMEM address holds the lane in bits 16 and up, the column in bits 0-15

# Where an M = 64 MMA leaves row r: lane 32 (r // 16) + r % 16 (16 rows in each quarter)
ACC_SHAPE, ACC_STRIDE = ((16, 4), BN), ((LANE, 32 * LANE), 1)
# The 16-lane load that gives a thread EPI_N / 2 consecutive columns of one row
LOAD = tcgen05.Ld16x32bx2Op(tcgen05.Repetition(EPI_N // 2))
FILL = tcgen05.St16x256bOp(tcgen05.Repetition(EPI_N // 8))  # the MMA's stand-in


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
    tAcc = cute.make_tensor(tmem, cute.make_layout(ACC_SHAPE, stride=ACC_STRIDE))  # (BM, BN)
    # (BM, EPI_N, 1, SUBTILES): accumulator, fp32 input, output and (row, column) coordinates
    tiler = (BM, EPI_N)
    tAcc_s = cute.flat_divide(tAcc, tiler)
    gAcc_s = cute.flat_divide(cute.local_tile(mAcc, (BM, BN), (m_tile, 0)), tiler)
    gC_s = cute.flat_divide(cute.local_tile(mC, (BM, BN), (m_tile, 0)), tiler)
    cC = cute.local_tile(cute.make_identity_tensor(mC.shape), (BM, BN), (m_tile, 0))
    cC_s = cute.flat_divide(cC, tiler)
    t2r = tcgen05.make_tmem_copy(
        cute.make_copy_atom(LOAD, cutlass.Float32), tAcc_s[(None, None, 0, 0)]
    )
    r2t = tcgen05.make_tmem_copy(
        cute.make_copy_atom(FILL, cutlass.Float32), tAcc_s[(None, None, 0, 0)]
    )
    fill_tmem(tidx, r2t, gAcc_s, tAcc_s)

    thr = t2r.get_slice(tidx)
    tTR_t = thr.partition_S(tAcc_s)  # (T2R, 1, 1, 1, SUBTILES): this thread's values in TMEM,
    tTR_g = thr.partition_D(gC_s)  # where they go in the output,
    tTR_c = thr.partition_D(cC_s)  # and their (row, column)
    rAcc = cute.make_rmem_tensor(tTR_g[(None, None, None, 0, 0)].shape, cutlass.Float32)
    rC = cute.make_rmem_tensor(rAcc.shape, cutlass.BFloat16)
    # the widest store the registers allow: `vec` bf16 contiguous in registers and in the output
    vec = min(16, cute.size(cute.max_common_layout(rC, tTR_g[(None, None, None, 0, 0)])))
    store = cute.make_copy_atom(CopyR2GOp(), cutlass.BFloat16, num_bits_per_copy=16 * vec)
    for j in cutlass.range_constexpr(BN // EPI_N):
        cute.copy(t2r, tTR_t[(None, None, None, 0, j)], rAcc)  # TMEM -> registers
        cute.arch.fence_view_async_tmem_load()  # tcgen05.wait::ld: the registers are valid
        rC.store(rAcc.load().to(cutlass.BFloat16))
        # ((vec, REST), ...): registers, destination and coordinates as store vectors
        rC_v = cute.logical_divide(rC, (vec,))
        gC_v = cute.logical_divide(tTR_g[(None, None, None, 0, j)], (vec,))
        cC_v = cute.logical_divide(tTR_c[(None, None, None, 0, j)], (vec,))
        # (REST, ...): the (row, column) of each vector's first element, and one predicate each
        first = cute.slice_(cC_v, ((0, None),) + (None,) * (cute.rank(cC_v) - 1))
        pred = cute.make_rmem_tensor(first.shape, cutlass.Boolean)
        for v in cutlass.range_constexpr(cute.size(pred)):
            pred[v] = first[v][0] < m  # rows from m on are the next expert's
        cute.copy(store, rC_v, gC_v, pred=pred)
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
