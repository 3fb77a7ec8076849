"""Stage 6's option (``b_k_tiles=2``): one B ring entry spans two K tiles.

A B entry of stage 5 holds one K tile of the weights: ``tile_n x 64`` bf16, 128 contiguous bytes
of each weight row. Here a B entry holds two adjacent K tiles (``tile_n x 128``, 256 contiguous
bytes per weight row per request), in a ring of its own (``b_ring_depth`` entries) with its own
full/empty barriers, next to the A ring, whose entries stay one K tile::

    TMA warp, K tile k:  acquire A entry, load A(k)
                         if k is even: acquire B entry, load B(k, k + 1)   (one cute.copy)
    MMA warp, K tile k:  wait A entry;  if k is even: wait B entry
                         UMMAs with B's K blocks [(k % 2) * 4, +4)
                         release A entry;  if k is odd or the last K tile: release B entry

A 128B-swizzled TMA box is at most 128 bytes wide, so the one ``cute.copy`` of a B entry is two
``UTMALDG`` instructions, one per 64-wide K tile (both land on the B entry's full barrier, which
expects the entry's bytes). When a tile has an odd number of K tiles, its last B entry's second half
lies past ``k``: the TMA unit zero-fills it (and still counts its bytes), and no UMMA reads it.

Barriers: ``2 x ring_depth`` (A) + ``2 x b_ring_depth`` (B) + the accumulator's, as
:func:`pearl_moe.config.smem_budget` counts them.

Compile-verified only: no B200 has ever run this code.
"""

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import tcgen05

__all__ = ["WideBEntries"]


class WideBEntries:
    """Mixed into :class:`~.stage3_persistent.PersistentGroupedGemmKernel`; used when
    ``config.b_k_tiles > 1``."""

    def _make_b_pipeline(self, storage, cluster_layout_vmnk):
        """The B ring (TMA -> UMMA): ``b_ring_depth`` entries of ``b_k_tiles`` K tiles each."""
        return self._tma_umma_ring(
            storage.b_mbar.data_ptr(), self.b_ring_depth, self.num_b_load_bytes,
            cluster_layout_vmnk, True,
        )  # fmt: skip

    @cute.jit
    def load_k_tiles_wide_b(
        self,
        tma_atom_a: cute.CopyAtom,
        tAgA: cute.Tensor,
        tAsA: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        tBgB: cute.Tensor,
        tBsB: cute.Tensor,
        ab_producer,
        b_producer,
        k_tile_cnt,
        a_mcast_mask=None,
        b_mcast_mask=None,
    ):
        """TMA-load one tile's K tiles: A into its ring every K tile, B every ``b_k_tiles``.

        ``tBgB`` ((ATOM_V, REST_V), RestK / b_k_tiles) holds B in entries of ``b_k_tiles`` K
        tiles. Returns both producers (their ring positions carry to the next tile).
        """
        for k_tile in cutlass.range(k_tile_cnt, unroll=1):
            a_entry = ab_producer.acquire_and_advance()
            cute.copy(
                tma_atom_a,
                tAgA[(None, k_tile)],
                tAsA[(None, a_entry.index)],
                tma_bar_ptr=a_entry.barrier,
                mcast_mask=a_mcast_mask,
            )
            if k_tile % self.b_k_tiles == 0:
                # a new B entry: b_k_tiles adjacent K tiles of every weight row
                b_entry = b_producer.acquire_and_advance()
                cute.copy(
                    tma_atom_b,
                    tBgB[(None, k_tile // self.b_k_tiles)],
                    tBsB[(None, b_entry.index)],
                    tma_bar_ptr=b_entry.barrier,
                    mcast_mask=b_mcast_mask,
                )
        return ab_producer, b_producer

    @cute.jit
    def mma_k_loop_wide_b(self, tiled_mma, tCtAcc, tCrA, tCrB, ab_consumer, b_consumer, k_tile_cnt):
        """:meth:`~.common.KernelBase.mma_k_loop` with B from entries of several K tiles.

        ``tCrB`` (MMA, MMA_N, MMA_K x b_k_tiles, B_STAGE): K tile ``k`` uses K blocks
        ``[(k % b_k_tiles) * kblocks, + kblocks)`` of its B entry.
        """
        tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
        kblocks = cute.size(tCrA, mode=[2])
        for k_tile in cutlass.range(k_tile_cnt, unroll=1):
            a_entry = ab_consumer.wait_and_advance()
            part = k_tile % self.b_k_tiles
            if part == 0:
                b_consumer.wait()  # the B entry this K tile opens has landed
            b_index = b_consumer.current_handle().index
            for k_block in cutlass.range(kblocks, unroll_full=True):
                cute.gemm(
                    tiled_mma,
                    tCtAcc,
                    tCrA[(None, None, k_block, a_entry.index)],
                    tCrB[(None, None, part * kblocks + k_block, b_index)],
                    tCtAcc,
                )
                tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
            a_entry.release()
            if part == self.b_k_tiles - 1 or k_tile == k_tile_cnt - 1:
                b_consumer.release()  # after the entry's last K tile (or the tile's last)
                b_consumer.advance()
        return tiled_mma, ab_consumer, b_consumer
