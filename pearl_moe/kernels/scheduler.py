"""Device-side tile scheduler over (expert, m tile, n tile), shared by the sm_90a and sm_100a kernels.

The work of a grouped GEMM is a ragged list of output tiles: expert ``e`` with ``m_e`` rows has
``cdiv(m_e, tile_m) x cdiv(n, tile_n)`` tiles. Number them expert by expert (inside an expert the
m tile varies fastest). A persistent CTA ``c`` of ``C`` takes tiles ``c, c + C, c + 2C, ...``.

Finding the expert of tile ``t`` needs the running tile count of the experts before it. Because a
CTA's tile numbers only grow, it keeps ``(expert, first tile of that expert)`` as state and walks
forward; over the whole kernel every CTA reads each expert's two offsets at most once or twice
(``E`` small loads, L2 hits after the first CTA).

The scheduler reads the offsets on the device, so the host never needs them: no
device-to-host copy, and the launch can be captured in a CUDA graph.

:func:`pearl_moe.kernels.host.schedule_tiles` is the same walk in plain Python.

The scheduler is a set of functions, not an object: CuTe DSL loops may only carry run-time values
(Int32 and tensors), so the state lives in three Int32 variables. Usage inside a kernel::

    tile = block_idx_x
    expert, first = seek(mOffs, experts, tile_m, n_tiles, tile, Int32(0), Int32(0))
    while expert < experts:
        m_tile, n_tile, row0, valid = decode(mOffs, tile_m, tile, expert, first)
        ...
        tile += grid_dim_x
        expert, first = seek(mOffs, experts, tile_m, n_tiles, tile, expert, first)
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32

__all__ = ["expert_rows", "expert_tiles", "seek", "decode"]


@cute.jit
def expert_rows(offsets: cute.Tensor, expert: Int32):
    """(first row, end row) of ``expert`` from E end offsets."""
    end = offsets[expert]
    start = Int32(0)
    if expert > 0:
        start = offsets[expert - 1]
    return start, end


@cute.jit
def expert_tiles(offsets: cute.Tensor, expert: Int32, tile_m: cutlass.Constexpr, n_tiles: Int32):
    """Output tiles of ``expert``: cdiv(rows, tile_m) * n_tiles (0 for an empty expert)."""
    start, end = expert_rows(offsets, expert)
    return (end - start + (tile_m - 1)) // tile_m * n_tiles


@cute.jit
def seek(
    offsets: cute.Tensor,
    experts: cutlass.Constexpr,
    tile_m: cutlass.Constexpr,
    n_tiles: cutlass.Constexpr,
    tile: Int32,
    expert: Int32,
    first: Int32,
):
    """Walk forward until ``tile`` falls in ``expert`` (``first`` = that expert's first tile).

    Returns ``(expert, first)``; ``expert == experts`` means there is no such tile (done).
    """
    count = expert_tiles(offsets, cutlass.min(expert, experts - 1), tile_m, n_tiles)
    while expert < experts and tile >= first + count:
        first = first + count
        expert = expert + 1
        count = expert_tiles(offsets, cutlass.min(expert, experts - 1), tile_m, n_tiles)
    return expert, first


@cute.jit
def decode(
    offsets: cute.Tensor, tile_m: cutlass.Constexpr, tile: Int32, expert: Int32, first: Int32
):
    """``(m_tile, n_tile, first row, valid rows)`` of ``tile`` inside ``expert``."""
    start, end = expert_rows(offsets, expert)
    m_tiles = (end - start + (tile_m - 1)) // tile_m
    local = tile - first
    m_tile = local % m_tiles
    n_tile = local // m_tiles
    row0 = start + m_tile * tile_m
    valid = cutlass.min(end - row0, tile_m)
    return m_tile, n_tile, row0, valid
