"""Device-side tile scheduler over (expert, m tile, n tile), shared by the sm_90a and sm_100a kernels.

The work of a grouped GEMM is a ragged list of output tiles: expert ``e`` with ``m_e`` rows has
``cdiv(m_e, tile_m) x cdiv(n, tile_n)`` tiles. Number them expert by expert (inside an expert the
m tile varies fastest by default; ``n_group`` orders them in groups of n tiles instead, see
:meth:`TileScheduler.decode`). A persistent CTA ``c`` of ``C`` takes tiles ``c, c + C, c + 2C, ...``
(a static schedule: a CTA's tile numbers only grow, and CTAs that run side by side work on
neighbouring tiles, which share their B boxes in L2, or with ``n_group`` part of A and a few B
boxes).

Finding the expert of tile ``t`` needs the running tile count of the experts before it. Because a
CTA's tile numbers only grow, it keeps ``(expert, first tile of that expert)`` as state and walks
forward, a warp at a time: the 32 lanes of the calling warp read 32 experts' offsets at once and
a prefix sum over the lanes finds the owner (:meth:`TileScheduler.seek`). Over the whole kernel
every CTA reads each expert's two offsets about once (L2 hits after the first CTA).

The scheduler reads the offsets on the device, so the host never needs them: no
device-to-host copy, and the launch can be captured in a CUDA graph. Because nothing checks the
offsets on that path, the scheduler **clamps** them: an expert's rows are
``[clamp(start, 0, rows), clamp(end, start, rows))``. Offsets that are negative, decreasing or past
the row count then give empty or shortened experts, never a row outside ``A`` or ``out``.
(With valid offsets the clamp changes nothing.)

:func:`pearl_moe.kernels.host.schedule_tiles` is the same walk in plain Python.

The scheduler object holds only values fixed for the whole kernel (the offsets tensor, the row
count, compile-time sizes). CuTe DSL loops may carry only run-time values, so the walking state
lives in three ``Int32`` variables of the caller. Usage inside a kernel::

    sched = TileScheduler(mOffs, rows, experts, tile_m, n_tiles, step=grid_dim_x)
    tile, expert, first = sched.first_tile(block_idx_x)
    while expert < experts:
        m_tile, n_tile, row0, valid = sched.decode(tile, expert, first)
        ...
        tile, expert, first = sched.next_tile(tile, expert, first)
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass.base_dsl.typing import as_numeric
from cutlass.cutlass_dsl import extract_mlir_values, new_from_mlir_values

__all__ = ["TileScheduler", "expert_rows"]


@cute.jit
def expert_rows(offsets: cute.Tensor, expert: Int32, rows: Int32):
    """``(first row, end row)`` of ``expert`` from E end offsets, clamped into ``[0, rows]``.

    ``start = clamp(offsets[e - 1], 0, rows)`` and ``end = clamp(offsets[e], start, rows)``, so
    ``0 <= start <= end <= rows`` holds for any offsets, valid or not.
    """
    start = Int32(0)
    if expert > 0:
        start = cutlass.min(cutlass.max(offsets[expert - 1], Int32(0)), rows)
    end = cutlass.min(cutlass.max(offsets[expert], start), rows)
    return start, end


class TileScheduler:
    """The ragged tile list of one grouped GEMM, walked by persistent CTAs.

    ``offsets``: E int32 end offsets (device tensor); ``rows``: rows of A and out (run-time);
    ``experts``, ``tile_m``, ``n_tiles``: compile-time sizes; ``step``: tiles between two visits
    of one CTA (the number of persistent CTAs, or CTA pairs in 2-CTA mode); ``walk``:
    ``"warp-parallel"`` or ``"serial"`` (compile-time, ``GemmConfig.walk``); ``n_group``: the
    order of an expert's tiles (compile-time, ``GemmConfig.n_group``; :meth:`decode`).
    """

    def __init__(
        self, offsets, rows, experts: int, tile_m: int, n_tiles: int, step, walk="warp-parallel",
        n_group: int = 0,
    ):  # fmt: skip
        self.offsets = offsets
        self.rows = as_numeric(rows)
        self.step = as_numeric(step)
        self.experts = experts
        self.tile_m = tile_m
        self.n_tiles = n_tiles
        self.walk = walk
        self.n_group = n_group

    # The DSL passes values that live across `if` / `while` regions as lists of IR values: the
    # offsets tensor, the row count and the step travel; the compile-time sizes stay Python ints.
    def __extract_mlir_values__(self):
        return [
            *extract_mlir_values(self.offsets),
            *extract_mlir_values(self.rows),
            *extract_mlir_values(self.step),
        ]

    def __new_from_mlir_values__(self, values):
        n_offs = len(extract_mlir_values(self.offsets))
        n_rows = len(extract_mlir_values(self.rows))
        return TileScheduler(
            new_from_mlir_values(self.offsets, values[:n_offs]),
            new_from_mlir_values(self.rows, values[n_offs : n_offs + n_rows]),
            self.experts,
            self.tile_m,
            self.n_tiles,
            new_from_mlir_values(self.step, values[n_offs + n_rows :]),
            self.walk,
            self.n_group,
        )

    @cute.jit
    def expert_rows(self, expert: Int32):
        """``(start, end)`` rows of ``expert``, clamped (see :func:`expert_rows`)."""
        return expert_rows(self.offsets, expert, self.rows)

    @cute.jit
    def expert_tiles(self, expert: Int32):
        """Output tiles of ``expert``: cdiv(rows, tile_m) * n_tiles (0 for an empty expert)."""
        start, end = self.expert_rows(expert)
        return (end - start + (self.tile_m - 1)) // self.tile_m * self.n_tiles

    @cute.jit
    def seek(self, tile: Int32, expert: Int32, first: Int32):
        """Walk forward until ``tile`` falls in ``expert`` (``first`` = that expert's first tile).

        Returns ``(expert, first)``; ``expert == experts`` means there is no such tile (done).

        Warp-collective: every lane of the calling warp must call it with the same arguments
        (all callers are whole warps: a producer warp, an MMA warp, epilogue warps or warpgroups).
        The 32 lanes look at 32 experts at once: each loads its expert's two offsets, a prefix
        sum over the lanes (5 shuffles) gives the running tile count, and a ballot finds the
        first lane whose running count passes ``tile``. A walk over E experts costs
        ``ceil(E / 32)`` dependent loads instead of E (112 experts: 4 instead of 112 round trips
        to L2 before a CTA's first tile). With ``walk="serial"`` each lane walks the same experts
        one at a time instead (one dependent load per expert, no shuffles): cheaper when the next
        tile is nearly always in the current expert, as at prefill.
        """
        if cutlass.const_expr(self.walk == "serial"):
            expert, first = self._seek_serial(tile, expert, first)
        else:
            expert, first = self._seek_warp(tile, expert, first)
        return expert, first

    @cute.jit
    def _seek_serial(self, tile: Int32, expert: Int32, first: Int32):
        count = self.expert_tiles(cutlass.min(expert, self.experts - 1))
        while expert < self.experts and tile >= first + count:
            first = first + count
            expert = expert + 1
            count = self.expert_tiles(cutlass.min(expert, self.experts - 1))
        return expert, first

    @cute.jit
    def _seek_warp(self, tile: Int32, expert: Int32, first: Int32):
        lane = cute.arch.lane_idx()
        searching = expert < self.experts
        while searching:
            e = expert + lane
            in_range = e < self.experts
            count = Int32(0)
            if in_range:
                count = self.expert_tiles(e)
            # inclusive prefix sum of the lanes' tile counts
            running = count
            for d in cutlass.range_constexpr(5):
                below = cute.arch.shuffle_sync_up(running, offset=1 << d)
                if lane >= (1 << d):
                    running = running + below
            # lanes past the last expert "own" every tile, so the owners form a suffix
            owns = tile < first + running
            if not in_range:
                owns = True
            skipped = cute.arch.popc(~cute.arch.vote_ballot_sync(owns))
            if skipped < 32:
                first = first + cute.arch.shuffle_sync(running - count, offset=skipped)
                expert = cutlass.min(expert + skipped, Int32(self.experts))
                searching = False
            else:
                first = first + cute.arch.shuffle_sync(running, offset=31)
                expert = expert + 32
                searching = expert < self.experts
        return expert, first

    @cute.jit
    def first_tile(self, cta):
        """``(tile, expert, first)`` of the first tile CTA ``cta`` computes."""
        tile = Int32(cta)
        expert, first = self.seek(tile, Int32(0), Int32(0))
        return tile, expert, first

    @cute.jit
    def next_tile(self, tile: Int32, expert: Int32, first: Int32):
        """``(tile, expert, first)`` of the CTA's next tile, ``step`` tiles further on."""
        tile = tile + self.step
        expert, first = self.seek(tile, expert, first)
        return tile, expert, first

    @cute.jit
    def decode(self, tile: Int32, expert: Int32, first: Int32):
        """``(m_tile, n_tile, first row, valid rows)`` of ``tile`` inside ``expert``.

        ``n_group == 0``: the m tile varies fastest. ``n_group == G``: the n tiles form groups of
        ``G`` (the last one narrower if ``G`` does not divide them); inside a group the n tile
        varies fastest, and odd groups take the m tiles in reverse (a serpentine), so the rows of
        A one group ends on are the rows the next starts with. The plain-Python twin is
        :func:`pearl_moe.kernels.host.tile_in_expert`."""
        start, end = self.expert_rows(expert)
        m_tiles = (end - start + (self.tile_m - 1)) // self.tile_m
        local = tile - first
        m_tile = local % m_tiles
        n_tile = local // m_tiles
        if cutlass.const_expr(self.n_group > 0):
            per_group = m_tiles * self.n_group
            group = local // per_group
            in_group = local - group * per_group
            width = Int32(self.n_group)
            last = Int32((self.n_tiles - 1) // self.n_group)  # the last group may be narrower
            if group == last:
                width = Int32(self.n_tiles - (self.n_tiles - 1) // self.n_group * self.n_group)
            m_tile = in_group // width
            n_tile = group * self.n_group + (in_group - m_tile * width)
            if group % 2 == 1:
                m_tile = m_tiles - 1 - m_tile
        row0 = start + m_tile * self.tile_m
        valid = cutlass.min(end - row0, self.tile_m)
        return m_tile, n_tile, row0, valid
