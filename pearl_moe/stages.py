"""The course's stage table: one row per notebook, with what exists and where it was verified.

The README's stage table is rendered from here (``python -m pearl_moe figures`` rewrites it between
the ``stages:begin`` / ``stages:end`` markers), so it never drifts from the repository: a stage is
marked as present only when its notebook or kernel modules are actually in the tree.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Stage", "STAGES", "render_stage_table", "update_readme"]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Stage:
    number: int
    notebook: str
    title: str
    idea: str
    kernel_stage: int | None = None  # kernel module number (pearl_moe.kernels.<arch>.stage<N>_*)

    @property
    def notebook_path(self) -> Path:
        return ROOT / "notebooks" / f"{self.notebook}.ipynb"

    def has_notebook(self) -> bool:
        return self.notebook_path.exists()

    def has_kernel(self, arch: str) -> bool:
        if self.kernel_stage is None:
            return False
        pkg = "sm100" if arch == "sm_100a" else "sm90"
        folder = Path(__file__).resolve().parent / "kernels" / pkg
        return any(folder.glob(f"stage{self.kernel_stage}_*.py"))


STAGES: tuple[Stage, ...] = (
    Stage(0, "00_setup_and_tour", "Setup and tour", "what this machine can run; the baselines"),
    Stage(1, "01_why_grouped_gemm", "Why grouped GEMM", "one launch for all experts fills the GPU"),
    Stage(2, "02_plain_gemm", "Plain GEMM", "TMA ring + tensor cores + TMA-store epilogue", 1),
    Stage(
        3, "03_grouped_gemm", "Grouped GEMM", "CTA (x, y, z) computes tile (x, y) of expert z", 2
    ),
    Stage(
        4,
        "04_bytes_in_flight",
        "Bytes in flight",
        "persistent, warp-specialized; pipeline depth as a knob",
        3,
    ),
    Stage(
        5, "05_direct_store", "Direct register-to-global store", "drop the 24 KB buffer: 7th stage"
    ),
    Stage(6, "06_64_row_tiles", "64-row tiles", "1-CTA tile_m = 64: 8 KB A stages, more CTAs"),
    Stage(7, "07_wide_b_loads", "Wide B loads", "one B stage spans two K tiles: 256 B per row"),
    Stage(8, "08_epilogue_overlap", "Epilogue overlap", "split accumulator slots in TMEM"),
    Stage(9, "09_benchmarks", "Benchmarks", "every stage against the baselines"),
)


def _mark(ok: bool) -> str:
    return "yes" if ok else "-"


def render_stage_table() -> str:
    """Markdown table of the stages, marking which notebooks and kernels exist in this tree."""
    rows = [
        "| # | notebook | idea | notebook exists | sm_100a kernel | sm_90a kernel |",
        "|---|---|---|---|---|---|",
    ]
    for s in STAGES:
        name = f"[{s.notebook}](notebooks/{s.notebook}.ipynb)" if s.has_notebook() else s.notebook
        rows.append(
            f"| {s.number:02d} | {name} — {s.title} | {s.idea} | {_mark(s.has_notebook())} | "
            f"{_mark(s.has_kernel('sm_100a'))} | {_mark(s.has_kernel('sm_90a'))} |"
        )
    return "\n".join(rows)


_BLOCK = re.compile(r"(<!-- stages:begin -->\n)(.*?)(<!-- stages:end -->)", re.S)


def update_readme(path: Path | None = None) -> bool:
    """Rewrite the README's stage table in place; return True when it changed."""
    path = path or ROOT / "README.md"
    text = path.read_text()
    if not _BLOCK.search(text):
        raise ValueError(f"{path} has no <!-- stages:begin --> ... <!-- stages:end --> block")
    new = _BLOCK.sub(lambda m: m.group(1) + render_stage_table() + "\n" + m.group(3), text)
    if new != text:
        path.write_text(new)
    return new != text


def dsl_available() -> bool:
    """Whether CuTe DSL (nvidia-cutlass-dsl) can be imported here."""
    return importlib.util.find_spec("cutlass") is not None
