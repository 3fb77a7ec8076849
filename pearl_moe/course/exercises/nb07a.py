"""Notebook 08's exercise: split accumulator slots on sm_100a, released apart."""

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
            "per UMMA atom, each with its own full/empty barrier pair: the MMA warp acquires slot "
            "0, runs atom 0 alone on the first ring entries and holds them, acquires slot 1, lets "
            "atom 1 catch up on the held entries, then runs both atoms and commits each slot; the "
            "epilogue waits for and releases each slot on its own, slot 0 before it reads slot 1. "
            "sm_100a only: tensor memory and tcgen05 exist only on Blackwell (Hopper's analog, "
            "two consumer warpgroups in ping-pong, is another mechanism)."
        ),
        checks=(
            Check(
                "the accumulator fills tensor memory: 512 TMEM columns, one buffer",
                lambda r: r.tmem_columns == 512,
                SM100,
            ),
            Check(
                "atom 0 alone on the held entries, atom 1 catching up, then both atoms: at least "
                "4 + 4 + 2 x 4 = 16 UMMAs (UTC*MMA) in the SASS",
                lambda r: r.families.get("UTC*MMA (tcgen05.mma)", 0) >= 16,
                SM100,
            ),
            Check(
                "the MMA warp commits each slot: at least 4 tcgen05.commit (2 ring releases, "
                "after the catch-up and after both atoms, + 1 per slot)",
                lambda r: len(ptx_lines(r, r"\btcgen05\.commit\b")) >= 4,
                SM100,
            ),
            Check(
                "the epilogue releases each slot: 2 mbarrier arrives per tile",
                lambda r: len(ptx_lines(r, RELEASE)) >= 2,
                SM100,
            ),
            Check(
                "slot 0 is released before the last TMEM read (a release between tcgen05.ld)",
                _released_before_last_read,
                SM100,
            ),
        ),
        archs=SM100,
    )
)
