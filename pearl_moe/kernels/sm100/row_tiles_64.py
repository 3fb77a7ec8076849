"""Stage 5's option (``tile_m=64``, 1-CTA): reading a 64-row accumulator out of TMEM.

``tcgen05.mma`` with M = 64 writes its accumulator into lanes 0-15 of each 32-lane TMEM quarter
(rows 0-15 in lanes 0-15, rows 16-31 in lanes 32-47, ...): layout ``((16, 4), n)`` with lane
strides ``(1, 32)``. Each epilogue warp may read only its own quarter, so all four warps are still
needed, each for 16 rows, and only the 16-datapath forms of ``tcgen05.ld`` apply.

Which one matters for the stores: ``16x256b`` (what ``get_tmem_load_op`` picks here) hands each
thread pairs of columns from different rows, so bf16 stores shrink to 32 bits. ``16x32bx2``
gives threads 0-15 of a warp the first half of a subtile's columns of one row each, and threads
16-31 the second half: ``epi_tile_n / 2`` contiguous columns of one row per thread, i.e. one
256-bit store at ``epi_tile_n = 32``.

The rest of the 64-row tile is configuration: the A ring entry halves (128 x 64 x 2 B = 16 KB ->
8 KB), so the ring gets deeper, and the tile scheduler counts 64-row tiles.

Compile-verified only: no B200 has ever run this code.
"""

import cutlass.cute as cute
from cutlass.cute.nvgpu import tcgen05

__all__ = ["sixteen_lane_load"]


def sixteen_lane_load(epi_tile_n: int, acc_dtype):
    """``tcgen05.ld.16x32bx2`` repeated so that a warp drains ``16 x epi_tile_n`` accumulators:
    each thread gets ``epi_tile_n / 2`` consecutive columns of one row."""
    repeat = tcgen05.Repetition(epi_tile_n // 2)
    return cute.make_copy_atom(tcgen05.Ld16x32bx2Op(repeat), acc_dtype)
