"""Solution of 03-persistent-loop: persistent CTAs walk the ragged tile list, and the ring runs on
from one tile into the next.

The grid is one CTA per SM. The tiles are numbered expert by expert (an expert with ``m_e`` rows
has ``ceil(m_e / BM)``; an empty expert none), and CTA ``c`` of ``C`` takes tiles ``c, c + C,
c + 2C, ...``. ``seek`` finds the expert of a tile by walking forward from the expert of the CTA's
previous tile: a CTA's tile numbers only grow, so over the whole kernel it reads each expert's
offsets about once.

Warp 4 is the TMA producer, warps 0-3 the consumers (a stand-in for the MMA and the epilogue:
thread ``r`` sums row ``r`` of every K tile of A, ``out = A @ ones(K)``, and stores it if the row
belongs to the tile's expert). Each role runs its own copy of the tile loop; the roles meet only at
the ring's full/empty mbarriers, and the ring position ``it`` counts every K tile of the CTA, so
the first K tile of the next tile goes into the entry after the last one of this tile, as soon as
the consumers have released it. No CTA-wide barrier between tiles.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass.memory import SmemAllocator

from pearl_moe.kernels.host import placeholder_ptr

BM, BK, RING = 128, 64, 4  # a tile: BM rows of A; a ring entry: one BM x BK box; RING entries
CONSUMERS = 128  # warps 0-3 drain the ring (thread r <-> row r of the tile); warp 4 fills it
BYTES = BM * BK * 2  # the bytes one entry receives: one box of bf16


@cute.jit
def expert_rows(mOffs: cute.Tensor, expert: Int32, rows: Int32):
    """``(start, end)``: the rows of ``expert`` from the E end offsets, clamped into [0, rows]
    (notebook 02)."""
    start = Int32(0)
    if expert > 0:
        start = cutlass.min(cutlass.max(mOffs[expert - 1], Int32(0)), rows)
    end = cutlass.min(cutlass.max(mOffs[expert], start), rows)
    return start, end


@cute.jit
def expert_tiles(mOffs: cute.Tensor, expert: Int32, rows: Int32):
    """How many tiles ``expert`` has: ceil(its rows / BM), 0 for an empty expert."""
    start, end = expert_rows(mOffs, expert, rows)
    return (end - start + BM - 1) // BM


@cute.jit
def seek(mOffs: cute.Tensor, tile: Int32, expert: Int32, first: Int32, rows: Int32):
    """Walk forward from ``expert`` (whose first tile is number ``first``) to the expert that owns
    ``tile``; return ``(that expert, its first tile)``, or ``(E, ...)`` past the last tile."""
    experts = cute.size(mOffs)
    # min(): never read past the last expert's offset (the walk may stop at expert == E)
    count = expert_tiles(mOffs, cutlass.min(expert, experts - 1), rows)
    while expert < experts and tile >= first + count:
        first = first + count  # tile lies beyond this expert: skip its tiles (0 if it is empty)
        expert = expert + 1
        count = expert_tiles(mOffs, cutlass.min(expert, experts - 1), rows)
    return expert, first


@cute.kernel
def persistent_kernel(tma: cute.CopyAtom, mA: cute.Tensor, mOffs: cute.Tensor, mOut: cute.Tensor,
                      layout: cute.ComposedLayout):  # fmt: skip
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    cta, _, _ = cute.arch.block_idx()
    ctas, _, _ = cute.arch.grid_dim()  # C: as many CTAs as the host launched (one per SM)
    rows = cute.size(mA, mode=[0])
    experts = cute.size(mOffs)
    k_tiles = cute.size(mA, mode=[1]) // BK
    smem = SmemAllocator()
    sA = smem.allocate_tensor(cutlass.BFloat16, layout.outer, 1024, layout.inner)  # (BM, BK, RING)
    full = smem.allocate_array(cutlass.Int64, RING, byte_alignment=8)  # "entry s has landed"
    empty = smem.allocate_array(cutlass.Int64, RING, byte_alignment=8)  # "entry s was read"
    if tidx == 0:
        for s in cutlass.range_constexpr(RING):
            cute.arch.mbarrier_init(full + s, 1)  # one arrival: the producer's expect_tx
            cute.arch.mbarrier_init(empty + s, CONSUMERS)  # one arrival per consumer thread
        cute.arch.mbarrier_init_fence()
    cute.arch.barrier()  # the only CTA-wide barrier: after it the roles meet at mbarriers only

    # Every role walks the same tiles in the same order, so no role tells another what comes next.
    tile = cta
    expert, first = seek(mOffs, tile, Int32(0), Int32(0), rows)
    it = Int32(0)  # ring position: K tiles this role has passed through the ring, all tiles so far
    if warp == 4:  # ---- the producer warp: the K tiles of all the CTA's tiles, back to back
        while expert < experts:
            start, _ = expert_rows(mOffs, expert, rows)
            row0 = start + (tile - first) * BM
            gA = cute.local_tile(cute.domain_offset((row0, 0), mA), (BM, BK), (0, None))
            tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
                tma, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
            )
            for kt in cutlass.range(k_tiles, unroll=1):
                s = it % RING
                cute.arch.mbarrier_wait(empty + s, (it // RING + 1) % 2)  # released on last lap
                with cute.arch.elect_one():  # one lane arms full[s]; the whole warp copies
                    cute.arch.mbarrier_arrive_and_expect_tx(full + s, BYTES)
                cute.copy(tma, tAgA[(None, kt)], tAsA[(None, s)], tma_bar_ptr=full + s)
                it += 1
            tile += ctas  # the CTA's next tile; no wait for the consumers to finish this one
            expert, first = seek(mOffs, tile, expert, first, rows)
    else:  # ---- the consumers: thread r sums row r of the tile, K tile by K tile
        while expert < experts:
            start, end = expert_rows(mOffs, expert, rows)
            row0 = start + (tile - first) * BM
            acc = cutlass.Float32(0.0)
            for _kt in cutlass.range(k_tiles, unroll=1):
                s = it % RING
                cute.arch.mbarrier_wait(full + s, (it // RING) % 2)
                for j in cutlass.range_constexpr(BK):
                    acc += sA[tidx, j, s].to(cutlass.Float32)
                cute.arch.mbarrier_arrive(empty + s)  # entry s may be refilled, for any tile
                it += 1
            if row0 + tidx < end:  # rows past the expert's end are the next expert's
                mOut[row0 + tidx] = acc
            tile += ctas
            expert, first = seek(mOffs, tile, expert, first, rows)


@cute.jit
def host(a: cute.Pointer, offs: cute.Pointer, out: cute.Pointer, rows: Int32, sms: Int32,
         k: cutlass.Constexpr, experts: cutlass.Constexpr, stream: cuda.CUstream):  # fmt: skip
    mA = cute.make_tensor(a, cute.make_layout((rows, k), stride=(k, 1)))
    mOffs = cute.make_tensor(offs, cute.make_layout(experts))  # E end offsets (torch grouped_mm)
    mOut = cute.make_tensor(out, cute.make_layout(rows))  # fp32, one value per row
    # RING entries of BM x BK bf16, each tiled from the 8 x 64 atom of the 128-byte swizzle
    atom = cute.make_layout((8, BK), stride=(BK, 1))
    ring = cute.tile_to_shape(atom, (BM, BK, RING), (0, 1, 2))
    layout = cute.make_composed_layout(cute.make_swizzle(3, 4, 3), 0, ring)
    op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
    tma, mA_tma = cute.nvgpu.cpasync.make_tiled_tma_atom(
        op, mA, cute.slice_(layout, (None, None, 0)), (BM, BK)
    )
    # one CTA per SM, whatever the offsets: the host never reads them
    persistent_kernel(tma, mA_tma, mOffs, mOut, layout).launch(
        grid=(sms, 1, 1), block=[CONSUMERS + 32, 1, 1], stream=stream
    )


def example_args():  # placeholder pointers; 4096 rows, 132 SMs, K = 1024, 32 experts; no GPU
    ptr = placeholder_ptr
    out = ptr(cutlass.Float32, 4)  # fp32: one sum per row
    return ptr(), ptr(cutlass.Int32, 4), out, 4096, 132, 1024, 32, cuda.CUstream(0)
