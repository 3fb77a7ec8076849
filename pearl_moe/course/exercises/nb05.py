"""Notebook 05's exercise: the 16-lane TMEM load of a 64-row accumulator on sm_100a.

The starter (notebook cell ``exercise-05-sixteen-lane-load``) is the store kernel of notebook 04
for a 64 x 128 tile, with two things left for the learner: where an M = 64 MMA leaves its rows in
tensor memory (the starter assumes row r in lane r, the 128-row rule) and which ``tcgen05.ld``
reads them (the starter has ``16x256b``, what CUTLASS's ``get_tmem_load_op`` picks for M = 64).
Its store takes the widest vector the registers allow, so the load decides the store width.

The checks read the load's shape from the SASS, the lanes each warp's loads reach from the PTX
(:func:`pearl_moe.diagnostics.tmem_lanes.tmem_load_lanes`, a data-flow evaluation of the
address operand: a wrong layout sends warps 2 and 3 to lanes outside their quarter), and the
stores. sm_100a only: tensor memory exists only on Blackwell (a Hopper wgmma has 64 rows per
warpgroup already, and stage 5 there is a configuration).
"""

from __future__ import annotations

from . import Check, Exercise, register

SM100 = ("sm_100a",)
#: 256-bit stores per thread: 64 x 128 bf16 = 16 KB = 512 stores of 32 B over 128 threads.
STORES_PER_THREAD = 64 * 128 * 2 // 32 // 128


def load_lanes(report) -> list[dict]:
    """Every ``tcgen05.ld`` of the PTX with its datapaths and, per epilogue warp, its first lanes."""
    from ...diagnostics.tmem_lanes import tmem_load_lanes

    return tmem_load_lanes(report.ptx)


def _rows_only(report) -> bool:
    """Each load is a 16-lane form and warp w's start at lane 32 w: the 16 lanes of its quarter
    that hold accumulator rows, nothing else."""
    loads = load_lanes(report)
    return bool(loads) and all(
        load["datapaths"] == 16 and all(lanes == [32 * w] for w, lanes in load["lanes"].items())
        for load in loads
    )


def _stores(report) -> bool:
    fams = report.families
    return (
        fams.get("STG.E.ENL2.256", 0) == STORES_PER_THREAD
        and fams.get("STG.E.128", 0) == 0
        and fams.get("STG (other)", 0) == 0
    )


def _halves(report) -> bool:
    return bool(report.sass_lines(r"^LDTM\.16dp32bit_t0_t15")) and bool(
        report.sass_lines(r"^LDTM\.16dp32bit_t16_t31")
    )


register(
    Exercise(
        key="05-sixteen-lane-load",
        notebook="05_64_row_tiles",
        task=(
            "Read a 64-row accumulator out of tensor memory: give it the layout an M = 64 MMA "
            "leaves (16 rows in lanes 0-15 of each 32-lane quarter) and drain it with the "
            "16-lane tcgen05.ld that hands each thread a run of one row's columns, so that each "
            "thread's 16 bf16 go out in one 256-bit store. sm_100a only: tensor memory exists "
            "only on Blackwell."
        ),
        checks=(
            Check(
                "the load is tcgen05.ld.16x32bx2: LDTM.16dp32bit_t0_t15 and _t16_t31 (threads "
                "0-15 and 16-31 each take half of a subtile's columns of one row)",
                _halves,
                SM100,
            ),
            Check(
                "warp w reads lanes 32 w to 32 w + 15 only, where the MMA left its 16 rows "
                "(load addresses evaluated from the PTX)",
                _rows_only,
                SM100,
            ),
            Check(
                f"{STORES_PER_THREAD} STG.E.ENL2.256 per thread (64 x 128 bf16 = 512 stores of "
                "32 B over 128 threads), no narrower global store",
                _stores,
                SM100,
            ),
            Check(
                "no register spills (STL/LDL)",
                lambda r: r.families.get("STL/LDL (spills)", 0) == 0,
                SM100,
            ),
        ),
        archs=SM100,
    )
)
