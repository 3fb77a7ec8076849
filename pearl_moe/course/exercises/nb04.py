"""Notebook 04's exercise: the direct store on sm_100a (TMEM -> registers -> 256-bit stores).

The starter (notebook cell ``exercise-04-direct-store``) is a whole kernel: it allocates tensor
memory, fills a 128 x 128 fp32 accumulator (standing in for the MMA), reads it back one
32-column subtile at a time with ``tcgen05.ld.32x32b`` (one row per thread) and converts it to
bf16. Its store writes one bf16 at a time, to every row of the tile. The checks read the global
stores of the SASS: all 256 bits wide, and all conditional, since rows past the expert's end are
the next expert's. sm_100a only: tensor memory and 256-bit stores exist only on Blackwell.
"""

from __future__ import annotations

import re

from . import Check, Exercise, register

SM100 = ("sm_100a",)
#: 256-bit stores per thread: a 128-column bf16 row is 256 bytes, 8 stores of 32 bytes.
STORES_PER_ROW = 128 * 2 // 32

_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);")
_GUARD = re.compile(r"^@!?U?P[0-6]\s+")  # a predicate other than PT (always true)
_TARGET = re.compile(r"`\(?(\.L_x_\d+)\)?")


def conditional_stores(sass: str, opcode: str = r"^STG\b") -> tuple[int, int]:
    """``(stores, conditional)``: SASS instructions whose opcode matches ``opcode``, and how many
    of them may be skipped: predicated (``@P0 STG``), or between a predicated forward branch
    (``@P0 BRA `(.L_x_7)``) and its target label. Enough for the straight-line code of an
    unrolled store loop; a loop's back edge is not a guard."""
    seen, open_targets = set(), set()
    stores = guarded = 0
    for line in sass.splitlines():
        label = _LABEL.match(line)
        if label:
            seen.add(label.group(1))
            open_targets.discard(label.group(1))
            continue
        instr = _INSTR.search(line)
        if not instr:
            continue
        text = " ".join(instr.group(1).split())
        pred = _GUARD.match(text)
        op = text[pred.end() :] if pred else text
        if pred and op.startswith("BRA"):
            target = _TARGET.search(op)
            if target and target.group(1) not in seen:
                open_targets.add(target.group(1))
        if re.search(opcode, op):
            stores += 1
            guarded += bool(pred or open_targets)
    return stores, guarded


def _all_256_bit(report) -> bool:
    fams = report.families
    return (
        fams.get("STG.E.ENL2.256", 0) == STORES_PER_ROW
        and fams.get("STG.E.128", 0) == 0
        and fams.get("STG (other)", 0) == 0
    )


def _straight_from_registers(report) -> bool:
    return not any(
        report.families.get(f, 0)
        for f in ("STSM (stmatrix)", "UTMASTG (TMA store)", "STL/LDL (spills)")
    )


def _all_guarded(report) -> bool:
    stores, guarded = conditional_stores(report.sass)
    return stores > 0 and guarded == stores


register(
    Exercise(
        key="04-direct-store",
        notebook="04_direct_store",
        task=(
            "Store each thread's converted subtile (16 contiguous bf16 of one row per 256 bits) "
            "with 256-bit global stores, and skip the rows at or past m, the next expert's; a "
            "256-bit store needs an address the compiler can prove 32-byte aligned. sm_100a only: "
            "tensor memory and 256-bit global stores exist only on Blackwell (Hopper's widest "
            "store is 128 bits)."
        ),
        checks=(
            Check(
                f"every global store is 256 bits: {STORES_PER_ROW} STG.E.ENL2.256 per thread "
                "(a 128-column bf16 row = 256 B = 8 x 32 B), no STG.E.128 or narrower",
                _all_256_bit,
                SM100,
            ),
            Check(
                "every store can be skipped (predicated, or under a branch): rows >= m are the "
                "next expert's",
                _all_guarded,
                SM100,
            ),
            Check(
                "straight from registers: no shared-memory staging (STSM) and no TMA store "
                "(UTMASTG), no register spills (STL/LDL)",
                _straight_from_registers,
                SM100,
            ),
        ),
        archs=SM100,
    )
)
