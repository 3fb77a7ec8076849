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
must follow the tile's last UMMA. What the PTX cannot show, which slot each acquire and commit
names, is read off the learner's source (:func:`slot_order`): the MMA warp's three K loops are
given, and the part B the learner writes is one acquire of each slot, slot 0 before the hold loop
and slot 1 after it, and each slot's commit after the last loop, through a copy of its state
(``tests/test_exercise_wrong_answers.py`` holds answers that must fail).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from . import Check, Exercise, register

SM100 = ("sm_100a",)
#: An mbarrier arrive that is not a TMA producer's ``expect_tx``: in the exercise's kernel, only
#: the epilogue's release of an accumulator slot (the MMA warp releases with tcgen05.commit).
RELEASE = r"\bmbarrier\.arrive(?!\.expect_tx)\b"
#: The epilogue's events, in the order the PTX lists them: a TMEM read into the one register
#: buffer of ``TileDrain``, the wait for the reads to land, a global store of that buffer, a
#: slot's release, an mbarrier wait (the epilogue's ``consumer_wait`` for a slot, inline in the
#: PTX; the other roles' waits come before the epilogue's code). The scaffold has no other global
#: store and no other TMEM read.
EVENTS = {
    "ld": r"\btcgen05\.ld\.",
    "wait": r"\btcgen05\.wait::ld\b",
    "st": r"\bst\.global\b",
    "release": RELEASE,
    "acquire": r"\bmbarrier\.try_wait\b",
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


def slots_waited_before_their_reads(ptx: str, slots: int = 2) -> bool:
    """Each slot is waited for on its own: with ``n`` reads per tile, an mbarrier wait
    (``consumer_wait``) lies between the last TMEM read of slot ``s - 1`` and the first of slot
    ``s`` (for slot 0, anywhere before its first read). A drain that waits for slot 0 only and
    then reads both slots reads slot 1 while the MMA warp may still be writing it."""
    events = epilogue_events(ptx)
    reads = [i for i, kind in enumerate(events) if kind == "ld"]
    if not reads or len(reads) % slots:
        return False
    per_slot = len(reads) // slots
    for s in range(slots):
        start = reads[s * per_slot - 1] if s else -1
        if "acquire" not in events[start + 1 : reads[s * per_slot]]:
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


# ------------------------------------------------------------------ part B, from the source
class SlotOrderError(AssertionError):
    """The MMA warp's acquires and commits of the two slots are out of place."""


class _State:
    """A pipeline state of the accumulator, counted in slots from the tile's first."""

    def __init__(self, slot: int = 0):
        self.slot = slot


def _first_line(stmt) -> str:
    return ast.unparse(stmt).splitlines()[0]


def _call_name(node) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def slot_order(source: str, function: str = "mma_tile") -> list[tuple[str, int | None]]:
    """The MMA warp's tile as it touches the accumulator pipeline, in program order:
    ``("acquire", s)``, ``("commit", s)`` (``s``: the slot, counted from the tile's first) and
    ``("loop", None)`` for each K loop, read off ``function``'s body in ``source``. The state it
    gets (its fourth argument) is slot 0; ``x = state.clone()`` copies a state, ``y = x`` names
    the same one, ``state.advance()`` moves it on a slot. Raises :class:`SlotOrderError` where a
    slot is acquired or committed inside a K loop or under an ``if``, or through a name that is not
    a state, and returns with ``("return", s)``: the slot of the state the tile hands back."""
    tree = ast.parse(source)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    if len(fns) != 1:
        raise SlotOrderError(f"no function {function}() in the cell")
    fn = fns[0]
    params = [a.arg for a in fn.args.args]
    if len(params) < 4:
        raise SlotOrderError(f"{function}() lost its arguments")
    states = {params[3]: _State()}
    pipe_calls = ("producer_acquire", "producer_commit")

    def touches(node) -> bool:
        for n in ast.walk(node):
            name = _call_name(n)
            if name in pipe_calls:
                return True
            if name in ("advance", "clone") and isinstance(n.func.value, ast.Name):
                if n.func.value.id in states:
                    return True
        return False

    def state_of(expr) -> _State:
        if isinstance(expr, ast.Name) and expr.id in states:
            return states[expr.id]
        if _call_name(expr) == "clone" and isinstance(expr.func.value, ast.Name):
            if expr.func.value.id in states:
                return _State(states[expr.func.value.id].slot)
        raise SlotOrderError(
            f"{ast.unparse(expr)} is not an accumulator state (acc_state or "
            "a copy of it, acc_state.clone())"
        )

    events: list[tuple[str, int | None]] = []

    def run(body):
        for stmt in body:
            if isinstance(stmt, ast.For | ast.While):
                if touches(stmt):
                    raise SlotOrderError(
                        f"{_first_line(stmt)}: a slot is acquired, committed or advanced inside "
                        "a K loop: each slot is acquired and committed once per tile, between the "
                        "loops"
                    )
                events.append(("loop", None))
            elif isinstance(stmt, ast.With):
                run(stmt.body)
            elif isinstance(stmt, ast.Return):
                value = stmt.value
                if isinstance(value, ast.Tuple) and len(value.elts) == 3:
                    events.append(("return", state_of(value.elts[2]).slot))
                return
            elif isinstance(stmt, ast.Expr) and _call_name(stmt.value) in pipe_calls:
                call = stmt.value
                if len(call.args) != 1:
                    raise SlotOrderError(f"{_first_line(stmt)}: {call.func.attr} takes one state")
                kind = "acquire" if call.func.attr == "producer_acquire" else "commit"
                events.append((kind, state_of(call.args[0]).slot))
            elif isinstance(stmt, ast.Expr) and _call_name(stmt.value) == "advance":
                state_of(stmt.value.func.value).slot += 1
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                is_state = isinstance(stmt.value, ast.Name) and stmt.value.id in states
                if _call_name(stmt.value) == "clone" and isinstance(
                    stmt.value.func.value, ast.Name
                ):
                    is_state = is_state or stmt.value.func.value.id in states
                if is_state and isinstance(target, ast.Name):
                    states[target.id] = state_of(stmt.value)
                elif touches(stmt):
                    raise SlotOrderError(
                        f"{_first_line(stmt)}: write an acquire, a commit or an advance as a "
                        "statement of its own"
                    )
            elif touches(stmt):
                raise SlotOrderError(
                    f"{_first_line(stmt)}: an acquire, a commit or an advance under "
                    f"{type(stmt).__name__.lower()}: write it as a statement of the tile's body"
                )

    run(fn.body)
    return events


def slot_order_problem(events: list[tuple[str, int | None]]) -> str | None:
    """``None`` if ``events`` (from :func:`slot_order`) are the split accumulator's: slot 0
    acquired before the first K loop (the hold loop), slot 1 after it and before the second (the
    catch-up), each slot acquired once and committed once after the last K loop, and the state
    handed back two slots on. Else a sentence saying what is out of place."""
    loops = [i for i, (kind, _) in enumerate(events) if kind == "loop"]
    if len(loops) != 3:
        n = len(loops)
        return f"the tile has {n} K loop(s): keep the given three (hold, catch-up, both atoms)"
    acquires = [(i, s) for i, (kind, s) in enumerate(events) if kind == "acquire"]
    commits = [(i, s) for i, (kind, s) in enumerate(events) if kind == "commit"]
    if [s for _, s in acquires] != [0, 1]:
        return (
            f"the tile acquires slots {[s for _, s in acquires]}: it acquires slot 0, then "
            "(after an advance) slot 1, once each"
        )
    (at0, _), (at1, _) = acquires
    if at0 > loops[0]:
        return (
            "slot 0 is acquired after the hold loop: atom 0 writes it there, so acquire it before"
        )
    if not loops[0] < at1 < loops[1]:
        if at1 < loops[0]:
            return (
                "slot 1 is acquired before the hold loop: atom 0 then waits for the whole drain "
                "and the split buys nothing; acquire it between the hold loop and the catch-up"
            )
        return (
            "slot 1 is acquired after the catch-up loop, which writes it: acquire it between "
            "the hold loop and the catch-up"
        )
    if sorted(s for _, s in commits) != [0, 1]:
        return (
            f"the tile commits slots {[s for _, s in commits]}: commit slot 0 and slot 1 once "
            "each, through the copy of each slot's state taken when it was acquired"
        )
    if any(i < loops[2] for i, _ in commits):
        return (
            "a slot is committed before the last K loop, which still writes both atoms: a "
            "tcgen05.commit covers only the UMMAs issued before it"
        )
    back = [s for kind, s in events if kind == "return"]
    if back != [2]:
        return (
            f"the tile hands back a state {back[0] if back else '?'} slot(s) on: the next tile "
            "starts two slots on (one advance after each acquire)"
        )
    return None


def _slots_in_order(report) -> bool:
    source = Path(report.files["ptx"]).with_name("scratch_kernel.py").read_text()
    problem = slot_order_problem(slot_order(source))
    if problem:
        raise SlotOrderError(problem)
    return True


register(
    Exercise(
        key="07-split-slots",
        notebook="07a_split_accumulator_blackwell",
        task=(
            "Split the 512-column accumulator of a 128 x 512 tile into two 256-column slots, one "
            "per UMMA atom, each released on its own. Part A (drain_tile): the epilogue waits for "
            "slot 0, reads and stores it step by step, releases it after its last TMEM read, then "
            "does the same for slot 1. Part B (mma_tile, whose three K loops are given): the MMA "
            "warp acquires slot 0 before the hold loop, slot 1 between the hold loop and the "
            "catch-up, and commits each slot, through a copy of its state, after the last loop. "
            "The rest of the kernel is a scaffold. sm_100a only: tensor memory and tcgen05 "
            "exist only on Blackwell."
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
                "part A: each slot waited for on its own (consumer_wait) before its first TMEM "
                "read: an mbarrier wait between slot 0's last tcgen05.ld and slot 1's first",
                lambda r: slots_waited_before_their_reads(r.ptx),
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
            Check(
                "part B, read from your source: slot 0 acquired before the hold loop, slot 1 "
                "between the hold loop and the catch-up, each committed once after the last loop "
                "through its own state, the state handed back two slots on",
                _slots_in_order,
                SM100,
            ),
        ),
        archs=SM100,
    )
)
