"""Known wrong answers to the write-it-yourself exercises: each must fail its checker.

``tests/test_exercises.py`` holds every solution to its checker and every notebook starter
against it. A checker can still accept a broken answer that a learner is likely to write; each
case here is such an answer, built from the solution by swapping one function, and must be
rejected by the check that names its mistake (the others may pass). Fast tests hold the checks
that read a learner's source or PTX to snippets; the compiled cases are marked slow.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from pearl_moe.course.exercises import (
    check_exercise,
    compile_solution,
    nb01a,
    nb03a,
    nb06,
    nb07a,
    solution_source,
)

# ------------------------------------------------------------------- 07-split-slots, part A
#: Part A read-all-then-store-all: each slot's 8 steps are read into the one register buffer of
#: ``TileDrain`` and only then stored, so every store writes the last step's values. It waits
#: for and releases each slot at the right place, so the release checks pass.
LOAD_ALL_THEN_STORE = """
@cute.jit
def drain_tile(acc_pipeline, acc_state, epi):
    per_slot = epi.steps // SLOTS
    for slot in cutlass.range_constexpr(SLOTS):
        acc_pipeline.consumer_wait(acc_state)
        for j in cutlass.range_constexpr(per_slot):
            epi.load(slot * per_slot + j)
            if cutlass.const_expr(j == per_slot - 1):
                cute.arch.fence_view_async_tmem_load()
                with cute.arch.elect_one():
                    acc_pipeline.consumer_release(acc_state)
                acc_state.advance()
        for j in cutlass.range_constexpr(per_slot):
            epi.store(slot * per_slot + j)
    return acc_state
"""

#: Part A released too early: each slot is handed back after its first TMEM read, while the
#: epilogue still has 7 steps of it to read (the MMA warp may overwrite them).
RELEASE_AFTER_FIRST_READ = """
@cute.jit
def drain_tile(acc_pipeline, acc_state, epi):
    per_slot = epi.steps // SLOTS
    for slot in cutlass.range_constexpr(SLOTS):
        acc_pipeline.consumer_wait(acc_state)
        for j in cutlass.range_constexpr(per_slot):
            epi.load(slot * per_slot + j)
            if cutlass.const_expr(j == 0):
                cute.arch.fence_view_async_tmem_load()
                with cute.arch.elect_one():
                    acc_pipeline.consumer_release(acc_state)
                acc_state.advance()
            epi.store(slot * per_slot + j)
    return acc_state
"""

#: Part A waiting once: slot 0 is waited for, then both slots are read and released in turn. Slot
#: 1 is read while the MMA warp may still be writing it (its commit is a separate arrival).
WAIT_FOR_SLOT0_ONLY = """
@cute.jit
def drain_tile(acc_pipeline, acc_state, epi):
    per_slot = epi.steps // SLOTS
    acc_pipeline.consumer_wait(acc_state)
    for slot in cutlass.range_constexpr(SLOTS):
        for j in cutlass.range_constexpr(per_slot):
            epi.load(slot * per_slot + j)
            if cutlass.const_expr(j == per_slot - 1):
                cute.arch.fence_view_async_tmem_load()
                with cute.arch.elect_one():
                    acc_pipeline.consumer_release(acc_state)
                acc_state.advance()
            epi.store(slot * per_slot + j)
    return acc_state
"""

SPLIT_SLOTS_WRONG = {
    "load-all-then-store-all": (LOAD_ALL_THEN_STORE, "each step stored before the next"),
    "release-after-first-read": (RELEASE_AFTER_FIRST_READ, "each slot released after its own"),
    "wait-for-slot0-only": (WAIT_FOR_SLOT0_ONLY, "each slot waited for on its own"),
}


# ------------------------------------------------------------------- 07-split-slots, part B
#: Part B's natural slip: slot 0 committed right after the hold loop, as if atom 0 were done. The
#: third loop still adds atom 0's remaining K tiles to columns 0-255, and a tcgen05.commit covers
#: only the UMMAs issued before it, so the epilogue would drain half-summed columns. The counts
#: (16 UMMAs, 4 commits) are the solution's.
COMMIT_SLOT0_AFTER_HOLD = """
@cute.jit
def mma_tile(tiled_mma, ab_consumer, acc_pipeline, acc_state, acc, tCrA, tCrB, k_tiles, hold):
    kblocks = cute.size(tCrA, mode=[2])
    catch_up = ab_consumer.clone()
    acc_pipeline.producer_acquire(acc_state)
    slot0 = acc_state.clone()
    acc_state.advance()
    tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
    for _k in cutlass.range(hold, unroll=1):
        entry = ab_consumer.wait_and_advance()
        for kb in cutlass.range(kblocks, unroll_full=True):
            umma(tiled_mma, acc, tCrA, tCrB, 0, kb, entry.index)
            tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
    acc_pipeline.producer_commit(slot0)
    acc_pipeline.producer_acquire(acc_state)
    slot1 = acc_state.clone()
    acc_state.advance()
    tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
    for _k in cutlass.range(hold, unroll=1):
        entry = catch_up.current_handle()
        for kb in cutlass.range(kblocks, unroll_full=True):
            umma(tiled_mma, acc, tCrA, tCrB, 1, kb, entry.index)
            tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
        entry.release()
        catch_up.advance()
    for _k in cutlass.range(hold, k_tiles, unroll=1):
        entry = ab_consumer.wait_and_advance()
        for kb in cutlass.range(kblocks, unroll_full=True):
            umma(tiled_mma, acc, tCrA, tCrB, 0, kb, entry.index)
            umma(tiled_mma, acc, tCrA, tCrB, 1, kb, entry.index)
        entry.release()
    acc_pipeline.producer_commit(slot1)
    return tiled_mma, ab_consumer, acc_state
"""

#: Part B with both slots acquired before the hold loop: every count and the commits' place are
#: the solution's, so the PTX checks pass, but atom 0 now waits for the epilogue to drain both
#: slots of the previous tile, and the split buys nothing. Only the source check sees it.
ACQUIRE_BOTH_FIRST = """
@cute.jit
def mma_tile(tiled_mma, ab_consumer, acc_pipeline, acc_state, acc, tCrA, tCrB, k_tiles, hold):
    kblocks = cute.size(tCrA, mode=[2])
    catch_up = ab_consumer.clone()
    acc_pipeline.producer_acquire(acc_state)
    slot0 = acc_state.clone()
    acc_state.advance()
    acc_pipeline.producer_acquire(acc_state)
    slot1 = acc_state.clone()
    acc_state.advance()
    tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
    for _k in cutlass.range(hold, unroll=1):
        entry = ab_consumer.wait_and_advance()
        for kb in cutlass.range(kblocks, unroll_full=True):
            umma(tiled_mma, acc, tCrA, tCrB, 0, kb, entry.index)
            tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
    tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
    for _k in cutlass.range(hold, unroll=1):
        entry = catch_up.current_handle()
        for kb in cutlass.range(kblocks, unroll_full=True):
            umma(tiled_mma, acc, tCrA, tCrB, 1, kb, entry.index)
            tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
        entry.release()
        catch_up.advance()
    for _k in cutlass.range(hold, k_tiles, unroll=1):
        entry = ab_consumer.wait_and_advance()
        for kb in cutlass.range(kblocks, unroll_full=True):
            umma(tiled_mma, acc, tCrA, tCrB, 0, kb, entry.index)
            umma(tiled_mma, acc, tCrA, tCrB, 1, kb, entry.index)
        entry.release()
    acc_pipeline.producer_commit(slot0)
    acc_pipeline.producer_commit(slot1)
    return tiled_mma, ab_consumer, acc_state
"""

SPLIT_SLOTS_WRONG_MMA = {
    "commit-slot0-after-hold": (COMMIT_SLOT0_AFTER_HOLD, "each slot committed after the last UMMA"),
    "acquire-both-first": (ACQUIRE_BOTH_FIRST, "slot 1 between the hold loop and the catch-up"),
}


def with_function(source: str, name: str, replacement: str) -> str:
    """The solution module with its ``@cute.jit`` function ``name`` replaced."""
    pattern = re.compile(
        rf"@cute\.jit\ndef {name}\(.*?(?=\n# -{{10}}|\n\n@cute\.jit\ndef host)", re.S
    )
    assert len(pattern.findall(source)) == 1, f"the solution's {name} moved"
    return pattern.sub(lambda _m: replacement.strip() + "\n\n", source)


def with_drain_tile(source: str, drain_tile: str) -> str:
    """The solution module with its ``drain_tile`` (part A) replaced by ``drain_tile``."""
    pattern = re.compile(r"@cute\.jit\ndef drain_tile\(.*?(?=\n# -{10})", re.S)
    assert len(pattern.findall(source)) == 1, "the solution's drain_tile moved"
    return pattern.sub(lambda _m: drain_tile.strip() + "\n\n", source)


# PTX in the order the compiler lists it, cut to the lines the checks read
def _ptx(*kinds: str) -> str:
    line = {
        "ld": "tcgen05.ld.sync.aligned.32x32b.x32.b32 {%r1, %r2}, [%r3];",
        "wait": "tcgen05.wait::ld.sync.aligned;",
        "st": "st.global.v4.b32 [%rd10], {%r4, %r5, %r6, %r7};",
        "release": "mbarrier.arrive.shared.b64 %rd1, [%r78], %r9;",
        "tma": "mbarrier.arrive.expect_tx.shared.b64 %rd2, [%r9+16], %r2;",
        "bra": "@%p96 bra $L__BB0_82;",
    }
    return "\n".join(line[k] for k in kinds)


def _slot(release: bool = True) -> list[str]:
    steps = []
    for j in range(8):
        steps += ["ld"] + (["wait", "release"] if release and j == 7 else []) + ["bra", "st", "st"]
    return steps


def test_the_order_checks_read_the_ptx_in_program_order():
    good = _ptx("tma", *_slot(), *_slot())
    assert nb07a.each_read_stored_before_the_next(good)
    assert nb07a.slots_released_after_their_reads(good)
    # every read of a slot, then every store: one register buffer holds only the last read
    slot = ["ld"] * 8 + ["wait", "release"] + ["st"] * 8
    assert not nb07a.each_read_stored_before_the_next(_ptx(*slot, *slot))
    assert nb07a.slots_released_after_their_reads(_ptx(*slot, *slot))
    # a store before its read stores what the buffer held before
    assert not nb07a.each_read_stored_before_the_next(_ptx("st", *_slot(), *_slot(), "ld"))
    # one release for both slots (the starter), a release without the wait, an early release
    assert not nb07a.slots_released_after_their_reads(_ptx(*_slot(False), *_slot()))
    no_wait = [k for k in _slot() if k != "wait"]
    assert not nb07a.slots_released_after_their_reads(_ptx(*no_wait, *_slot()))
    early = ["ld", "wait", "release"] + ["st", "ld"] * 7 + ["st"]
    assert not nb07a.slots_released_after_their_reads(_ptx(*early, *_slot()))
    assert not nb07a.each_read_stored_before_the_next("")


def test_the_wait_check_reads_the_ptx_in_program_order():
    # the other roles' waits come first; then the epilogue waits before each slot's reads
    good = _ptx("tma") + "\nmbarrier.try_wait.parity.shared.b64 P1, [%r1], %r2, 1;\n"
    slot1 = "\nmbarrier.try_wait.parity.shared.b64 P1, [%r9], %r2, 1;\n"
    assert nb07a.slots_waited_before_their_reads(good + _ptx(*_slot()) + slot1 + _ptx(*_slot()))
    # one wait, for slot 0: slot 1 is read with no wait of its own
    assert not nb07a.slots_waited_before_their_reads(good + _ptx(*_slot(), *_slot()))
    # slot 1 waited for after its first read
    late = _slot()
    assert not nb07a.slots_waited_before_their_reads(
        good + _ptx(*_slot(), *late[:1]) + slot1 + _ptx(*late[1:])
    )
    assert not nb07a.slots_waited_before_their_reads("")


def test_the_commit_check_reads_the_mma_warps_order():
    mma = "tcgen05.mma.cta_group::1.kind::f16.collector::a::discard [%r13], %rd1, %rd2, %r22, {%r8}, %p1;"
    commit = "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r17];"
    lines = {"m": mma, "c": commit}

    def ptx(order: str) -> str:
        return "\n".join(lines[k] for k in order.replace(" ", ""))

    # hold loop, catch-up (+ ring release), both atoms (+ ring release), slot 0, slot 1
    assert nb07a.slots_committed_after_the_last_umma(ptx("mmmm mmmmc mmmmmmmmc cc"))
    # slot 0 committed after the hold loop: only the last ring release and slot 1 follow
    assert not nb07a.slots_committed_after_the_last_umma(ptx("mmmmc mmmmc mmmmmmmmc c"))
    # the starter: one loop of both atoms, its ring release, one commit
    assert not nb07a.slots_committed_after_the_last_umma(ptx("mmmmmmmmcc"))
    assert not nb07a.slots_committed_after_the_last_umma("")


def _mma_tile_of(source: str) -> str:
    """The solution module with ``mma_tile`` replaced by ``source``."""
    return with_function(solution_source("07-split-slots"), "mma_tile", source)


def test_the_slot_order_check_reads_the_source():
    solution = solution_source("07-split-slots")
    assert nb07a.slot_order_problem(nb07a.slot_order(solution)) is None
    body = ACQUIRE_BOTH_FIRST
    # both acquired before the hold loop: atom 0 waits for the whole drain
    problem = nb07a.slot_order_problem(nb07a.slot_order(_mma_tile_of(body)))
    assert problem and "slot 1 is acquired before the hold loop" in problem
    # slot 0 committed after the hold loop
    problem = nb07a.slot_order_problem(nb07a.slot_order(_mma_tile_of(COMMIT_SLOT0_AFTER_HOLD)))
    assert problem and "before the last K loop" in problem
    # committed through acc_state itself, two slots on: slot 2 is the next tile's slot 0
    through_state = solution.replace("producer_commit(slot0)", "producer_commit(acc_state)")
    problem = nb07a.slot_order_problem(nb07a.slot_order(through_state))
    assert problem and "commits slots [2, 1]" in problem
    # the clone forgotten for slot 1: slot1 is the state itself and moves on with it
    aliased = solution.replace("slot1 = acc_state.clone()", "slot1 = acc_state")
    problem = nb07a.slot_order_problem(nb07a.slot_order(aliased))
    assert problem and "commits slots [0, 2]" in problem
    # no advance after slot 0's acquire: slot 0 acquired twice
    no_advance = solution.replace(
        "    slot0 = acc_state.clone()\n    acc_state.advance()\n",
        "    slot0 = acc_state.clone()\n",
    )
    assert no_advance != solution
    problem = nb07a.slot_order_problem(nb07a.slot_order(no_advance))
    assert problem and "acquires slots [0, 0]" in problem
    # an acquire inside a K loop is refused outright
    in_loop = solution.replace(
        "        entry = catch_up.current_handle()",
        "        acc_pipeline.producer_acquire(acc_state)\n        entry = catch_up.current_handle()",
    )
    with pytest.raises(nb07a.SlotOrderError, match="inside a K loop"):
        nb07a.slot_order(in_loop)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SPLIT_SLOTS_WRONG))
def test_split_slots_rejects_a_broken_epilogue(case):
    from pearl_moe.course.scratch import compile_scratch

    drain_tile, failing = SPLIT_SLOTS_WRONG[case]
    source = with_drain_tile(solution_source("07-split-slots"), drain_tile)
    got = check_exercise("07-split-slots", compile_scratch(source, ("sm_100a",)), out=None)
    assert not got.ok, f"the checker accepts {case}:\n{got!r}"
    missed = [text for ok, text in got.lines if not ok]
    assert any(failing in text for text in missed), f"{case} failed for another reason: {missed}"
    # part B is the solution's: its checks still pass, so the verdict names part A
    assert all(ok for ok, text in got.lines if "part B" in text), repr(got)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SPLIT_SLOTS_WRONG_MMA))
def test_split_slots_rejects_a_broken_mma_warp(case):
    from pearl_moe.course.scratch import compile_scratch

    mma_tile, failing = SPLIT_SLOTS_WRONG_MMA[case]
    source = with_function(solution_source("07-split-slots"), "mma_tile", mma_tile)
    got = check_exercise("07-split-slots", compile_scratch(source, ("sm_100a",)), out=None)
    assert not got.ok, f"the checker accepts {case}:\n{got!r}"
    missed = [text for ok, text in got.lines if not ok]
    assert any(failing in text for text in missed), f"{case} failed for another reason: {missed}"
    # part A is the solution's: its checks still pass, so the verdict names part B
    assert all(ok for ok, text in got.lines if "part A" in text), repr(got)


# ------------------------------------------------------------------- 01-ring-producer
#: The producer arms full[s] from every lane of its warp: 32 arrivals on a barrier initialised for
#: one. The SASS still has an ELECT (cute.copy elects the lane that issues a TMA copy), so only
#: the source check sees it.
ARMED_BY_THE_WARP = (
    "            with cute.arch.elect_one():\n"
    "                cute.arch.mbarrier_arrive_and_expect_tx(full + s, BYTES)\n",
    "            cute.arch.mbarrier_arrive_and_expect_tx(full + s, BYTES)\n",
)


def test_the_one_lane_check_reads_the_source():
    solution = solution_source("01-ring-producer")
    assert nb01a.arm_calls_outside_one_lane(solution) == (1, [])
    old, new = ARMED_BY_THE_WARP
    assert old in solution
    calls, bare = nb01a.arm_calls_outside_one_lane(solution.replace(old, new))
    assert calls == 1 and bare == ["cute.arch.mbarrier_arrive_and_expect_tx(full + s, BYTES)"]
    # a single-lane if is as good as elect_one; an if on anything else is not
    for guard, one_lane in (
        ("if cute.arch.lane_idx() == 0:", True),
        ("if tidx % 32 == 0:", True),
        ("if tidx == 128:", True),
        ("if s == 0:", False),
        ("if tidx < 160:", False),
    ):
        source = solution.replace("with cute.arch.elect_one():", guard)
        assert bool(nb01a.arm_calls_outside_one_lane(source)[1]) != one_lane, guard
    # the else branch of a lane test runs on the other 31 lanes
    other_lanes = solution.replace(
        old,
        (
            "            if tidx % 32 == 0:\n                pass\n            else:\n"
            "                cute.arch.mbarrier_arrive_and_expect_tx(full + s, BYTES)\n"
        ),
    )
    assert nb01a.arm_calls_outside_one_lane(other_lanes)[1]


@pytest.mark.slow
def test_ring_producer_rejects_full_armed_by_the_whole_warp():
    from pearl_moe.course.scratch import compile_scratch

    old, new = ARMED_BY_THE_WARP
    source = solution_source("01-ring-producer").replace(old, new)
    got = check_exercise(
        "01-ring-producer", compile_scratch(source, ("sm_100a", "sm_90a")), out=None
    )
    assert not got.ok, f"the checker accepts full[s] armed by 32 lanes:\n{got!r}"
    missed = [text for ok, text in got.lines if not ok]
    assert len(missed) == 1 and "one lane of the producer warp arms full[s]" in missed[0], missed


def _with_source(key: str, source: str, tmp_path: Path) -> dict:
    """The solution's compiled reports of ``key`` with ``source`` beside their PTX in place of the
    solution's: the checks that read the source or run it on the CPU see ``source``, the ones
    that read the compile see the solution's (no compile: for a wrong answer whose compile the
    checks read no differently)."""
    reports = {}
    for arch, report in compile_solution(key).items():
        folder = tmp_path / arch
        folder.mkdir()
        files = {}
        for kind, path in report.files.items():
            files[kind] = str(folder / Path(path).name)
            Path(files[kind]).write_text(Path(path).read_text())
        (folder / "scratch_kernel.py").write_text(source)
        reports[arch] = replace(report, files=files)
    return reports


def _rejected(key: str, source: str, failing: str, tmp_path: Path) -> None:
    got = check_exercise(key, _with_source(key, source, tmp_path), out=None)
    assert not got.ok, f"the checker of {key} accepts it:\n{got!r}"
    missed = [text for ok, text in got.lines if not ok]
    assert missed and all(failing in text for text in missed), missed


# ------------------------------------------------------------------- 03-persistent-loop
#: seek loading the count at ``expert`` itself: the walk stops at expert == E, and both operands
#: of ``and`` run, so it reads mOffs[E], one past the offsets. The schedule is the solution's (the
#: walk ends whatever that count is), so only the source check sees it.
UNCLAMPED_COUNT = ("cutlass.min(expert, experts - 1)", "expert")


def test_the_clamp_check_reads_the_source():
    solution = solution_source("03-persistent-loop")
    assert nb03a.unclamped_offset_reads(solution) == []
    old, new = UNCLAMPED_COUNT
    assert solution.count(old) == 2
    assert (
        nb03a.unclamped_offset_reads(solution.replace(old, new))
        == ["expert_tiles(mOffs, expert, rows)"] * 2
    )
    # the clamp assigned first, or the load under `if expert < experts:`, is as good
    clamped = solution.replace(
        "    count = expert_tiles(mOffs, cutlass.min(expert, experts - 1), rows)\n    while",
        "    last = cutlass.min(expert, experts - 1)\n    count = expert_tiles(mOffs, last, rows)"
        "\n    while",
    )
    assert clamped != solution and nb03a.unclamped_offset_reads(clamped) == []
    guarded = solution.replace(
        "        count = expert_tiles(mOffs, cutlass.min(expert, experts - 1), rows)\n",
        "        if expert < experts:\n            count = expert_tiles(mOffs, expert, rows)\n",
    )
    assert guarded != solution and nb03a.unclamped_offset_reads(guarded) == []


@pytest.mark.slow
def test_persistent_loop_rejects_a_count_read_past_the_offsets(tmp_path):
    old, new = UNCLAMPED_COUNT
    source = solution_source("03-persistent-loop").replace(old, new)
    _rejected("03-persistent-loop", source, "never reads past the E offsets", tmp_path)


# ------------------------------------------------------------------- 06-two-box-b
#: The sum's loop left at BK columns: the entry holds 2 * BK, so the sum covers half of each
#: entry. The bytes armed and the boxes loaded are the solution's, so only the source check sees
#: it.
HALF_THE_ENTRY = ("cutlass.range(ENTRY_K, unroll=8)", "cutlass.range(BK, unroll=8)")


def test_the_column_check_reads_the_source():
    solution = solution_source("06-two-box-b")
    names = {"BN": 128, "BK": 64, "ENTRY_K": 128, "RING": 2}
    assert nb06.entry_columns_read(solution, names) == [("sB[tidx, c, slot]", 128)]
    old, new = HALF_THE_ENTRY
    assert old in solution
    assert nb06.entry_columns_read(solution.replace(old, new), names) == [("sB[tidx, c, slot]", 64)]
    for bound in ("2 * BK", "BK * 2"):
        got = nb06.entry_columns_read(solution.replace(old, f"cutlass.range({bound})"), names)
        assert got == [("sB[tidx, c, slot]", 128)], bound
    # the two K tiles as two loops, or a loop over them around a loop over one
    halves = solution.replace(
        "        for c in cutlass.range(ENTRY_K, unroll=8):  # both K tiles of the entry\n"
        "            acc += sB[tidx, c, slot].to(cutlass.Float32)\n",
        "        for h in cutlass.range_constexpr(2):\n"
        "            for c in cutlass.range(BK, unroll=8):\n"
        "                acc += sB[tidx, h * BK + c, slot].to(cutlass.Float32)\n",
    )
    assert halves != solution
    assert nb06.entry_columns_read(halves, names) == [("sB[tidx, h * BK + c, slot]", 128)]


@pytest.mark.slow
def test_two_box_b_rejects_a_sum_over_half_the_entry(tmp_path):
    old, new = HALF_THE_ENTRY
    source = solution_source("06-two-box-b").replace(old, new)
    _rejected("06-two-box-b", source, "the sum reads every column of an entry", tmp_path)
