"""TMEM lanes each epilogue warp's ``tcgen05.ld`` reaches, computed from the compiled PTX.

A warp may read only its own 32-lane quarter of tensor memory (lanes ``32 * (warp % 4)`` to
``+ 31``). The address operand of ``tcgen05.ld`` holds the lane in bits 16 and up and the column in
bits 0-15, and is computed from the thread index, the TMEM base address (read from shared memory,
lane 0) and loop counters. This module evaluates that computation for lane 0 of each epilogue warp:
a small data-flow analysis over the PTX (basic blocks, reaching definitions, and value sets per
definition iterated to a fixpoint), so that loop counters and pipeline indices take every value
they can take. A register stepped in a loop (``add r, r, x``) takes at most ``trip`` values; a
``selp`` whose predicate compares one of its own operands with a constant (the wrap of a pipeline
index) is evaluated value by value. Anything else it cannot evaluate (values loaded from global
memory, kernel parameters) is "unknown", and a load whose lane depends on it is reported.

Why: with 64 rows per CTA in 2-CTA mode a plain epilogue tile compiled to the address
``base + ((warp & 1) << 21) + ((subtile / 2) << 22)``: warps 0 and 2 (and 1 and 3) read the same
lanes, half of them in another warp's quarter. Nothing in the SASS counts shows it, and no B200
is at hand to run it. ``tests/test_compile_sm100.py`` runs
:func:`lanes_outside_quarter` on every compiled sm_100a configuration. Pure Python, no GPU and
no ``cutlass`` import::

    problems = lanes_outside_quarter(tmem_load_lanes(report.ptx))
"""

from __future__ import annotations

import re

__all__ = ["functions", "lanes_outside_quarter", "tmem_load_lanes"]

TOP = None  # an unknown value
CAP = 4096  # value sets larger than this become unknown
MASK32 = (1 << 32) - 1

_LABEL = re.compile(r"^\s*([$\w]+):\s*$")
_INSTR = re.compile(r"^\s*(@!?%?\w+\s+)?([a-z][\w.:]*)\s*([^;]*);")
_REG = re.compile(r"^%[a-z]+\d+$")
_LD = re.compile(r"tcgen05\.ld\.sync\.aligned\.(\d+)x(\d+)b(?:x2)?\.")


def _imm(text: str):
    text = text.strip()
    try:
        return int(text, 16) if text.lower().lstrip("-").startswith("0x") else int(text)
    except ValueError:
        return None


def _s32(v: int) -> int:
    v &= MASK32
    return v - (1 << 32) if v >> 31 else v


def _operands(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "{[" and 1 or 0
        depth -= ch in "}]" and 1 or 0
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


class Function:
    """One ``.entry``/``.func`` body: instructions, basic blocks and reaching definitions."""

    def __init__(self, lines: list[str]):
        self.instrs: list[tuple[str, list[str], str | None]] = []  # (opcode, operands, guard)
        labels: dict = {}  # (label, scope) -> index of the instruction that follows it
        scopes, next_scope = [0], 1  # brace scopes: inline-asm blocks reuse label names
        pending_branch: list = []  # (instruction, label, enclosing scopes)
        for line in lines:
            line = line.split("//")[0]
            if "{" in line and not _INSTR.match(line):
                scopes.append(next_scope)
                next_scope += 1
            if _LABEL.match(line):
                labels[(_LABEL.match(line).group(1), scopes[-1])] = len(self.instrs)
            m = _INSTR.match(line)
            if m:
                op, ops = m.group(2), _operands(m.group(3))
                if op.startswith("bra"):
                    pending_branch.append((len(self.instrs), ops[0], tuple(scopes)))
                guard = m.group(1).strip() if m.group(1) else None
                self.instrs.append((op, ops, guard))
            if "}" in line and not _INSTR.match(line) and len(scopes) > 1:
                scopes.pop()
        self.targets: dict[int, int] = {}
        for i, label, chain in pending_branch:
            for sc in reversed(chain):
                if (label, sc) in labels:
                    self.targets[i] = labels[(label, sc)]
                    break
        self._blocks(set(labels.values()))
        self._reaching()

    def _blocks(self, leaders: set[int]):
        n = len(self.instrs)
        starts = {0} | {i for i in leaders if i < n}
        for i, (op, _ops, _g) in enumerate(self.instrs):
            if op.startswith(("bra", "ret", "exit")) and i + 1 < n:
                starts.add(i + 1)
        self.starts = sorted(starts)
        self.block_of = {}
        for b, s in enumerate(self.starts):
            end = self.starts[b + 1] if b + 1 < len(self.starts) else n
            for i in range(s, end):
                self.block_of[i] = b
        self.succ: dict[int, list[int]] = {b: [] for b in range(len(self.starts))}
        for b in range(len(self.starts)):
            end = (self.starts[b + 1] if b + 1 < len(self.starts) else n) - 1
            op, _ops, guard = self.instrs[end]
            falls = not (op.startswith(("ret", "exit")) or (op.startswith("bra") and not guard))
            if op.startswith("bra") and end in self.targets:
                self.succ[b].append(self.block_of.get(self.targets[end], b))
            if falls and b + 1 < len(self.starts):
                self.succ[b].append(b + 1)

    def _defines(self, i: int) -> str | None:
        op, ops, _g = self.instrs[i]
        if ops and _REG.match(ops[0]) and not op.startswith(("st.", "bra", "tcgen05.", "bar")):
            return ops[0]
        return None

    def _reaching(self):
        """``self.reach_in[b]``: register -> definitions (instruction indices) reaching block b."""
        nb = len(self.starts)
        n = len(self.instrs)
        gen: list[dict[str, int]] = []
        for b in range(nb):
            end = self.starts[b + 1] if b + 1 < nb else n
            g = {}
            for i in range(self.starts[b], end):
                reg = self._defines(i)
                if reg:
                    g[reg] = i
            gen.append(g)
        pred: dict[int, list[int]] = {b: [] for b in range(nb)}
        for b, ss in self.succ.items():
            for s in ss:
                pred[s].append(b)
        reach_in: list[dict[str, frozenset]] = [{} for _ in range(nb)]
        reach_out: list[dict[str, frozenset]] = [dict() for _ in range(nb)]
        changed = True
        while changed:
            changed = False
            for b in range(nb):
                merged: dict[str, set] = {}
                for p in pred[b]:
                    for reg, defs in reach_out[p].items():
                        merged.setdefault(reg, set()).update(defs)
                new_in = {r: frozenset(d) for r, d in merged.items()}
                out = dict(new_in)
                for reg, i in gen[b].items():
                    out[reg] = frozenset([i])
                if out != reach_out[b] or new_in != reach_in[b]:
                    reach_in[b], reach_out[b] = new_in, out
                    changed = True
        self.reach_in = reach_in

    def reaching(self, i: int, reg: str) -> frozenset:
        """Definitions of ``reg`` that reach instruction ``i``."""
        b = self.block_of[i]
        for j in range(i - 1, self.starts[b] - 1, -1):
            if self._defines(j) == reg:
                return frozenset([j])
        return self.reach_in[b].get(reg, frozenset())


class Values:
    """Value sets of the definitions a register operand depends on, for one thread."""

    def __init__(self, fn: Function, tid: int, trip: int):
        self.fn, self.tid, self.trip = fn, tid, trip
        self.val: dict[int, frozenset | None] = {}

    def operand(self, i: int, text: str, skip: int | None = None):
        imm = _imm(text)
        if imm is not None:
            return frozenset([imm])
        if text == "%tid.x":
            return frozenset([self.tid])
        if not _REG.match(text):
            return TOP
        out: set = set()
        for d in self.fn.reaching(i, text):
            if d == skip:
                continue
            v = self.val.get(d, frozenset())
            if v is TOP:
                return TOP
            out |= v
        return frozenset(out)

    def solve(self, i: int, text: str):
        """The values operand ``text`` of instruction ``i`` can take (``TOP``: unknown)."""
        slice_ = self._slice(i, text)
        for d in slice_:
            self.val.setdefault(d, frozenset())
        for _ in range(10000):
            changed = False
            for d in slice_:
                if self.val[d] is TOP:
                    continue
                new = self._eval(d)
                if new is not TOP and len(new) > CAP:
                    new = TOP
                if new is TOP or not new <= self.val[d]:
                    self.val[d] = TOP if new is TOP else self.val[d] | new
                    changed = True
            if not changed:
                return self.operand(i, text)
        return TOP

    def _slice(self, i: int, text: str) -> list[int]:
        todo = [(i, text)]
        seen: list[int] = []
        while todo:
            at, reg = todo.pop()
            if not _REG.match(reg):
                continue
            for d in self.fn.reaching(at, reg):
                if d not in seen:
                    seen.append(d)
                    todo += [(d, o) for o in self.fn.instrs[d][1][1:]]
        return sorted(seen)

    def _eval(self, d: int):
        op, ops, _g = self.fn.instrs[d]
        dest, src = ops[0], ops[1:]
        base = op.split(".")[0]
        if base == "add" and dest in src and len(src) == 2:  # induction variable: init + k * step
            step = self.operand(d, src[1] if src[0] == dest else src[0])
            init = self.operand(d, dest, skip=d)
            if TOP in (step, init):
                return TOP
            result, frontier = set(init), set(init)
            for _ in range(1, self.trip):
                frontier = {f + s for f in frontier for s in step} - result
                result |= frontier
                if not frontier or len(result) > CAP:
                    break
            return frozenset(result)
        if base in ("mov", "cvt", "shfl"):  # shfl.idx 0: lane 0's value, and we are lane 0
            return TOP if src[0].startswith("{") else self.operand(d, src[0])
        if base == "ld":
            return frozenset([0]) if ".shared" in op else TOP  # the TMEM base address word
        if base == "setp":
            a, b = self.operand(d, src[0]), self.operand(d, src[1])
            if TOP in (a, b):
                return frozenset([0, 1])
            return frozenset(int(_CMP[op.split(".")[1]](x, y)) for x in a for y in b)
        if base == "selp":
            return self._selp(d, src)
        if base in ("not", "neg") and len(src) == 1:
            a = self.operand(d, src[0])
            return TOP if a is TOP else frozenset(_s32(~x if base == "not" else -x) for x in a)
        if base == "mad" and len(src) == 3:
            a, b, c = (self.operand(d, s) for s in src)
            if TOP in (a, b, c):
                return TOP
            return frozenset(_s32(x * y + z) for x in a for y in b for z in c)
        fn = _BINARY.get(base)
        if fn is None or len(src) != 2:
            return TOP
        a, b = self.operand(d, src[0]), self.operand(d, src[1])
        if TOP in (a, b):
            return TOP
        out = set()
        for x in a:
            for y in b:
                r = fn(x, y, ".s" in op, op)
                if r is TOP:
                    return TOP
                out.add(r)
        return frozenset(out)

    def _selp(self, d: int, src: list[str]):
        a_op, b_op, p_op = src
        preds = self.fn.reaching(d, p_op)
        if len(preds) == 1:
            (pd,) = preds
            pop, pops, _g = self.fn.instrs[pd]
            var, const = pops[1], _imm(pops[2]) if len(pops) == 3 else None
            if pop.startswith("setp") and const is not None and var in (a_op, b_op):
                vals = self.operand(pd, var)
                other = self.operand(d, b_op if var == a_op else a_op)
                if TOP in (vals, other):
                    return TOP
                out: set = set()
                for v in vals:
                    picked_var = _CMP[pop.split(".")[1]](v, const) == (var == a_op)
                    out |= {v} if picked_var else set(other)
                return frozenset(out)
        a, b, p = (self.operand(d, s) for s in src)
        if TOP in (a, b, p):
            return TOP
        return frozenset((set(a) if 1 in p else set()) | (set(b) if 0 in p else set()))


def _div(x, y, signed, op):
    if y == 0:
        return TOP
    q = abs(x) // abs(y)
    return _s32(q if (x >= 0) == (y >= 0) else -q)


_BINARY = {
    "add": lambda x, y, s, op: x + y if op.endswith("64") else _s32(x + y),
    "sub": lambda x, y, s, op: x - y if op.endswith("64") else _s32(x - y),
    "mul": lambda x, y, s, op: x * y if ".wide" in op else _s32(x * y),
    "shl": lambda x, y, s, op: _s32(x << y),
    "shr": lambda x, y, s, op: _s32(x) >> y if s else (x & MASK32) >> y,
    "and": lambda x, y, s, op: _s32(x & y),
    "or": lambda x, y, s, op: _s32(x | y),
    "xor": lambda x, y, s, op: _s32(x ^ y),
    "min": lambda x, y, s, op: min(x, y),
    "max": lambda x, y, s, op: max(x, y),
    "div": _div,
}
_CMP = {
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
    "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y,
    "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y,
}


def functions(ptx: str) -> list[Function]:
    """The ``.entry`` / ``.func`` bodies of a PTX file."""
    bodies: list[list[str]] = []
    for line in ptx.splitlines():
        if re.match(r"^\s*(\.visible\s+)?\.(entry|func)\b", line):
            bodies.append([])
        elif bodies:
            bodies[-1].append(line)
    return [Function(b) for b in bodies]


def tmem_load_lanes(ptx: str, warps=(0, 1, 2, 3), trip: int = 32) -> list[dict]:
    """Every ``tcgen05.ld``: its datapaths (16 or 32 lanes) and, per warp, the first lanes its
    address can take (``None`` when the lane could not be determined)."""
    loads = []
    for fn in functions(ptx):
        for i, (op, ops, _g) in enumerate(fn.instrs):
            if not op.startswith("tcgen05.ld"):
                continue
            m = _LD.match(op)
            addr = next(o for o in ops if o.startswith("[")).strip("[] ")  # [taddr] (, offset)
            lanes = {}
            for w in warps:
                vals = Values(fn, 32 * w, trip).solve(i, addr)
                lanes[w] = None if vals is TOP else sorted({(v >> 16) & 0xFFFF for v in vals})
            loads.append({"op": op, "datapaths": int(m.group(1)) if m else 32, "lanes": lanes})
    return loads


def lanes_outside_quarter(loads: list[dict]) -> list[str]:
    """A line per load and warp whose lanes leave the warp's 32-lane quarter (or are unknown)."""
    problems = []
    for k, load in enumerate(loads):
        for w, lanes in load["lanes"].items():
            lo = 32 * (w % 4)
            if not lanes:
                what = "unknown" if lanes is None else "empty (the load is unreachable?)"
                problems.append(f"tcgen05.ld #{k} ({load['op']}): lanes of warp {w} {what}")
                continue
            bad = [lane for lane in lanes if lane < lo or lane + load["datapaths"] > lo + 32]
            if bad:
                problems.append(
                    f"tcgen05.ld #{k} ({load['op']}): warp {w} reads from lane(s) {bad}, outside "
                    f"its quarter [{lo}, {lo + 32})"
                )
    return problems
