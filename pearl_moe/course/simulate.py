"""Emulate the clipped TMA stores of the grouped kernels in NumPy.

:func:`simulate_tile_stores` replays the TMA unit's bounds rule (a box element is written only if
its coordinates lie inside the descriptor's extents) for each way a kernel can describe the
output, and records which expert's tile wrote each output row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["simulate_tile_stores"]


def simulate_tile_stores(
    counts: Sequence[int], tile_m: int, scheme: str, poison: int = -1
) -> tuple[np.ndarray, np.ndarray]:
    """Which expert wrote each output row when every m tile stores a full ``tile_m``-row box.

    The TMA unit writes a box element only if its coordinates lie inside the extents of the
    descriptor it stores through. ``scheme`` is how the kernel describes the output:

    * ``"whole"``: one descriptor over all rows (what a plain GEMM uses). The box of an expert's last
      tile runs on into the next expert's rows: this is the bug the grouped kernels avoid;
    * ``"per_expert"`` (sm_100a stages 2-3): one descriptor per expert, ``rows_e`` rows starting
      at the expert's first row; the box is placed at ``m_tile * tile_m`` inside it;
    * ``"clipped_view"`` (sm_90a stages 2-3): one 3-D view ``out3[i, j, e] = out[e - tile_m + i, j]``
      with ``i < tile_m``; the box starts at ``i = tile_m - valid`` of slice ``e = row0 + valid``.

    Returns ``(owner, writes)``: per output row, the expert whose tile wrote it last (``poison``
    if none) and how many tile stores wrote it. A correct scheme writes every row exactly once, by
    its own expert.
    """
    rows = int(sum(counts))
    owner = np.full(rows, poison, dtype=np.int64)
    writes = np.zeros(rows, dtype=np.int64)
    start = 0
    for e, m_e in enumerate(counts):
        for m_tile in range(-(-int(m_e) // tile_m)):
            row0 = start + m_tile * tile_m
            valid = min(tile_m, start + m_e - row0)
            for r in range(tile_m):  # every row of the box
                if scheme == "whole":
                    coord, extent, dest = row0 + r, rows, row0 + r
                elif scheme == "per_expert":
                    coord, extent = m_tile * tile_m + r, m_e
                    dest = start + coord
                elif scheme == "clipped_view":
                    coord, extent = (tile_m - valid) + r, tile_m  # the i coordinate
                    dest = (row0 + valid) - tile_m + coord  # out3[i, :, e] = out[e - tile_m + i]
                else:
                    raise ValueError(f"unknown scheme {scheme!r}")
                if 0 <= coord < extent:  # the TMA bounds rule: outside the extents, not written
                    writes[dest] += 1
                    owner[dest] = e
        start += m_e
    return owner, writes
