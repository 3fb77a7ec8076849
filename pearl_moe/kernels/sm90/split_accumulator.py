"""Stage 7 on sm_90a, the split accumulator: two consumer warpgroups take alternate tiles, so one
stores while the other multiplies (what CUTLASS calls a ping-pong schedule).

Blackwell's stage 7 splits the TMEM accumulator into two slots so the epilogue of one tile overlaps
the MMA of the next. Hopper has no TMEM: the accumulator lives in the registers of the warpgroup
that issued the wgmma. The analog is two accumulators in two consumer warpgroups (``acc_slots=2``):
warpgroup 0 takes the CTA's tiles 0, 2, 4, ..., warpgroup 1 tiles 1, 3, 5, ... Each warpgroup owns a
whole tile: 64 rows (one m64 wgmma per k block), 128 rows at ``tile_n`` <= 192 (two m64 wgmma per
k block; 128 accumulator registers per thread at ``tile_n`` = 128, as a 64 x 256 tile, 192 at
``tile_n`` = 192), or 192 rows at ``tile_n`` = 128 (three; 192 registers).
While one converts and stores its tile, the other already runs the next tile's wgmma::

    WG 0:  [ MMA tile 0 ][ store 0 ]            [ MMA tile 2 ][ store 2 ] ...
    WG 1:               [ MMA tile 1 ][ store 1 ]             [ MMA tile 3 ] ...

Both warpgroups read the one A/B ring in order. A warpgroup skips the other's tiles by advancing
its ring position over their K tiles without waiting. The mainloops take turns through two
named barriers ("your turn"): a warpgroup starts waiting on ring entries of its next tile only
after the other has consumed every entry of the tile before. Without this hand-over a warpgroup
could wait for an entry two fills ahead of the producer, and an mbarrier's phase bit (parity)
cannot tell fill ``f`` from fill ``f - 2``: it would read the older tile's data.

The turn passes after the tile's last wgmma has *completed* (``wait_group(0)``). Passing it once the
last wgmma is *issued*, as CUTLASS does, would also be safe (every entry of the tile has been waited
for by then); on the H200 the two orders show no resolved difference (``experiments/README.md``,
pingpong_handover).

Register budget: 128 producer threads at 40 registers + 256 consumer threads at 232 registers =
64,512 of the SM's 65,536; each consumer thread keeps a tile_m x tile_n / 128 fp32 accumulator
(64 registers at 64 x 128, 128 at 64 x 256 or 128 x 128). The epilogue is the direct store of
stage 4 (no shared buffer the two warpgroups would have to share).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

__all__ = ["SplitAccumulator", "TURN_BARRIER_BASE"]

#: Named barriers 2 and 3 ("warpgroup 0's turn", "warpgroup 1's turn"); 1 is the epilogue's.
TURN_BARRIER_BASE = 2


class SplitAccumulator:
    """The mainloop hand-over between the two consumer warpgroups (``acc_slots=2``)."""

    @cute.jit
    def _wait_turn(self, slot):
        """Block warpgroup ``slot`` until the other warpgroup hands the mainloop over."""
        cute.arch.barrier(
            barrier_id=TURN_BARRIER_BASE + slot, number_of_threads=2 * self.mma_threads_per_tile
        )

    @cute.jit
    def _give_turn(self, slot):
        """Warpgroup ``slot`` has consumed its tile's ring entries: the other may start."""
        cute.arch.barrier_arrive(
            barrier_id=TURN_BARRIER_BASE + 1 - slot,
            number_of_threads=2 * self.mma_threads_per_tile,
        )

    @cute.jit
    def _skip_tile(self, states):
        """Advance every consumer ring position over a tile the other warpgroup computes: by the
        tile's entries at once (index and phase from one division by the ring depth, a constant),
        not one entry at a time, which cost a loop of ``k_tiles`` steps per skipped tile."""
        a_read, a_release, b_read, b_release = states
        a_read.advance(self.k_tiles)
        a_release.advance(self.k_tiles)
        if cutlass.const_expr(self.wide_b):
            b_read.advance(self.b_entries_per_tile)
            b_release.advance(self.b_entries_per_tile)
        return a_read, a_release, b_read, b_release
