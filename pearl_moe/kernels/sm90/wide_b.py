"""Stage 6 on sm_90a: one B ring entry spans two K tiles.

Until stage 5 a ring entry holds one K tile of A and one of B, and the TMA fetches 128 contiguous
bytes of each weight row per request (``tile_k = 64`` bf16). Now B gets a ring of its own whose
entries hold two adjacent K tiles (``tile_n x 128``), so each ``cute.copy`` of B reads 256
contiguous bytes of every weight row (two TMA instructions: a 128-byte-swizzled box is at most
128 bytes wide) and more weight bytes are buffered for the same shared memory, because the A ring
(small at 64 rows) keeps one K tile per entry::

    producer, per K tile kt:   A entry <- A[kt]                       (every K tile)
                               B entry <- B[kt, kt + 1]   if kt is even (opens the entry)
    consumer, per K tile kt:   wait A entry; wait B entry if kt is even
                               wgmma over k blocks (kt % 2) * 4 .. + 3 of the B entry
                               release A entry; release B entry after kt odd or the last kt

wgmma is asynchronous: an entry may be released only once the wgmma that read it has finished.
As in stage 3 the consumer keeps one K tile of wgmma in flight (``wait_group(1)``) and releases
the entries of K tile ``kt - 1`` after issuing ``kt``; a B entry is released after its second
(or the tile's last) K tile completes.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

__all__ = ["WideBEntries"]


class WideBEntries:
    """Producer and consumer halves of a tile with wide B entries (``b_k_tiles=2``)."""

    @cute.jit
    def load_k_tiles_wide_b(
        self, a_pipeline, b_pipeline, a_state, b_state, tma_atom_a, tAgA, tAsA, tma_atom_b, tBgB, tBsB
    ):  # fmt: skip
        """TMA producer: every K tile of A into the A ring, every pair of K tiles of B into one B
        entry. ``tBgB`` is tiled by ``tile_k * b_k_tiles`` along K. Returns both ring states."""
        for kt in cutlass.range(self.k_tiles, unroll=1):
            a_pipeline.producer_acquire(a_state)
            a_bar = a_pipeline.producer_get_barrier(a_state)
            cute.copy(tma_atom_a, tAgA[(None, kt)], tAsA[(None, a_state.index)], tma_bar_ptr=a_bar)
            a_state.advance()
            if kt % self.b_k_tiles == 0:
                b_pipeline.producer_acquire(b_state)
                b_bar = b_pipeline.producer_get_barrier(b_state)
                cute.copy(
                    tma_atom_b,
                    tBgB[(None, kt // self.b_k_tiles)],
                    tBsB[(None, b_state.index)],
                    tma_bar_ptr=b_bar,
                )
                b_state.advance()
        return a_state, b_state

    @cute.jit
    def mma_k_loop_wide_b(
        self, tiled_mma, acc, tCrA, tCrB, a_pipeline, b_pipeline, a_read, a_release, b_read, b_release
    ):  # fmt: skip
        """wgmma consumer of one tile: A entry per K tile, B entry per ``b_k_tiles`` K tiles."""
        kblocks = cute.size(tCrA, mode=[2])
        last = self.k_tiles - 1
        for kt in cutlass.range(self.k_tiles, unroll=1):
            a_pipeline.consumer_wait(a_read)
            half = kt % self.b_k_tiles
            if half == 0:
                b_pipeline.consumer_wait(b_read)
            self.mma_k_tile(tiled_mma, acc, tCrA, tCrB, a_read.index, b_read.index, half * kblocks)
            a_read.advance()
            if half == self.b_k_tiles - 1 or kt == last:
                b_read.advance()
            cute.nvgpu.warpgroup.wait_group(1)
            # K tile kt - 1 has finished: its A entry, and its B entry if kt - 1 closed one
            if kt > 0:
                a_pipeline.consumer_release(a_release)
                a_release.advance()
                if (kt - 1) % self.b_k_tiles == self.b_k_tiles - 1:
                    b_pipeline.consumer_release(b_release)
                    b_release.advance()
        cute.nvgpu.warpgroup.wait_group(0)
        # the tile's last K tile always closes its B entry
        a_pipeline.consumer_release(a_release)
        a_release.advance()
        b_pipeline.consumer_release(b_release)
        b_release.advance()
        return a_read, a_release, b_read, b_release
