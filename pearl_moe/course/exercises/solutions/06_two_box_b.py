"""Solution: one B ring entry spans two K tiles, filled by two 128-byte-wide TMA boxes that
complete on the entry's one full barrier, armed with both boxes' bytes."""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.memory import SmemAllocator

from pearl_moe.kernels.host import placeholder_ptr

BN, BK = 128, 64  # weight rows per CTA; one K tile is 64 bf16 = 128 bytes of each weight row
ENTRY_K = 2 * BK  # a B entry spans two adjacent K tiles: 256 bytes of each weight row
RING = 2  # entries in the ring
THREADS = BN  # one thread per weight row


@cute.kernel
def row_sums(tma: cute.CopyAtom, mB: cute.Tensor, mOut: cute.Tensor, layout: cute.ComposedLayout):
    """out[n] = sum over k of B[n, k]: the weights stream through the ring, one entry at a time."""
    tidx, _, _ = cute.arch.thread_idx()
    n_tile, _, _ = cute.arch.block_idx()
    smem = SmemAllocator()
    # (BN, ENTRY_K, RING): two swizzle atoms side by side along K in every entry
    sB = smem.allocate_tensor(cutlass.BFloat16, layout.outer, 1024, layout.inner)
    full = smem.allocate_array(cutlass.Int64, RING, byte_alignment=8)  # one barrier per entry
    gB = cute.local_tile(mB, (BN, ENTRY_K), (n_tile, None))  # (BN, ENTRY_K, entries)
    tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
        tma, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2)
    )
    entries = cute.size(gB, mode=[2])
    tx_bytes = BN * ENTRY_K * 2  # both boxes: the barrier completes when the second has landed
    if tidx == 0:
        for i in cutlass.range_constexpr(RING):
            cute.arch.mbarrier_init(full + i, 1)
        cute.arch.mbarrier_init_fence()
    cute.arch.barrier()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    if warp == 0:  # fill the ring; a whole warp issues each copy, the TMA op elects one lane
        for e in cutlass.range(RING, unroll=1):
            with cute.arch.elect_one():  # one arrival, which also announces the entry's bytes
                cute.arch.mbarrier_arrive_and_expect_tx(full + e, tx_bytes)
            cute.copy(tma, tBgB[(None, e)], tBsB[(None, e)], tma_bar_ptr=full + e)
    acc = cutlass.Float32(0.0)
    for e in cutlass.range(entries, unroll=1):
        slot = e % RING
        cute.arch.mbarrier_wait(full + slot, (e // RING) % 2)
        for c in cutlass.range(ENTRY_K, unroll=8):  # both K tiles of the entry
            acc += sB[tidx, c, slot].to(cutlass.Float32)
        cute.arch.barrier()  # every thread has read the entry: refill it
        if warp == 0 and e + RING < entries:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(full + slot, tx_bytes)
            cute.copy(tma, tBgB[(None, e + RING)], tBsB[(None, slot)], tma_bar_ptr=full + slot)
    mOut[n_tile * BN + tidx] = acc


@cute.jit
def host(
    b: cute.Pointer,
    out: cute.Pointer,
    n: cutlass.Constexpr,
    k: cutlass.Constexpr,
    stream: cuda.CUstream,
):
    mB = cute.make_tensor(b, cute.make_layout((n, k), stride=(k, 1)))  # weights, K-major
    mOut = cute.make_tensor(out, cute.make_layout(n))
    atom = cute.make_layout((8, BK), stride=(BK, 1))  # the 128-byte swizzle atom: 8 rows x 64 bf16
    swizzle = cute.make_swizzle(3, 4, 3)
    # the atom tiled over (BN, ENTRY_K, RING), rows first: each K tile of an entry is one
    # BN x 64 block, what one 128-byte-wide box fills
    ring = cute.tile_to_shape(atom, (BN, ENTRY_K, RING), (0, 1, 2))
    layout = cute.make_composed_layout(swizzle, 0, ring)
    one_entry = cute.make_composed_layout(
        swizzle, 0, cute.tile_to_shape(atom, (BN, ENTRY_K), (0, 1))
    )
    op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
    # a box of (BN, ENTRY_K): wider than the swizzle allows, so the atom issues two boxes
    tma, mB_tma = cute.nvgpu.cpasync.make_tiled_tma_atom(op, mB, one_entry, (BN, ENTRY_K))
    row_sums(tma, mB_tma, mOut, layout).launch(
        grid=(n // BN, 1, 1), block=[THREADS, 1, 1], stream=stream
    )


def example_args():
    return placeholder_ptr(), placeholder_ptr(cutlass.Float32, 4), 4096, 6144, cuda.CUstream(0)
