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

__all__ = ["Stage", "STAGES", "render_stage_table", "render_speed_table", "update_readme"]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Stage:
    number: int | str  # 0-9, or "01b" for a notebook inserted between two numbers
    notebook: str
    title: str
    idea: str
    kernel_stage: int | None = None  # kernel module number (pearl_moe.kernels.<arch>.stage<N>_*)

    @property
    def label(self) -> str:
        """The notebook's number as the table shows it: ``"02"``, ``"01b"``."""
        return f"{self.number:02d}" if isinstance(self.number, int) else self.number

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
    Stage(
        "01b",
        "01b_cute_primer",
        "CuTe primer",
        "layouts, TMA, mbarriers, wgmma / tcgen05; compile a cell for both targets",
    ),
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
        5,
        "05_direct_store",
        "Direct register-to-global store",
        "no 24 KB epilogue buffer: one more ring entry (6 -> 7); 256-bit stores",
        4,
    ),
    Stage(
        6,
        "06_64_row_tiles",
        "64-row tiles",
        "1-CTA tile_m = 64: 8 KB A ring entries, 9 ring entries",
        5,
    ),
    Stage(
        7,
        "07_wide_b_loads",
        "Wide B loads",
        "one B ring entry spans two K tiles: 256 B per weight row per request",
        6,
    ),
    Stage(
        8,
        "08_epilogue_overlap",
        "Epilogue overlap",
        "two accumulator slots in TMEM (2-CTA 256 x 512); Hopper: ping-pong",
        7,
    ),
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
            f"| {s.label} | {name} — {s.title} | {s.idea} | {_mark(s.has_notebook())} | "
            f"{_mark(s.has_kernel('sm_100a'))} | {_mark(s.has_kernel('sm_90a'))} |"
        )
    return "\n".join(rows)


#: Implementations of the speed table, in course order, with the label a reader sees.
SPEED_IMPLS = (
    ("pearl-s1", "stage 1: per-expert loop of our GEMM"),
    ("pearl-s2", "stage 2: grouped GEMM"),
    ("pearl-s3", "stage 3: persistent, warp-specialized"),
    ("loop", "baseline: cuBLAS per-expert loop"),
    ("grouped_mm", "baseline: torch grouped_mm"),
)
#: Problems of the speed table: (model, tokens per GPU), decode first.
SPEED_PROBLEMS = (("GLM 5.3", 64), ("DeepSeek V4 Pro", 64), ("Kimi K3", 64), ("GLM 5.3", 4096))


def render_speed_table(results_root: Path | None = None, gpu: str = "H200") -> str:
    """Markdown table of each stage's measured latency (and % of floor) from ``results/``.

    Reads the harness run of kind ``stages`` (``python -m pearl_moe bench --kind stages``); says so
    plainly when there is none. Nothing in it is typed by hand.
    """
    from .replay import rows as replay_rows

    root = results_root or ROOT / "results"
    found = replay_rows(gpu=gpu, kind="stages", routing="balanced", root=root)
    if not found:
        return (
            f"_No `stages` run recorded for {gpu} yet (`python -m pearl_moe bench --kind stages`)._"
        )
    cell = {(r["impl"], r["model"], r["tokens_per_gpu"]): r for r in found}
    first = found[0]
    head = "| implementation | " + " | ".join(f"{m} {t} tok" for m, t in SPEED_PROBLEMS) + " |"
    lines = [
        f"Measured on {first['gpu']} ({str(first['date'])[:10]}), balanced routing, EP=8, "
        "median of CUDA-graph replays in µs (% of floor; floor = max(bytes that must move / read "
        "ceiling, FLOPs / bf16 ceiling), ceilings measured in the same run). Source: "
        f"`results/{gpu}/stages.json`.",
        "",
        head,
        "|---" * (len(SPEED_PROBLEMS) + 1) + "|",
    ]
    for impl, label in SPEED_IMPLS:
        cells = []
        for model, tokens in SPEED_PROBLEMS:
            r = cell.get((impl, model, tokens))
            cells.append(f"{r['median_us']:.0f} ({r['pct_of_floor']:.0f}%)" if r else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    extra = []
    sweep = replay_rows(gpu=gpu, kind="stage_sweep", root=root)
    if sweep:
        from .replay import load_run

        best = min(sweep, key=lambda r: r["median_us"])
        ceilings = load_run(gpu, "stage_sweep", root)["ceilings"]
        probe = ceilings.get("read_probe_bytes_per_s", ceilings["read_bytes_per_s"])
        text = (
            f"Fastest stage-3 configuration of the pipeline-depth sweep (`stage_sweep.json`, "
            f"{best['model']} {best['tokens_per_gpu']} tok): `{best['impl']}`, "
            f"{best['median_us']:.0f} µs ({best['pct_of_floor']:.0f}% of that run's floor)."
        )
        if ceilings["read_bytes_per_s"] > probe:
            text += (
                f" That run's read ceiling is the fastest rate a kernel in it demonstrated "
                f"({ceilings['read_bytes_per_s'] / 1e12:.2f} TB/s, above the read probe's "
                f"{probe / 1e12:.2f} TB/s), so the fastest kernel sits at 100% by construction."
            )
        extra.append(text)
    decode = [(m, t) for m, t in SPEED_PROBLEMS if t <= 256]
    close = []
    for model, tokens in decode:
        s2, s3 = cell.get(("pearl-s2", model, tokens)), cell.get(("pearl-s3", model, tokens))
        if s2 and s3 and s3["min_us"] <= s2["max_us"] and s2["min_us"] <= s3["max_us"]:
            close.append(
                f"{model} {tokens} tok: {s2['median_us']:.0f} vs {s3['median_us']:.0f} µs "
                f"(replays {s2['min_us']:.0f}-{s2['max_us']:.0f} vs "
                f"{s3['min_us']:.0f}-{s3['max_us']:.0f})"
            )
    configs = sorted(
        {
            str(r["config"].get("config", "?"))
            for r in found
            if r["impl"] in ("pearl-s2", "pearl-s3")
        }
    )
    if close:
        extra.append(
            f"At decode, stages 2 and 3 (config {' / '.join(f'`{c}`' for c in configs)}) are "
            "within the spread of their own replays (stage 2 vs stage 3 median; min-max of "
            "replays): "
            + "; ".join(close)
            + ". Stage 3 pays off at large batches and through the tile and depth knobs of the "
            "sweep above."
        )
    baselines = [
        r
        for r in replay_rows(gpu=gpu, routing="balanced", tokens=[t for _, t in decode], root=root)
        if not r["impl"].startswith("pearl")
    ]
    cells = []
    for model, tokens in decode:
        mine = [r for r in baselines if (r["model"], r["tokens_per_gpu"]) == (model, tokens)]
        if mine:
            b = min(mine, key=lambda r: r["median_us"])
            cells.append(
                f"{model} {tokens} tok {b['impl']} {b['median_us']:.0f} µs (`{b['kind']}.json`)"
            )
    if cells:
        extra.append(
            "Fastest baseline at decode in any recorded run (each run measured its own ceilings, "
            "so compare these in µs, not in % of floor): " + ", ".join(cells) + "."
        )
    for paragraph in extra:
        lines += ["", paragraph]
    return "\n".join(lines)


_BLOCKS = {
    "stages": render_stage_table,
    "speed": render_speed_table,
}


def update_readme(path: Path | None = None) -> bool:
    """Rewrite the README's generated blocks (stage table, speed table); True when it changed."""
    path = path or ROOT / "README.md"
    text = new = path.read_text()
    for name, render in _BLOCKS.items():
        block = re.compile(rf"(<!-- {name}:begin -->\n)(.*?)(<!-- {name}:end -->)", re.S)
        if not block.search(new):
            raise ValueError(f"{path} has no <!-- {name}:begin --> ... <!-- {name}:end --> block")
        body = render()
        new = block.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(3), new)
    if new != text:
        path.write_text(new)
    return new != text


def dsl_available() -> bool:
    """Whether CuTe DSL (nvidia-cutlass-dsl) can be imported here."""
    return importlib.util.find_spec("cutlass") is not None
