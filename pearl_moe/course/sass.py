"""Read SASS the way the notebooks do: opcode counts per kernel, and a table of families.

A compiled module can hold several kernels (the grouped sm_100a module holds a descriptor writer
and the GEMM): :func:`sass_by_kernel` splits a listing by kernel, and :func:`families_table` prints
the instruction families of :data:`pearl_moe.course.kernel_report.FAMILIES` side by side, one column per kernel
or report.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

__all__ = ["sass_by_kernel", "sass_lines", "families_table", "gemm_families"]


def sass_by_kernel(sass: str) -> dict[str, Counter]:
    """Opcode counts of every kernel function in a SASS listing (a module may hold several).

    Keys are the function names with CuTe DSL's long suffixes cut to something readable.
    """
    from .kernel_report import count_opcodes

    out: dict[str, Counter] = {}
    name = None
    chunk: list[str] = []

    def flush():
        if name is not None:
            out[name] = out.get(name, Counter()) + count_opcodes("\n".join(chunk))

    for line in sass.splitlines():
        if line.startswith("//---") and ".text." in line:
            flush()
            full = line.split(".text.", 1)[1].split(" ")[0]
            name = _short_kernel_name(full)
            chunk = []
        else:
            chunk.append(line)
    flush()
    return out


def _short_kernel_name(full: str) -> str:
    """``kernel_cutlass_grouped_kernel_pearl_moe...`` -> ``grouped_kernel``."""
    head = full.removeprefix("kernel_cutlass_")
    return head.split("_pearl_moe")[0] if "_pearl_moe" in head else head[:40]


def families_table(
    reports: Mapping[str, object], families: Sequence[str] | None = None, zero: str = "."
) -> str:
    """Plain-text table, one column per report and one row per SASS family.

    ``reports`` maps a label to a :class:`~pearl_moe.course.kernel_report.KernelReport` or to a dict of family
    counts (e.g. ``count_families`` of one kernel from :func:`sass_by_kernel`).
    """
    from .kernel_report import FAMILIES

    labels = list(reports)
    names = list(families or FAMILIES)
    width = max(len(n) for n in names) + 2
    cols = [max(len(lbl), 6) + 2 for lbl in labels]
    lines = [" " * width + "".join(f"{lbl:>{w}}" for lbl, w in zip(labels, cols, strict=True))]
    for fam in names:
        cells = []
        for lbl, w in zip(labels, cols, strict=True):
            rep = reports[lbl]
            fams = rep if isinstance(rep, Mapping) else rep.families  # type: ignore[attr-defined]
            count = fams.get(fam, 0)
            cells.append(f"{(count or zero)!s:>{w}}")
        lines.append(f"{fam:<{width}}" + "".join(cells))
    return "\n".join(lines)


def sass_lines(sass: str, pattern: str) -> list[str]:
    """The SASS instructions whose text (opcode and operands, address comment cut) matches the
    regex ``pattern``, whitespace squeezed: ``sass_lines(report.sass, r"^HGMMA")``."""
    regex = re.compile(pattern)
    out = []
    for line in sass.splitlines():
        head, sep, text = line.partition("*/")
        if not sep or "/*" not in head:
            continue
        text = " ".join(text.split())
        if regex.search(text):
            out.append(text)
    return out


def gemm_families(report) -> dict[str, int]:
    """SASS families of the GEMM kernel of a compiled module (the kernel that issues the MMAs):
    a module may also hold a small pre-kernel (the sm_100a TMA-store stages write per-expert
    output descriptors first), whose stores must not be counted as the GEMM's."""
    from .kernel_report import count_families

    kernels = sass_by_kernel(report.sass)
    for ops in kernels.values():
        fams = count_families(ops)
        if fams.get("UTC*MMA (tcgen05.mma)") or fams.get("HGMMA (wgmma)"):
            return fams
    raise LookupError(f"no kernel with MMA instructions in {list(kernels)}")
