"""Notebook 07a's exercise: split accumulator slots on sm_100a, released apart.

The kernel is a scaffold (:mod:`pearl_moe.course.exercises.scaffolds.split_slots`): a persistent
1-CTA GEMM of 128 x 512 tiles whose accumulator fills all 512 TMEM columns as two 256-wide UMMA
atoms, with an accumulator pipeline of two slots. The notebook's cell (``exercise-07-split-slots``)
writes the two functions the lesson teaches and passes them to the scaffold's host function:
part A, ``drain_tile`` (the epilogue waits for and releases each slot on its own), and part B,
``mma_tile`` (the MMA warp acquires slot 0, runs atom 0 on held ring entries, acquires slot 1,
lets atom 1 catch up, commits each slot). The starter's two functions treat the accumulator as
one slot. The checks read the compile; each names its part, so either part can be checked alone.
"""

from __future__ import annotations

import re

from . import Check, Exercise, register

SM100 = ("sm_100a",)
#: An mbarrier arrive that is not a TMA producer's ``expect_tx``: in the exercise's kernel, only
#: the epilogue's release of an accumulator slot (the MMA warp releases with tcgen05.commit).
RELEASE = r"\bmbarrier\.arrive(?!\.expect_tx)\b"


def ptx_lines(report, pattern: str) -> list[int]:
    """Line numbers of the PTX lines matching the regex ``pattern``, in program order."""
    return [i for i, line in enumerate(report.ptx.splitlines()) if re.search(pattern, line)]


def _released_before_last_read(report) -> bool:
    releases, reads = ptx_lines(report, RELEASE), ptx_lines(report, r"\btcgen05\.ld\b")
    return bool(releases and reads) and releases[0] < reads[-1]


register(
    Exercise(
        key="07-split-slots",
        notebook="07a_split_accumulator_blackwell",
        task=(
            "Split the 512-column accumulator of a 128 x 512 tile into two 256-column slots, one "
            "per UMMA atom, each released on its own. Part A (drain_tile): the epilogue waits for "
            "slot 0, reads it, releases it after its last TMEM read, then does the same for slot "
            "1. Part B (mma_tile): the MMA warp acquires slot 0, runs atom 0 alone on the first "
            "ring entries and holds them, acquires slot 1, lets atom 1 catch up on the held "
            "entries, then runs both atoms and commits each slot. The rest of the kernel is a "
            "scaffold. sm_100a only: tensor memory and tcgen05 exist only on Blackwell."
        ),
        checks=(
            Check(
                "the scaffold: the accumulator fills tensor memory, 512 TMEM columns",
                lambda r: r.tmem_columns == 512,
                SM100,
            ),
            Check(
                "part A: the epilogue releases each slot, 2 mbarrier arrives per tile",
                lambda r: len(ptx_lines(r, RELEASE)) >= 2,
                SM100,
            ),
            Check(
                "part A: slot 0 is released before the last TMEM read (an arrive between the "
                "tcgen05.ld)",
                _released_before_last_read,
                SM100,
            ),
            Check(
                "part B: atom 0 alone on the held entries, atom 1 catching up, then both atoms: "
                "at least 4 + 4 + 2 x 4 = 16 UMMAs (UTC*MMA) in the SASS",
                lambda r: r.families.get("UTC*MMA (tcgen05.mma)", 0) >= 16,
                SM100,
            ),
            Check(
                "part B: the MMA warp commits each slot: at least 4 tcgen05.commit (2 ring "
                "releases, after the catch-up and after both atoms, + 1 per slot)",
                lambda r: len(ptx_lines(r, r"\btcgen05\.commit\b")) >= 4,
                SM100,
            ),
        ),
        archs=SM100,
    )
)
