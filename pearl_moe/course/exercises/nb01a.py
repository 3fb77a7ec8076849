"""Notebook 01a's write-it-yourself exercise: the TMA producer's K loop over the ring.

The starter (notebook cell ``exercise-01-ring-producer``) is a whole kernel but for the producer's
loop body: the consumers already wait on ``full[s]`` and release ``empty[s]``. Its checks read what
the compiler made of the producer: the two TMA loads of a ring entry, the ``expect_tx`` byte count
its *full* barrier is armed with, and the producer's own wait on the *empty* barrier (the starter
has only the consumers' wait). TMA and mbarriers are the same hardware on Hopper and Blackwell, so
the kernel is compiled and checked for both targets.

The one lane that arms *full* (the whole warp runs the loop, and ``full[s]`` expects one arrival)
is read off the learner's source (:func:`armed_from_one_lane`): an ``ELECT`` in the SASS proves
nothing, since ``cute.copy`` of a TMA atom elects a lane of its own, so a producer that arms
``full[s]`` from all 32 lanes compiles to one too.

The compiled code cannot show whether the producer's wait names the right parity either: a wrong
parity compiles to the same instructions with another operand. So one more check reads the
learner's source: it finds the producer's ``mbarrier_wait`` on an *empty* barrier, evaluates its
parity argument on the CPU for every K tile of a few laps (running the plain assignments of the
producer's loop, so a parity kept in a variable works too), does the same for the consumers' wait
on *full*, and replays the ring protocol with those parities (:func:`replay_ring`): each barrier
counts its completed phases, and a wait for parity ``p`` passes while the barrier's current phase
has the other parity, as on the GPU. The replay runs the producer as far ahead as it can, then the
consumers as far ahead as they can, then seeded random interleavings; it fails on a refill of an
entry the consumers have not read yet (a race on the GPU) and on a wait that can never pass (a
hang on the GPU).
"""

from __future__ import annotations

import ast
import dataclasses
import random
from pathlib import Path

from . import (
    Check,
    Exercise,
    expect_tx_includes,
    family_at_least,
    opcode_count_at_least,
    register,
    scratch_module,
)

#: One ring entry of the exercise kernel: a 128 x 64 box of A and one of B, in bf16.
ENTRY_BYTES = 2 * 128 * 64 * 2

#: K tiles the replay runs: five and a half laps of a 4-entry ring.
REPLAY_K_TILES = 22


class ParityError(AssertionError):
    """The producer's parity cannot be read or replays to a race or a hang."""


# ------------------------------------------------------------------------------ the replay
def replay_ring(producer_parity, consumer_parity, ring: int, order: str = "producer", seed=0):
    """Replay the full/empty ring over ``len(producer_parity)`` K tiles; return ``None`` if every K
    tile is filled once and read once in order, else a sentence saying what went wrong.

    ``producer_parity[kt]``: the parity the producer waits for on ``empty[kt % ring]`` before it
    fills K tile ``kt``; ``consumer_parity[kt]``: the consumers' parity on ``full[kt % ring]``.
    A barrier counts its completed phases; ``wait(p)`` passes while that count's parity is not
    ``p`` (a fresh barrier, 0 phases completed, lets a wait for parity 1 pass). The TMA lands at
    once, so a fill completes a phase of ``full[s]``; the consumers' release completes one of
    ``empty[s]``. ``order``: ``"producer"`` (the producer moves whenever it can), ``"consumer"``
    or ``"random"`` (seeded)."""
    k_tiles = len(producer_parity)
    empty_done = [0] * ring  # completed phases of empty[s]
    full_done = [0] * ring
    kp = kc = 0  # the next K tile the producer fills, the consumers read
    rng = random.Random(seed)

    def producer_can():
        return kp < k_tiles and empty_done[kp % ring] % 2 != producer_parity[kp]

    def consumer_can():
        return kc < k_tiles and full_done[kc % ring] % 2 != consumer_parity[kc]

    while kp < k_tiles or kc < k_tiles:
        can_p, can_c = producer_can(), consumer_can()
        if not (can_p or can_c):
            if kp < k_tiles:
                s = kp % ring
                return (
                    f"K tile {kp} (entry {s}, lap {kp // ring}): the producer waits on empty[{s}] "
                    f"for parity {producer_parity[kp]}, but that phase never completes: the "
                    f"consumers are waiting for data only the producer can send (a hang on the GPU)"
                )
            s = kc % ring
            return (
                f"K tile {kc}: the consumers wait on full[{s}] for parity {consumer_parity[kc]}, "
                f"which never completes (a hang on the GPU)"
            )
        if order == "producer":
            move_p = can_p
        elif order == "consumer":
            move_p = not can_c
        else:
            move_p = can_p and (not can_c or rng.random() < 0.5)
        if move_p:
            s, lap = kp % ring, kp // ring
            if empty_done[s] < lap:  # lap `lap` of entry s needs laps 0..lap-1 read and released
                return (
                    f"K tile {kp} (entry {s}, lap {lap}): the producer's wait for parity "
                    f"{producer_parity[kp]} passed before the consumers had read K tile "
                    f"{kp - ring} from entry {s}: the TMA overwrites data the consumers have not read "
                    f"(a race on the GPU)"
                )
            full_done[s] += 1
            kp += 1
        else:
            s, lap = kc % ring, kc // ring
            if full_done[s] < lap + 1:
                return f"K tile {kc}: the consumers read entry {s} before it was filled"
            empty_done[s] += 1
            kc += 1
    return None


# ------------------------------------------------------------------ reading the learner's source
def _source_of(report) -> str:
    return Path(report.files["ptx"]).with_name("scratch_kernel.py").read_text()


def _is_wait_on(node, barrier: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
        == "mbarrier_wait"
        and len(node.args) >= 2
        and any(isinstance(n, ast.Name) and n.id == barrier for n in ast.walk(node.args[0]))
    )


def _loop_around(tree, barrier: str):
    """The innermost ``for`` loop around the wait on ``barrier``, and the statements before that
    loop in the block that holds it (a variable set up before the loop)."""
    found = []

    def visit(body, before):
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.For) and any(_is_wait_on(n, barrier) for n in ast.walk(stmt)):
                inner = [s for s in stmt.body if isinstance(s, ast.For)]
                if not any(any(_is_wait_on(n, barrier) for n in ast.walk(s)) for s in inner):
                    found.append((stmt, before + body[:i]))
            for field in ("body", "orelse"):
                sub = getattr(stmt, field, None)
                if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                    visit(sub, before + body[:i])

    visit(tree.body, [])
    return found[0] if found else (None, [])


def _run(stmts, env, barrier, waits, kt):
    """Run the plain statements of one loop trip (assignments, ``if`` on values it can evaluate,
    ``with`` blocks) and record the parity of each wait on ``barrier``."""
    for stmt in stmts:
        if isinstance(stmt, ast.Expr) and _is_wait_on(stmt.value, barrier):
            value = eval(compile(ast.Expression(stmt.value.args[1]), "<parity>", "eval"), env)
            waits.append((kt, int(value)))
        elif isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if all(isinstance(t, ast.Name) for t in targets) and stmt.value is not None:
                if isinstance(stmt, ast.AugAssign):
                    expr = ast.BinOp(ast.Name(stmt.target.id, ast.Load()), stmt.op, stmt.value)
                    value = eval(
                        compile(ast.fix_missing_locations(ast.Expression(expr)), "<a>", "eval"), env
                    )
                else:
                    value = eval(compile(ast.Expression(stmt.value), "<a>", "eval"), env)
                for t in targets:
                    env[t.id] = value
        elif isinstance(stmt, ast.If):
            try:
                taken = bool(eval(compile(ast.Expression(stmt.test), "<if>", "eval"), env))
            except Exception:  # a run-time test the CPU cannot evaluate
                taken = None
            if taken is None:
                if any(_is_wait_on(n, barrier) for n in ast.walk(stmt)):
                    raise ParityError("the wait sits under an `if` the replay cannot evaluate")
                continue
            _run(stmt.body if taken else stmt.orelse, env, barrier, waits, kt)
        elif isinstance(stmt, ast.With):
            _run(stmt.body, env, barrier, waits, kt)


def wait_parities(source: str, module, barrier: str, k_tiles: int) -> list[int]:
    """The parity of the wait on ``barrier`` (``"empty"`` or ``"full"``) for K tiles
    ``0 .. k_tiles - 1``, evaluated on the CPU from the kernel's source."""
    tree = ast.parse(source)
    loop, before = _loop_around(tree, barrier)
    if loop is None or not isinstance(loop.target, ast.Name):
        raise ParityError(
            f"no `cute.arch.mbarrier_wait({barrier} + s, parity)` inside a `for kt in ...` loop"
        )
    env = dict(vars(module))
    for stmt in before:  # a phase variable set up before the loop, say
        try:
            _run([stmt], env, barrier, [], None)
        except Exception:  # run-time values (thread index, ...) stay unknown
            continue
    waits: list[tuple[int, int]] = []
    for kt in range(k_tiles):
        env[loop.target.id] = kt
        try:
            _run(loop.body, env, barrier, waits, kt)
        except ParityError:
            raise
        except Exception as exc:
            raise ParityError(
                f"cannot evaluate the parity of the wait on {barrier}[s] on the CPU "
                f"({type(exc).__name__}: {exc}); write it from kt and RING"
            ) from None
    per_tile = {}
    for kt, parity in waits:
        per_tile.setdefault(kt, parity)
    if sorted(per_tile) != list(range(k_tiles)):
        raise ParityError(f"the wait on {barrier}[s] does not run once per K tile")
    bad = {p for p in per_tile.values() if p not in (0, 1)}
    if bad:
        raise ParityError(f"a parity is 0 or 1; the wait on {barrier}[s] names {sorted(bad)}")
    return [per_tile[kt] for kt in range(k_tiles)]


#: Calls whose value is a thread's index: a name bound from one (``tidx, _, _ =
#: cute.arch.thread_idx()``, ``lane = cute.arch.lane_idx()``) or from an expression of such a name
#: (``lane = tidx % 32``) names a lane.
LANE_SOURCES = ("thread_idx", "lane_idx")


def _callee(node) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return None


def _lane_names(tree) -> set[str]:
    names: set[str] = set()

    def mentions_lane(expr) -> bool:
        return any(
            _callee(n) in LANE_SOURCES or (isinstance(n, ast.Name) and n.id in names)
            for n in ast.walk(expr)
        )

    for _ in range(3):  # a name derived from a name derived from thread_idx()
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and mentions_lane(node.value):
                for target in node.targets:
                    names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _one_lane_guard(stmt, lanes: set[str]) -> bool:
    """``with cute.arch.elect_one():``, or an ``if`` that lets one lane through: an ``==`` test
    of a thread or lane index (``if cute.arch.lane_idx() == 0:``, ``if tidx % 32 == 0:``)."""
    if isinstance(stmt, ast.With):
        return any(_callee(item.context_expr) == "elect_one" for item in stmt.items)
    if isinstance(stmt, ast.If):
        test = stmt.test
        return (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)
            and any(
                _callee(n) in LANE_SOURCES or (isinstance(n, ast.Name) and n.id in lanes)
                for n in ast.walk(test)
            )
        )
    return False


def arm_calls_outside_one_lane(source: str) -> tuple[int, list[str]]:
    """How many ``mbarrier_arrive_and_expect_tx`` calls ``source`` has, and the text of each that
    no single-lane guard (:func:`_one_lane_guard`) encloses: run by the whole warp, it arrives 32
    times on a barrier initialised for one arrival."""
    tree = ast.parse(source)
    lanes = _lane_names(tree)
    calls, bare = 0, []

    def visit(node, guarded: bool):
        nonlocal calls
        if _callee(node) == "mbarrier_arrive_and_expect_tx":
            calls += 1
            if not guarded:
                bare.append(ast.unparse(node))
        inner = guarded or (isinstance(node, ast.With | ast.If) and _one_lane_guard(node, lanes))
        for field, value in ast.iter_fields(node):
            # an if's else branch runs on the other lanes: it is not guarded by the test
            sub_guarded = inner if not (isinstance(node, ast.If) and field == "orelse") else guarded
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    visit(child, sub_guarded)

    visit(tree, False)
    return calls, bare


def armed_from_one_lane(report) -> bool:
    calls, bare = arm_calls_outside_one_lane(_source_of(report))
    if not calls:
        raise AssertionError(
            "no cute.arch.mbarrier_arrive_and_expect_tx(full + s, ...) in the cell"
        )
    if bare:
        raise AssertionError(
            f"{bare[0]} runs on all 32 lanes of the producer warp, 32 arrivals on a full[s] "
            "initialised for one; put it under "
            "`with cute.arch.elect_one():`"
        )
    return True


def _parity_replays(report) -> bool:
    module = scratch_module(report)
    source = _source_of(report)
    ring = int(module.RING)
    producer = wait_parities(source, module, "empty", REPLAY_K_TILES)
    consumer = wait_parities(source, module, "full", REPLAY_K_TILES)
    orders = [("producer", 0), ("consumer", 0)] + [("random", seed) for seed in range(8)]
    for order, seed in orders:
        problem = replay_ring(producer, consumer, ring, order, seed)
        if problem:
            raise ParityError(problem)
    return True


register(
    Exercise(
        key="01-ring-producer",
        notebook="01a_stage1_kernel",
        task=(
            "Write the TMA producer's K loop: for K tile kt, wait until the consumers have "
            "released ring entry kt % RING (its empty barrier, with the parity of the producer's "
            "lap), arm the entry's full barrier from one lane with the bytes of one A box and "
            "one B box (expect_tx), then TMA-load both boxes into the entry on that barrier."
        ),
        checks=(
            dataclasses.replace(
                family_at_least("UTMALDG (TMA load)", 2),
                what="one TMA load of A and one of B per K tile (2 UTMALDG)",
            ),
            dataclasses.replace(
                expect_tx_includes(ENTRY_BYTES),
                what=f"full[s] armed with one entry's bytes, A box + B box (expect_tx {ENTRY_BYTES})",
            ),
            Check(
                "one lane of the producer warp arms full[s]: mbarrier_arrive_and_expect_tx under "
                "`with cute.arch.elect_one():` (read from your source; cute.copy elects a lane "
                "of its own, so an ELECT in the SASS does not show it)",
                armed_from_one_lane,
                ("sm_90a",),
            ),
            dataclasses.replace(
                opcode_count_at_least(r"^SYNCS\.PHASECHK\..*TRYWAIT", 2),
                what=(
                    "the producer waits on empty[s] as the consumers wait on full[s] "
                    "(2 mbarrier waits, SYNCS.PHASECHK...TRYWAIT)"
                ),
            ),
            Check(
                f"the producer's parity on empty[s], replayed with the consumers' over "
                f"{REPLAY_K_TILES} K tiles: no refill of an unread entry, no wait that never ends",
                _parity_replays,
                ("sm_90a",),
            ),
        ),
    )
)
