"""The device tile scheduler itself, run on the CPU: CuTe DSL executes a host-side ``@cute.jit``
function on CPU tensors, so ``TileScheduler``'s walk and ``decode`` (the code the kernels inline)
are checked against their plain-Python twin, ``host.tile_in_expert``, without a GPU."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
cutlass = pytest.importorskip("cutlass")

import cutlass.cute as cute  # noqa: E402
from cutlass import Int32  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

from pearl_moe.kernels.host import tile_in_expert  # noqa: E402
from pearl_moe.kernels.scheduler import TileScheduler  # noqa: E402

#: ragged experts: empty ones, one row, exact and one-past multiples of the tile, a long one
COUNTS = [0, 1, 64, 65, 128, 129, 300, 0, 1000, 17]
TILE_M = 64


def _walk(n_tiles: int, n_group: int, walk: str):
    @cute.jit
    def run(offs: cute.Tensor, out: cute.Tensor, rows: Int32, experts: cutlass.Constexpr):
        sched = TileScheduler(offs, rows, experts, TILE_M, n_tiles, Int32(1), walk, n_group)
        tile, expert, first = sched.first_tile(Int32(0))
        while expert < experts:
            m_tile, n_tile, row0, valid = sched.decode(tile, expert, first)
            out[tile, 0] = expert
            out[tile, 1] = m_tile
            out[tile, 2] = n_tile
            out[tile, 3] = row0
            out[tile, 4] = valid
            tile, expert, first = sched.next_tile(tile, expert, first)

    return run


@pytest.mark.parametrize("n_tiles, n_group", list(itertools.product((3, 8, 17), (0, 2, 8))))
def test_the_device_scheduler_visits_the_tiles_in_the_twins_order(n_tiles, n_group):
    """One CTA walks every tile: (expert, m tile, n tile, first row, valid rows) in the order of
    ``tile_in_expert`` (m fastest, or groups of ``n_group`` n tiles with a narrower last group and
    odd groups walking m backwards). The serial walk: the warp-parallel one's shuffles and votes
    need a GPU warp (both find the same expert, which the GPU tests check)."""
    walk = "serial"
    offs = torch.tensor(list(itertools.accumulate(COUNTS)), dtype=torch.int32)
    total = sum(-(-c // TILE_M) * n_tiles for c in COUNTS)
    out = torch.full((total, 5), -1, dtype=torch.int32)
    _walk(n_tiles, n_group, walk)(from_dlpack(offs), from_dlpack(out), int(offs[-1]), len(COUNTS))
    want, start = [], 0
    for e, rows in enumerate(COUNTS):
        m_tiles = -(-rows // TILE_M)
        for t in range(m_tiles * n_tiles):
            m, n = tile_in_expert(t, m_tiles, n_tiles, n_group)
            row0 = start + m * TILE_M
            want.append((e, m, n, row0, min(TILE_M, start + rows - row0)))
        start += rows
    assert [tuple(row) for row in out.tolist()] == want
