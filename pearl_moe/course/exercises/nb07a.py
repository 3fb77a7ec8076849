"""Notebook 07a's exercise: split accumulator slots on sm_100a, released apart.

The kernel is a scaffold (:mod:`pearl_moe.course.exercises.scaffolds.split_slots`): a persistent
1-CTA GEMM of 128 x 512 tiles whose accumulator fills all 512 TMEM columns as two 256-wide UMMA
atoms, with an accumulator pipeline of two slots. The notebook's cell (``exercise-07-split-slots``)
writes the two functions the lesson teaches and passes them to the scaffold's host function:
part A, ``drain_tile`` (the epilogue waits for and releases each slot on its own), and part B,
``mma_tile`` (the MMA warp acquires slot 0, runs atom 0 on held ring entries, acquires slot 1,
lets atom 1 catch up, commits each slot). The starter's two functions treat the accumulator as
one slot. The checks read the compile; each names its part, so either part can be checked alone.
Part A's are read off the PTX in program order (the drain's steps are unrolled): each slot released
after its own TMEM reads and a ``tcgen05.wait::ld``, and each step stored before the next is read,
because ``TileDrain`` holds one register buffer. Part B's order is read off the PTX too: a
``tcgen05.commit`` arrives once every earlier UMMA of its thread has finished, so a slot committed
before a loop that still writes its atom hands the epilogue half-summed columns; both slot commits
must follow the tile's last UMMA (``tests/test_exercise_wrong_answers.py`` holds answers that must
fail).
"""

from __future__ import annotations

import re

from . import Check, Exercise, register

SM100 = ("sm_100a",)
#: An mbarrier arrive that is not a TMA producer's ``expect_tx``: in the exercise's kernel, only
#: the epilogue's release of an accumulator slot (the MMA warp releases with tcgen05.commit).
RELEASE = r"\bmbarrier\.arrive(?!\.expect_tx)\b"
#: The epilogue's events, in the order the PTX lists them: a TMEM read into the one register
#: buffer of ``TileDrain``, the wait for the reads to land, a global store of that buffer, a
#: slot's release. The scaffold has no other global store and no other TMEM read.
EVENTS = {
    "ld": r"\btcgen05\.ld\.",
    "wait": r"\btcgen05\.wait::ld\b",
    "st": r"\bst\.global\b",
    "release": RELEASE,
}


def ptx_lines(report, pattern: str) -> list[int]:
    """Line numbers of the PTX lines matching the regex ``pattern``, in program order."""
    return [i for i, line in enumerate(report.ptx.splitlines()) if re.search(pattern, line)]


def epilogue_events(ptx: str) -> list[str]:
    """The kinds of :data:`EVENTS` (``"ld"``, ``"wait"``, ``"st"``, ``"release"``) of the PTX's
    lines, in program order. The drain's steps are unrolled at compile time, so one tile's
    epilogue is a straight run of them (stores under a branch for the row guard)."""
    events = []
    for line in ptx.splitlines():
        for kind, pattern in EVENTS.items():
            if re.search(pattern, line):
                events.append(kind)
                break
    return events


def each_read_stored_before_the_next(ptx: str) -> bool:
    """Every TMEM read is stored before the next read overwrites the register buffer: reads and
    stores alternate (``ld st.. ld st.. ..``), starting with a read and ending with a store.
    Reading all of a slot's steps and then storing them stores the last step's values 8 times."""
    runs = []
    for kind in epilogue_events(ptx):
        if kind in ("ld", "st") and (not runs or runs[-1] != kind or kind == "ld"):
            runs.append(kind)
    return bool(runs) and runs == ["ld", "st"] * (len(runs) // 2) and len(runs) % 2 == 0


def slots_released_after_their_reads(ptx: str, slots: int = 2) -> bool:
    """Each slot is released once, after its own TMEM reads and before the next slot's: with
    ``n`` reads per tile, release ``s`` follows exactly ``(s + 1) n / slots`` reads, and a
    ``tcgen05.wait::ld`` lies between the last of them and the release (the reads have landed
    before the MMA warp may overwrite the columns)."""
    events = epilogue_events(ptx)
    reads = events.count("ld")
    releases = [i for i, kind in enumerate(events) if kind == "release"]
    if reads == 0 or reads % slots or len(releases) != slots:
        return False
    for s, at in enumerate(releases):
        before = events[:at]
        if before.count("ld") != (s + 1) * reads // slots:
            return False
        last_read = max(i for i, kind in enumerate(before) if kind == "ld")
        if "wait" not in before[last_read:]:
            return False
    return True


def slots_committed_after_the_last_umma(ptx: str, slots: int = 2) -> bool:
    """Both slots are committed after the tile's last UMMA in program order. The MMA warp's tile is
    a straight run of its three loops; the last UMMA is in the third (both atoms), whose ring
    release follows it, then one commit per slot: at least ``1 + slots`` ``tcgen05.commit`` after
    the last ``tcgen05.mma``. A slot committed right after the hold loop (before the third loop
    writes its atom again) leaves ``slots`` there. ``tcgen05.commit`` arrives when every earlier
    UMMA of the thread has finished, so what follows the commit in program order is not covered."""
    events = []
    for line in ptx.splitlines():
        if re.search(r"\btcgen05\.mma\b", line):
            events.append("mma")
        elif re.search(r"\btcgen05\.commit\b", line):
            events.append("commit")
    if "mma" not in events:
        return False
    last = len(events) - 1 - events[::-1].index("mma")
    return events[last + 1 :].count("commit") >= 1 + slots


register(
    Exercise(
        key="07-split-slots",
        notebook="07a_split_accumulator_blackwell",
        task=(
            "Split the 512-column accumulator of a 128 x 512 tile into two 256-column slots, one "
            "per UMMA atom, each released on its own. Part A (drain_tile): the epilogue waits for "
            "slot 0, reads and stores it step by step, releases it after its last TMEM read, then "
            "does the same for slot 1. Part B (mma_tile): the MMA warp acquires slot 0, runs atom 0 alone on the first "
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
                "part A: each slot released after its own 8 TMEM reads (tcgen05.ld) and a "
                "tcgen05.wait::ld, before the next slot's reads",
                lambda r: slots_released_after_their_reads(r.ptx),
                SM100,
            ),
            Check(
                "part A: each step stored before the next step is read (one register buffer: "
                "tcgen05.ld and global stores alternate)",
                lambda r: each_read_stored_before_the_next(r.ptx),
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
            Check(
                "part B: each slot committed after the last UMMA that writes it (a commit covers "
                "only the UMMAs before it): in the PTX, the third loop's ring release and both "
                "slot commits follow the tile's last tcgen05.mma",
                lambda r: slots_committed_after_the_last_umma(r.ptx),
                SM100,
            ),
        ),
        archs=SM100,
    )
)
