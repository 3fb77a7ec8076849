"""Stage 7's option (``acc_slots=2``): the two halves of a 512-column accumulator, released apart.

A 2-CTA 256 x 512 tile's accumulator fills all 512 TMEM columns of each SM, so there is one
accumulator buffer and, with one barrier pair for it, the MMA warp cannot start the next tile
before the epilogue has drained every column. But the tile is two MMA atoms along N (each
K block issues a 256-wide UMMA into columns 0-255 and one into 256-511), so the accumulator
pipeline gets two entries, one per half ("slot"), synchronized independently::

    MMA warp, per tile:
        acquire slot 0 (columns 0-255)            <- the epilogue released it first
        K tiles 0 .. k_start-1: atom 0 only, ring entries held (not released)
        acquire slot 1 (columns 256-511)          <- the epilogue may still be draining it
        K tiles 0 .. k_start-1: atom 1 catches up on the held entries, then releases them
        K tiles k_start .. end: both atoms per K block, as before
        commit slot 0, commit slot 1              (tcgen05.commit to both CTAs of the pair)
    epilogue warps, per tile (direct_store.DirectStoreEpilogue.store_tile_direct):
        wait slot 0, drain subtiles 0-7 (tcgen05.wait::ld after the last), release slot 0
        wait slot 1, drain subtiles 8-15, release slot 1

So the next tile's first ``k_start`` K tiles of atom 0 overlap the epilogue's second half.
``k_start`` is half the ring (at least 1): held entries cannot be refilled, so it must stay below
``ring_depth`` for the loads to keep streaming. In 2-CTA mode only the leader CTA runs this loop;
its empty barriers count the epilogue warps of both CTAs (4 x 2 arrivals per slot).

Budget (2-CTA 256 x 512 x 64, direct store): per CTA an A entry is 128 x 64 x 2 B = 16 KB and a B
entry (half of the 512 columns) 256 x 64 x 2 B = 32 KB, so 4 entries = 192 KB; barriers
(2 x 4 + 2 x 1 x 2) x 8 B + 64 B = 160 B; TMEM 512 columns (128 lanes x 512 per CTA).

Compile-verified only: no B200 has ever run this code.
"""

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import tcgen05

__all__ = ["SplitAccumulator"]


class SplitAccumulator:
    """Mixed into :class:`~.stage3_persistent.PersistentGroupedGemmKernel`; used when
    ``config.acc_slots == 2``."""

    @property
    def split_k_start(self) -> int:
        """K tiles atom 0 runs ahead on held ring entries: half the ring, at least one."""
        return max(1, self.ring_depth // 2)

    def mma_atom(self, tiled_mma, tCtAcc, tCrA, tCrB, slot, k_block, entry):
        """One UMMA of atom ``slot``: columns ``256 slot + [0, 256)`` (+)= A x B of one K block.

        The caller sets ``ACCUMULATE`` (off for the first K block of each atom): a helper's change
        to ``tiled_mma`` would not be carried out of the caller's loop."""
        # (MMA) x (MMA) => (MMA): the slot's accumulator, the entry's A and the slot's B columns
        cute.gemm(
            tiled_mma,
            tCtAcc[(None, 0, slot)],
            tCrA[(None, 0, k_block, entry)],
            tCrB[(None, slot, k_block, entry)],
            tCtAcc[(None, 0, slot)],
        )

    @cute.jit
    def mma_tile_split(
        self, tiled_mma, tCtAcc, tCrA, tCrB, ab_consumer, acc_pipeline, acc_state, k_tile_cnt
    ):
        """All UMMAs of one tile into the two accumulator slots (see the module docstring).

        ``tCtAcc`` (MMA, MMA_M, 2): the tile's accumulator, slot ``s`` = atom ``s`` (columns
        ``256 s`` to ``256 s + 255``). Returns ``(tiled_mma, ab_consumer, acc_state)`` with
        ``acc_state`` advanced past both slots.
        """
        kblocks = cute.size(tCrA, mode=[2])
        hold = min(self.split_k_start, k_tile_cnt)  # k_tile_cnt is a compile-time count
        # where the held entries start: atom 1 walks them again from here
        catch_up = ab_consumer.clone()

        # slot 0: columns 0-255 are free (the epilogue released them first)
        acc_pipeline.producer_acquire(acc_state)
        slot0 = acc_state.clone()
        acc_state.advance()
        tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
        for _k in cutlass.range(hold, unroll=1):
            entry = ab_consumer.wait_and_advance()  # kept, not released: atom 1 reads it too
            for k_block in cutlass.range(kblocks, unroll_full=True):
                self.mma_atom(tiled_mma, tCtAcc, tCrA, tCrB, 0, k_block, entry.index)
                tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
        # slot 1: wait until the epilogue has drained columns 256-511 of the previous tile
        acc_pipeline.producer_acquire(acc_state)
        slot1 = acc_state.clone()
        acc_state.advance()
        tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
        for _k in cutlass.range(hold, unroll=1):
            entry = catch_up.current_handle()
            for k_block in cutlass.range(kblocks, unroll_full=True):
                self.mma_atom(tiled_mma, tCtAcc, tCrA, tCrB, 1, k_block, entry.index)
                tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
            entry.release()  # both atoms have read it
            catch_up.advance()
        for _k_tile in cutlass.range(hold, k_tile_cnt, unroll=1):
            entry = ab_consumer.wait_and_advance()
            for k_block in cutlass.range(kblocks, unroll_full=True):
                self.mma_atom(tiled_mma, tCtAcc, tCrA, tCrB, 0, k_block, entry.index)
                self.mma_atom(tiled_mma, tCtAcc, tCrA, tCrB, 1, k_block, entry.index)
            entry.release()
        acc_pipeline.producer_commit(slot0)
        acc_pipeline.producer_commit(slot1)
        return tiled_mma, ab_consumer, acc_state
