"""Notebook 02's write-it-yourself exercise: CTA (m tile, expert) -> the rows it owns.

The learner writes ``expert_tile(mOffs, expert, m_tile, rows) -> (row0, valid)``, the index math of
stage 2's grid (``pearl_moe.kernels.scheduler.expert_rows`` plus the tile's first row and its
rows inside the expert). Two checks: the compiled kernel reads the expert's two end offsets from
global memory (SASS ``LDG``; the starter reads none), and the learner's own ``expert_tile``, run on
the CPU for every CTA of the grid (a ``@cute.jit`` function runs as host code too), stores exactly
the rows a NumPy replay of the rule gives, on valid offsets and on broken ones (negative,
decreasing, past the last row), which the clamp must keep inside ``[0, rows)``.
"""

import dataclasses

import numpy as np

from . import Check, Exercise, opcode_count_at_least, register, scratch_module

#: (rows, E end offsets): an empty expert, experts that end mid-tile, one of several m tiles;
#: then offsets a clamp must survive (negative, decreasing, past the last row).
CASES = (
    (512, [3, 3, 200, 330, 512]),
    (300, [-5, 40, 30, 700]),
)


def reference_rows(offsets, rows: int, tile_m: int, m_tiles: int) -> dict:
    """``{(expert, m_tile): (first row, end row)}`` of every CTA with rows to store, by the rule:
    expert ``e`` owns ``[clamp(offs[e-1], 0, rows), clamp(offs[e], start, rows))``."""
    out = {}
    for e, end in enumerate(offsets):
        start = 0 if e == 0 else int(np.clip(offsets[e - 1], 0, rows))
        end = int(np.clip(end, start, rows))
        for t in range(m_tiles):
            row0 = start + t * tile_m
            if row0 < end:
                out[(e, t)] = (row0, min(end, row0 + tile_m))
    return out


def run_expert_tile(fn, offsets, rows: int, m_tiles: int) -> np.ndarray:
    """``fn(mOffs, expert, m_tile, rows)`` for every (expert, m tile) of the grid, run on the CPU
    (host code compiled by the DSL): an ``(E, m_tiles, 2)`` array of ``(row0, valid)``."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack

    @cute.jit
    def every_cta(
        fn: cutlass.Constexpr, mOffs: cute.Tensor, rows: cutlass.Int32, mGot: cute.Tensor
    ):
        for e in cutlass.range_constexpr(cute.size(mGot, mode=[0])):
            for t in cutlass.range_constexpr(cute.size(mGot, mode=[1])):
                row0, valid = fn(mOffs, cutlass.Int32(e), cutlass.Int32(t), rows)
                mGot[e, t, 0] = row0
                mGot[e, t, 1] = valid

    offs = np.asarray(offsets, dtype=np.int32)
    got = np.zeros((len(offs), m_tiles, 2), dtype=np.int32)
    every_cta(fn, from_dlpack(offs), rows, from_dlpack(got))
    return got


def _span(rows) -> str:
    return "no rows" if rows is None else f"rows {rows[0]}..{rows[1] - 1}"


def _rows_match(report) -> bool:
    module = scratch_module(report)
    tile_m = int(module.BM)
    for rows, offsets in CASES:
        m_tiles = -(-rows // tile_m)
        got = run_expert_tile(module.expert_tile, offsets, rows, m_tiles)
        want = reference_rows(offsets, rows, tile_m, m_tiles)
        for e in range(len(offsets)):
            for t in range(m_tiles):
                row0, valid = (int(v) for v in got[e, t])
                mine = (row0, row0 + valid) if valid > 0 else None
                if mine != want.get((e, t)):
                    raise AssertionError(
                        f"offsets {offsets}, rows {rows}: CTA (m tile {t}, expert {e}) stores "
                        f"{_span(mine)}, the rule gives {_span(want.get((e, t)))}"
                    )
    return True


register(
    Exercise(
        key="02-expert-tile",
        notebook="02_grouped_gemm",
        task=(
            "Write expert_tile(mOffs, expert, m_tile, rows) -> (row0, valid): read the expert's "
            "[start, end) from the E end offsets on the device (0 before the first expert), clamp "
            "both into [0, rows] as scheduler.expert_rows does, and return the tile's first row "
            "start + m_tile * BM and how many of its BM rows belong to the expert."
        ),
        checks=(
            dataclasses.replace(
                opcode_count_at_least(r"^LDG", 2),
                what="the kernel reads its expert's two end offsets from global memory (2 LDG)",
            ),
            Check(
                "expert_tile, run on the CPU for every CTA, gives the rows of a NumPy replay of "
                "the rule, on valid and on broken offsets",
                _rows_match,
            ),
        ),
    )
)
