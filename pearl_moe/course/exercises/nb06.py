"""Notebook 06's exercise: the two-box B load (one B ring entry spans two K tiles)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from . import Check, Exercise, register, scratch_module

#: One B entry of the exercise's kernel: 128 weight rows x two K tiles of 64 bf16.
ENTRY_BYTES = 128 * 2 * 64 * 2


def _armed_with_both_boxes(report) -> bool:
    """Every full barrier is armed with the whole entry's bytes (both boxes)."""
    return bool(report.expect_tx) and set(report.expect_tx) == {ENTRY_BYTES}


def tma_boxes(report) -> int:
    """TMA box loads in the PTX (``cp.async.bulk.tensor``): one per box, before ptxas, which may
    duplicate a load in the SASS on a divergent path."""
    return len(re.findall(r"cp\.async\.bulk\.tensor", report.ptx))


def _two_boxes_per_arm(report) -> bool:
    return bool(report.expect_tx) and tma_boxes(report) == 2 * len(report.expect_tx)


#: The columns of one entry: two K tiles of 64 bf16.
ENTRY_COLUMNS = 2 * 64

_RANGES = ("range", "range_constexpr", "range_dynamic")


def _trip_count(loop: ast.For, names: dict) -> int | None:
    """How many values ``loop`` (``for x in cutlass.range(...)`` or ``range(...)``) gives its
    variable, its bounds evaluated with ``names``; None where they cannot be read."""
    call = loop.iter
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in _RANGES or not 1 <= len(call.args) <= 3:
        return None
    try:
        bounds = [int(eval(compile(ast.Expression(a), "<bound>", "eval"), dict(names)))
                  for a in call.args]  # fmt: skip
    except Exception:  # noqa: BLE001 - a bound read at run time: cannot tell
        return None
    return len(range(*bounds))


def entry_columns_read(source: str, names: dict) -> list[tuple[str, int | None]]:
    """``(read, columns)`` for every read ``X[row, column, slot]`` of a shared-memory tensor
    (a name assigned from ``*.allocate_tensor(...)``; ``sB`` if there is none) in ``source``:
    how many columns the loops around it walk (the product of the trip counts of the enclosing
    loops whose variable appears in the column index; None where a bound is not a constant of
    ``names`` or of a simple assignment in the function)."""
    tree = ast.parse(source)
    tensors = {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Attribute)
        and n.value.func.attr == "allocate_tensor"
        for t in n.targets
        if isinstance(t, ast.Name)
    } or {"sB"}
    found = []

    def visit(node, loops, scope):
        if isinstance(node, ast.FunctionDef):
            scope = dict(scope)
            for stmt in ast.walk(node):  # constants the function names: ENTRY = 2 * BK
                if (
                    isinstance(stmt, ast.Assign)
                    and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                ):
                    try:
                        value = eval(compile(ast.Expression(stmt.value), "<c>", "eval"), scope)
                    except Exception:  # noqa: BLE001
                        continue
                    if isinstance(value, int):
                        scope[stmt.targets[0].id] = value
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in tensors
            and isinstance(node.slice, ast.Tuple)
            and len(node.slice.elts) == 3
            and isinstance(node.ctx, ast.Load)
        ):
            used = {n.id for n in ast.walk(node.slice.elts[1]) if isinstance(n, ast.Name)}
            columns = 1
            for loop in loops:
                if isinstance(loop.target, ast.Name) and loop.target.id in used:
                    count = _trip_count(loop, scope)
                    columns = None if count is None or columns is None else columns * count
            found.append((ast.unparse(node), columns))
        if isinstance(node, ast.For):
            loops = loops + [node]
        for child in ast.iter_child_nodes(node):
            visit(child, loops, scope)

    visit(tree, [], dict(names))
    return found


def _reads_every_column(report) -> bool:
    """Every read of the ring walks both K tiles of the entry: 128 columns, not 64."""
    source = Path(report.files["ptx"]).with_name("scratch_kernel.py").read_text()
    module = scratch_module(report)
    names = {k: v for k, v in vars(module).items() if isinstance(v, int)}
    reads = entry_columns_read(source, names)
    if not reads or any(columns is None for _, columns in reads):
        return True  # no read found, or a bound known only at run time: nothing to tell
    columns = sum(c for _, c in reads)  # two loops of 64 columns each cover the entry too
    if columns != ENTRY_COLUMNS:
        where = ", ".join(read for read, _ in reads)
        half = "half of " if 2 * columns == ENTRY_COLUMNS else ""
        raise AssertionError(
            f"the loop around {where} walks {columns} columns: an entry now holds "
            f"{ENTRY_COLUMNS} (two K tiles of 64), so the sum covers only {half}each entry; "
            "loop over 2 * BK columns"
        )
    return True


register(
    Exercise(
        key="06-two-box-b",
        notebook="06_wide_b_loads",
        task=(
            "Make one B ring entry span two K tiles (128 weight rows x 128 bf16: 256 bytes of "
            "each row): two 128 x 64 swizzled blocks side by side, filled by one copy that the "
            "TMA issues as two 128-byte-wide boxes, both completing on the entry's one full "
            "barrier, armed with both boxes' bytes."
        ),
        checks=(
            Check(
                f"every full barrier armed with both boxes' bytes, 2 x 128 x 64 x 2 = "
                f"{ENTRY_BYTES} B (expect_tx)",
                _armed_with_both_boxes,
            ),
            Check(
                "two TMA boxes per armed barrier (cp.async.bulk.tensor in the PTX = 2 x expect_tx)",
                _two_boxes_per_arm,
            ),
            Check(
                f"the sum reads every column of an entry: the loop over an entry's columns runs "
                f"to 2 x 64 = {ENTRY_COLUMNS} (read from your source)",
                _reads_every_column,
            ),
        ),
    )
)
