"""Solution of 01-ring-producer: the TMA producer's K loop over a ring of full/empty mbarriers.

One CTA streams every K tile of its 128 rows of A and of B through a ring of ``RING`` entries.
Warp 4 is the producer (one lane arms each barrier, one lane issues each TMA copy); warps 0-3 are
the consumers, a stand-in for the MMA: thread ``r`` accumulates the dot product of row ``r`` of A
and row ``r`` of B, the diagonal entry ``C[r, r]`` of ``A @ B^T``, so every byte the ring delivers
is read.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.memory import SmemAllocator

from pearl_moe.kernels.host import placeholder_ptr

BM, BK, RING = 128, 64, 4  # a ring entry: a 128 x 64 box of A and one of B; 4 entries
CONSUMERS = 128  # warps 0-3 read the ring; warp 4 fills it
BYTES = 2 * BM * BK * 2  # the bytes one entry receives: two boxes of bf16


@cute.kernel
def ring_kernel(tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
                mOut: cute.Tensor, layout: cute.ComposedLayout):  # fmt: skip
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    m_tile, _, _ = cute.arch.block_idx()
    smem = SmemAllocator()
    sA = smem.allocate_tensor(cutlass.BFloat16, layout.outer, 1024, layout.inner)  # (BM, BK, RING)
    sB = smem.allocate_tensor(cutlass.BFloat16, layout.outer, 1024, layout.inner)  # (BM, BK, RING)
    full = smem.allocate_array(cutlass.Int64, RING, byte_alignment=8)  # "entry s has landed"
    empty = smem.allocate_array(cutlass.Int64, RING, byte_alignment=8)  # "entry s was read"
    gA = cute.local_tile(mA, (BM, BK), (m_tile, None))  # (BM, BK, k_tiles)
    gB = cute.local_tile(mB, (BM, BK), (m_tile, None))  # (BM, BK, k_tiles)
    # (TMA, RING) and (TMA, k_tiles): the ring entries and the K tiles, as TMA boxes
    tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
        tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
    )
    tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
        tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2)
    )
    if tidx == 0:
        for s in cutlass.range_constexpr(RING):
            cute.arch.mbarrier_init(full + s, 1)  # one arrival: the producer's expect_tx
            cute.arch.mbarrier_init(empty + s, CONSUMERS)  # one arrival per consumer thread
        cute.arch.mbarrier_init_fence()
    cute.arch.barrier()
    k_tiles = cute.size(gA, mode=[2])

    if warp == 4:  # ---- the producer warp keeps the ring full
        for kt in cutlass.range(k_tiles, unroll=1):
            s = kt % RING
            # Wait until the consumers have released entry s on the previous lap. On the first
            # lap there is nothing to wait for: a fresh barrier counts the phase before its first
            # (parity 1) as complete, so the producer's parity is the consumers' flipped.
            cute.arch.mbarrier_wait(empty + s, (kt // RING + 1) % 2)
            # One arrival (one lane) that also announces the bytes the two copies will deliver;
            # the phase of full[s] completes when all of them have landed.
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(full + s, BYTES)
            # A TMA copy is issued by one lane; cute.copy elects it among the warp's lanes.
            cute.copy(tma_a, tAgA[(None, kt)], tAsA[(None, s)], tma_bar_ptr=full + s)
            cute.copy(tma_b, tBgB[(None, kt)], tBsB[(None, s)], tma_bar_ptr=full + s)
    else:  # ---- the consumers: thread r computes C[r, r] = A[r, :] . B[r, :]
        acc = cutlass.Float32(0.0)
        for kt in cutlass.range(k_tiles, unroll=1):
            s = kt % RING
            cute.arch.mbarrier_wait(full + s, (kt // RING) % 2)  # lap kt // RING of entry s
            for j in cutlass.range_constexpr(BK):
                acc += sA[tidx, j, s].to(cutlass.Float32) * sB[tidx, j, s].to(cutlass.Float32)
            cute.arch.mbarrier_arrive(empty + s)  # done reading entry s: it may be refilled
        if m_tile * BM + tidx < cute.size(mOut):  # the last tile may reach past row m - 1
            mOut[m_tile * BM + tidx] = acc


@cute.jit
def host(a: cute.Pointer, b: cute.Pointer, out: cute.Pointer, m: cutlass.Int32,
         k: cutlass.Constexpr, stream: cuda.CUstream):  # fmt: skip
    mA = cute.make_tensor(a, cute.make_layout((m, k), stride=(k, 1)))  # K-major, like W
    mB = cute.make_tensor(b, cute.make_layout((m, k), stride=(k, 1)))
    mOut = cute.make_tensor(out, cute.make_layout(m))  # fp32, one value per row
    # RING entries of BM x BK bf16, each tiled from the 8 x 64 atom of the 128-byte swizzle
    atom = cute.make_layout((8, BK), stride=(BK, 1))
    ring = cute.tile_to_shape(atom, (BM, BK, RING), (0, 1, 2))
    layout = cute.make_composed_layout(cute.make_swizzle(3, 4, 3), 0, ring)
    one_entry = cute.slice_(layout, (None, None, 0))
    op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
    tma_a, mA_tma = cute.nvgpu.cpasync.make_tiled_tma_atom(op, mA, one_entry, (BM, BK))
    tma_b, mB_tma = cute.nvgpu.cpasync.make_tiled_tma_atom(op, mB, one_entry, (BM, BK))
    grid = ((m + BM - 1) // BM, 1, 1)
    ring_kernel(tma_a, mA_tma, tma_b, mB_tma, mOut, layout).launch(
        grid=grid, block=[CONSUMERS + 32, 1, 1], stream=stream
    )


def example_args():  # what cute.compile(host, ...) gets: no GPU, no memory
    ptr = placeholder_ptr
    return ptr(), ptr(), ptr(cutlass.Float32, 4), 512, 6144, cuda.CUstream(0)
