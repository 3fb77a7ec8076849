"""Notebook 03a's write-it-yourself exercise: the persistent tile loop over a ragged tile list.

The starter (notebook cell ``exercise-03-persistent-loop``) launches one CTA per SM, with a TMA
producer warp and four consumer warps meeting at a ring of full/empty mbarriers, but each role
does only its CTA's first tile, and ``seek`` (tile -> the expert that owns it) does not walk:
every tile is taken to be expert 0's. The learner writes the walk and the loop.

The checks: ``seek`` itself, run on the CPU for every CTA of small persistent grids (a
``@cute.jit`` function runs as host code too), against a NumPy replay of the static schedule
(:func:`pearl_moe.kernels.host.schedule_tiles`), and once more with the offsets of the experts the
walk has left behind overwritten (a walk that starts over at expert 0 reads them); that every tile
count ``seek`` loads is at ``cutlass.min(expert, E - 1)``, read off the source (an unclamped load
reads ``mOffs[E]`` when the walk ends, which a run cannot see: the walk ends whatever it reads,
:func:`unclamped_offset_reads`); then what the compiler made of the kernel on both targets: the grid size read on the device (``%nctaid.x`` in
the PTX: the stride ``C``), the TMA load and every mbarrier arrive inside two nested loops
(:func:`loop_depths`, natural loops of the SASS control-flow graph: the CTA's tiles around their K
tiles, in both roles), and one CTA-wide barrier only, after the barrier init. Not the waits: an
mbarrier wait spins in a retry loop of its own, which the compiler puts inline or out of line, so
its depth says nothing about the program. Not the ring position running on from tile to tile
either: the compiled code does not show it reliably (the notebook asks about it instead).
"""

import ast
import re
from pathlib import Path

from . import Check, Exercise, register, scratch_module

#: (rows, E end offsets, persistent CTAs): ragged experts with empty ones between them and more
#: tiles than CTAs; fewer tiles than CTAs; offsets a clamp must survive (negative, decreasing,
#: past the last row).
CASES = (
    (1469, [0, 300, 300, 300, 429, 1429, 1429, 1469], 5),
    (600, [0, 0, 5, 5], 3),
    (300, [-5, 40, 30, 700], 2),
)

_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
_GUARD = re.compile(r"^@!?U?P[0-6T]\s+")
_TARGET = re.compile(r"`\(?(\.L_x_\d+)\)?")


def loop_depths(sass: str) -> list[tuple[int, str]]:
    """``(loop depth, instruction)`` for every SASS instruction of ``sass``, in program order.

    Depth: how many natural loops of the control-flow graph contain the instruction (a back edge
    ``u -> h`` where ``h`` dominates ``u``; back edges to one header count as one loop). Unlike
    counting backward branches around an address, this is not fooled by the out-of-line blocks
    the compiler puts at the end of a kernel (an mbarrier wait's retry path) that branch back into
    the middle; their own retry loop counts as one more level."""
    instrs, labels = [], {}
    for line in sass.splitlines():
        label = _LABEL.match(line)
        if label:
            labels[label.group(1)] = len(instrs)
            continue
        found = _INSTR.search(line)
        if found:
            instrs.append(" ".join(found.group(2).split()))
    if not instrs:
        return []
    # basic blocks: start at labels, after branches and exits
    starts = {0, *labels.values()}
    for i, text in enumerate(instrs):
        op = _GUARD.sub("", text)
        if op.startswith(("BRA", "EXIT", "RET", "BRX", "JMP")):
            starts.add(i + 1)
    starts = sorted(s for s in starts if s < len(instrs))
    block_of = {}
    for b, s in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) else len(instrs)
        for i in range(s, end):
            block_of[i] = b
    succ = {b: set() for b in range(len(starts))}
    for b in range(len(starts)):
        last = (starts[b + 1] if b + 1 < len(starts) else len(instrs)) - 1
        text = instrs[last]
        guarded = bool(_GUARD.match(text))
        op = _GUARD.sub("", text)
        falls = b + 1 < len(starts)
        if op.startswith("BRA"):
            target = _TARGET.search(op)
            if target and target.group(1) in labels and labels[target.group(1)] < len(instrs):
                succ[b].add(block_of[labels[target.group(1)]])
            # unconditional only when unguarded and the target is its one operand
            conditional = guarded or "," in op
            if conditional and falls:
                succ[b].add(b + 1)
        elif op.startswith(("EXIT", "RET", "BRX", "JMP")):
            if guarded and falls:
                succ[b].add(b + 1)
        elif falls:
            succ[b].add(b + 1)
    # dominators (iterative), from block 0
    blocks = list(succ)
    preds = {b: {a for a in blocks if b in succ[a]} for b in blocks}
    dom = {b: set(blocks) for b in blocks}
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for b in blocks[1:]:
            new = {b} | (set.intersection(*(dom[p] for p in preds[b])) if preds[b] else set())
            if new != dom[b]:
                dom[b], changed = new, True
    # natural loops: header h -> every block that reaches a back edge's source without passing h
    loops: dict[int, set[int]] = {}
    for u in blocks:
        for h in succ[u]:
            if h in dom[u]:
                body = loops.setdefault(h, {h})
                stack = [u]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(preds[x])
    depth = {b: sum(b in body for body in loops.values()) for b in blocks}
    return [(depth[block_of[i]], text) for i, text in enumerate(instrs)]


def min_depth(report, pattern: str) -> int | None:
    """The smallest loop depth of the SASS instructions whose opcode matches ``pattern`` (None if
    there is none)."""
    found = [d for d, text in loop_depths(report.sass) if re.search(pattern, _GUARD.sub("", text))]
    return min(found) if found else None


def _tma_in_two_loops(report) -> bool:
    depth = min_depth(report, r"^UTMALDG")
    return depth is not None and depth >= 2


def _arrives_in_two_loops(report) -> bool:
    depth = min_depth(report, r"^SYNCS\.ARRIVE")
    return depth is not None and depth >= 2


def reference_walk(offsets, rows: int, tile_m: int, ctas: int) -> list[list[tuple[int, int]]]:
    """``(expert, m tile)`` of the tiles of every CTA, in order: the static schedule of
    :func:`~pearl_moe.kernels.host.schedule_tiles` on the clamped offsets."""
    from ...kernels.host import schedule_tiles

    counts = []
    for e, end in enumerate(offsets):  # [clamp(offs[e - 1], 0, rows), clamp(offs[e], start, rows))
        start = 0 if e == 0 else min(max(offsets[e - 1], 0), rows)
        counts.append(min(max(end, start), rows) - start)
    work = schedule_tiles(counts, 1, tile_m, 1, ctas=ctas)
    return [[(e, m_tile) for e, m_tile, *_ in cta] for cta in work]


def run_walk(seek, offsets, rows: int, ctas: int, steps: int):
    """Every CTA's walk, as the kernel's loop makes it, with the learner's ``seek`` run on the CPU:
    ``(ctas, steps, 2)`` int32 of ``(expert, tile - first)`` per step; ``(-1, -1)`` once the CTA
    has passed its last tile (``seek`` is never called again after it returned ``E``)."""
    import cutlass
    import cutlass.cute as cute
    import numpy as np
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    @cute.jit
    def every_cta(seek: cutlass.Constexpr, mOffs: cute.Tensor, rows: Int32, mGot: cute.Tensor):
        experts = cute.size(mOffs)
        C = cute.size(mGot, mode=[0])
        for c in cutlass.range_constexpr(C):
            expert, first = seek(mOffs, Int32(c), Int32(0), Int32(0), rows)
            for j in cutlass.range_constexpr(cute.size(mGot, mode=[1])):
                tile = Int32(c + j * C)
                if expert < experts:
                    mGot[c, j, 0] = expert
                    mGot[c, j, 1] = tile - first
                    expert, first = seek(mOffs, tile + C, expert, first, rows)

    offs = np.asarray(offsets, dtype=np.int32)
    got = np.full((ctas, steps, 2), -1, dtype=np.int32)
    every_cta(seek, from_dlpack(offs), rows, from_dlpack(got))
    return got


def _walk_matches(report) -> bool:
    module = scratch_module(report)
    tile_m = int(module.BM)
    for rows, offsets, ctas in CASES:
        want = reference_walk(offsets, rows, tile_m, ctas)
        steps = max(len(w) for w in want) + 1
        got = run_walk(module.seek, offsets, rows, ctas, steps)
        for c in range(ctas):
            mine = [tuple(int(v) for v in step) for step in got[c] if step[0] >= 0]
            if mine != want[c]:
                raise AssertionError(
                    f"offsets {offsets}, rows {rows}, {ctas} CTAs: CTA {c} walks (expert, m tile) "
                    f"{mine}, the schedule gives {want[c]}"
                )
    return True


def forward_calls(offsets, rows: int, tile_m: int, ctas: int) -> list[tuple]:
    """The kernel's calls of ``seek`` after a CTA's first tile, each with the offsets of the
    experts the walk has left behind (all before the current expert's predecessor) overwritten
    with ``rows``: ``(offsets seen, tile, expert, first, expert expected, first expected)``. A
    walk that goes back to expert 0 reads an expert 0 that owns every row, and gets it wrong."""
    work = reference_walk(offsets, rows, tile_m, ctas)
    counts = []
    for e, end in enumerate(offsets):
        start = 0 if e == 0 else min(max(offsets[e - 1], 0), rows)
        counts.append(-(-(min(max(end, start), rows) - start) // tile_m))
    firsts = [sum(counts[:e]) for e in range(len(offsets) + 1)]
    calls = []
    for c, tiles in enumerate(work):
        for i in range(len(tiles)):
            expert = tiles[i][0]
            seen = list(offsets)
            seen[: max(expert - 1, 0)] = [rows] * max(expert - 1, 0)
            want = tiles[i + 1][0] if i + 1 < len(tiles) else len(offsets)
            tile = c + (i + 1) * ctas
            calls.append((seen, tile, expert, firsts[expert], want, firsts[want]))
    return calls


def run_calls(seek, calls, rows: int):
    """``seek(offsets seen, tile, expert, first, rows)`` for every call, on the CPU: ``(calls, 2)``
    int32 of the ``(expert, first)`` it returns."""
    import cutlass
    import cutlass.cute as cute
    import numpy as np
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    @cute.jit
    def each_call(
        seek: cutlass.Constexpr, args: cutlass.Constexpr, mSeen: cute.Tensor, rows: Int32,
        mGot: cute.Tensor,
    ):  # fmt: skip
        for i in cutlass.range_constexpr(len(args)):
            tile, expert, first = args[i]
            got_expert, got_first = seek(
                mSeen[(i, None)], Int32(tile), Int32(expert), Int32(first), rows
            )
            mGot[i, 0] = got_expert
            mGot[i, 1] = got_first

    seen = np.asarray([call[0] for call in calls], dtype=np.int32)
    got = np.full((len(calls), 2), -1, dtype=np.int32)
    args = tuple(tuple(call[1:4]) for call in calls)
    each_call(seek, args, from_dlpack(seen), rows, from_dlpack(got))
    return got


def _walks_forward(report) -> bool:
    module = scratch_module(report)
    rows, offsets, ctas = CASES[0]
    calls = forward_calls(offsets, rows, int(module.BM), ctas)
    got = run_calls(module.seek, calls, rows)
    for (_, tile, expert, first, want_e, want_f), (e, f) in zip(calls, got, strict=True):
        if want_e == len(offsets):  # past the last tile: only the expert number matters
            e, f, want_f = int(e), 0, 0
        if (int(e), int(f)) != (want_e, want_f):
            raise AssertionError(
                f"seek(tile {tile}, expert {expert}, first {first}) returns expert {int(e)}, "
                f"first tile {int(f)}; the schedule gives expert {want_e}, first tile {want_f}"
                " (the offsets of the experts before expert - 1 were overwritten: a walk that "
                "starts again at expert 0 reads them)"
            )
    return True


#: The helpers that read an expert's offsets: ``mOffs[expert - 1]`` and ``mOffs[expert]``.
OFFSET_READERS = ("expert_tiles", "expert_rows")


def _is_clamp(node) -> bool:
    """``cutlass.min(x, y - 1)`` (either order, any ``min``): an index kept below ``y``."""
    if not (isinstance(node, ast.Call) and len(node.args) == 2):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name == "min" and any(
        isinstance(a, ast.BinOp)
        and isinstance(a.op, ast.Sub)
        and isinstance(a.right, ast.Constant)
        and a.right.value == 1
        for a in node.args
    )


def unclamped_offset_reads(source: str, function: str = "seek") -> list[str]:
    """The calls of ``expert_tiles`` / ``expert_rows`` in ``function`` of ``source`` whose expert
    is not clamped below E: neither ``cutlass.min(expert, E - 1)`` (written in the call or
    assigned to a name first) nor under an ``if`` that compares the expert with ``<``. The walk
    stops at ``expert == E``, and both operands of ``and`` run, so an unclamped count reads
    ``mOffs[E]``, one past the offsets; the schedule comes out right all the same (the walk ends
    whatever the count), so a run on the CPU cannot see it and the source is read instead."""
    tree = ast.parse(source)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    if len(fns) != 1:
        raise AssertionError(f"no function {function}() in the cell")
    clamped = {
        t.id
        for n in ast.walk(fns[0])
        if isinstance(n, ast.Assign) and _is_clamp(n.value)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    bad = []

    def visit(node, guarded: bool):
        if isinstance(node, ast.If):
            lt = any(
                isinstance(c, ast.Compare) and any(isinstance(op, ast.Lt) for op in c.ops)
                for c in ast.walk(node.test)
            )
            visit(node.test, guarded)
            for child in node.body:
                visit(child, guarded or lt)
            for child in node.orelse:
                visit(child, guarded)
            return
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in OFFSET_READERS and not guarded:
                expert = node.args[1] if len(node.args) > 1 else None
                for kw in node.keywords:
                    if kw.arg == "expert":
                        expert = kw.value
                ok = expert is not None and (
                    _is_clamp(expert) or (isinstance(expert, ast.Name) and expert.id in clamped)
                )
                if not ok:
                    bad.append(ast.unparse(node))
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(fns[0], False)
    return bad


def _counts_clamped(report) -> bool:
    source = Path(report.files["ptx"]).with_name("scratch_kernel.py").read_text()
    bad = unclamped_offset_reads(source)
    if bad:
        raise AssertionError(
            f"{bad[0]}: the walk ends at expert == E, and both operands of `and` run, so this "
            "loads mOffs[E], one past the E offsets; load the count at cutlass.min(expert, E - 1)"
        )
    return True


register(
    Exercise(
        key="03-persistent-loop",
        notebook="03a_persistent_schedule",
        task=(
            "Make the kernel persistent: write seek(mOffs, tile, expert, first, rows), which walks "
            "forward from expert (whose first tile is number first) to the expert that owns tile "
            "and returns it with its first tile (E past the last tile), and put each role's work "
            "in a loop over the CTA's tiles c, c + C, c + 2C, ... (ctas, _, _ = cute.arch.grid_dim()), "
            "carrying the ring position from one tile into the next, with no CTA-wide barrier "
            "between tiles."
        ),
        checks=(
            Check(
                "seek, run on the CPU as the kernel's loop calls it, walks every CTA through the "
                "tiles of the static schedule (schedule_tiles): ragged and empty experts, fewer "
                "tiles than CTAs, broken offsets",
                _walk_matches,
            ),
            Check(
                "seek walks on from where the CTA's walk stands: called with (expert, first) of "
                "the previous tile, it never reads the offsets of the experts before",
                _walks_forward,
            ),
            Check(
                "seek never reads past the E offsets: every tile count it loads is at "
                "cutlass.min(expert, E - 1) (read from your source: a run cannot see it)",
                _counts_clamped,
            ),
            Check(
                "the kernel strides by the number of CTAs launched (it reads the grid size: "
                "%nctaid.x in the PTX)",
                lambda r: "%nctaid.x" in r.ptx,
            ),
            Check(
                "the TMA load sits in two nested loops, the CTA's tiles around their K tiles "
                "(natural loops of the SASS control flow)",
                _tma_in_two_loops,
            ),
            Check(
                "both roles walk the tiles: every mbarrier arrive (SYNCS.ARRIVE: the producer "
                "arming full[s], the consumers releasing empty[s]) sits in two nested loops",
                _arrives_in_two_loops,
            ),
            Check(
                "one CTA-wide barrier (BAR.SYNC), after the barrier init: between tiles the roles "
                "meet only at the ring's mbarriers",
                lambda r: len(r.sass_lines(r"^BAR\.SYNC")) == 1,
            ),
        ),
    )
)
