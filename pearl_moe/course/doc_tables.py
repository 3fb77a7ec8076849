"""The generated tables of the README and of ``docs/``: the course map, the headline speed table,
the default call against every baseline, the held-out runs, the tuned tables' options, the layer.

Each is rendered from the committed runs in ``results/`` and the tuned tables, never typed by hand;
``python -m pearl_moe figures`` rewrites each page's blocks between their ``<!-- NAME:begin -->``
and ``<!-- NAME:end -->`` markers (:data:`DOC_BLOCKS` says which page holds which block, and
:func:`update_docs` rewrites them). The course map (:data:`STAGES`) links a notebook only when it
is in the tree.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Stage",
    "STAGES",
    "measured_steps",
    "render_stage_table",
    "render_steps_table",
    "render_speed_table",
    "render_compare_table",
    "render_general_table",
    "render_layer_table",
    "render_headline_table",
    "render_options_table",
    "render_ceilings_table",
    "DOC_BLOCKS",
    "block_text",
    "update_doc",
    "update_docs",
]

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Stage:
    """One notebook of the course: its file, what it teaches and the kernel stage it builds.

    The notebook's number is the kernel stage it teaches (``01a``/``01b`` both teach stage 1);
    ``00a``-``00d`` come before the first kernel, ``08a``/``08b`` and ``09`` after the last,
    ``A1``/``A2`` are appendices."""

    label: str  # the notebook's prefix: "00a", "01b", "04", "A1"
    notebook: str
    title: str
    idea: str  # what the learner leaves with, in one line
    kernel_stage: int | None = None  # kernel stage (pearl_moe.kernels.ladder.KERNEL_STAGES)
    minutes: int = 60  # for a reader who knows CUDA and PyTorch but not CuTe DSL
    runs_on: str = "CPU"  # what runs live where: "CPU", "CPU · Hopper", "CPU · Hopper · Blackwell"

    @property
    def taught_stage(self) -> int | None:
        """The kernel stage the notebook teaches (None for the notebooks around the ladder)."""
        return self.kernel_stage

    @property
    def notebook_path(self) -> Path:
        return ROOT / "notebooks" / f"{self.notebook}.ipynb"

    def has_notebook(self) -> bool:
        return self.notebook_path.exists()

    def has_kernel(self, arch: str) -> bool:
        if self.taught_stage is None:
            return False
        from ..kernels.ladder import KERNEL_STAGES, kernel_module_name

        if self.taught_stage not in KERNEL_STAGES:
            return False
        # the kernel module of the stage (stages 4-7 run the persistent kernel with more options)
        parts = kernel_module_name(arch, self.taught_stage).split(".")[1:]
        return (
            Path(__file__).resolve().parents[1].joinpath(*parts[:-1]) / f"{parts[-1]}.py"
        ).is_file()


_ALL = "CPU · Hopper · Blackwell"
_HOPPER = "CPU · Hopper"

STAGES: tuple[Stage, ...] = (
    Stage("00a", "00a_setup_and_tour", "Setup and tour", "what this machine can run; how far the baselines sit from the floor", None, 40, _HOPPER),
    Stage("00b", "00b_why_grouped_gemm", "Why grouped GEMM", "a per-expert loop leaves the GPU idle; one launch fills it", None, 60),
    Stage("00c", "00c_cute_primer", "CuTe primer", "layouts, swizzles, TMA boxes, mbarrier rings, wgmma and tcgen05", None, 65),
    Stage("00d", "00d_dsl_rules", "CuTe DSL rules", "trace time and run time, Constexpr, loops, branches, partitions, pipelines", None, 60),
    Stage("01a", "01a_stage1_kernel", "Stage 1: the GEMM kernel", "TMA ring, tensor cores, TMA-store epilogue; write the producer", 1, 65, _ALL),
    Stage("01b", "01b_per_expert_loop", "Stage 1: the per-expert loop", "budgets, occupancy and the cost of one launch per expert", 1, 55, _ALL),
    Stage("02", "02_grouped_gemm", "Stage 2: grouped GEMM", "CTA (x, y, z) computes tile (x, y) of expert z", 2, 65, _ALL),
    Stage("03a", "03a_persistent_schedule", "Stage 3: the persistent schedule", "one CTA per SM walks only the real tiles", 3, 60, _ALL),
    Stage("03b", "03b_warp_roles", "Stage 3: warp roles", "TMA, MMA and epilogue warps meet at mbarriers", 3, 45, _ALL),
    Stage("03c", "03c_bytes_in_flight", "Stage 3: bytes in flight", "Little's law: what ring depth and tile height buy", 3, 60, _ALL),
    Stage("04", "04_direct_store", "Stage 4: direct store", "no 24 KB epilogue buffer: one more ring entry; 256-bit stores", 4, 60, _ALL),
    Stage("05", "05_64_row_tiles", "Stage 5: 64-row tiles", "1-CTA tile_m = 64: 8 KB A ring entries, 9 ring entries", 5, 60, _ALL),
    Stage("06", "06_wide_b_loads", "Stage 6: wide B loads", "one B ring entry spans two K tiles: 256 B of each weight row, two 128-byte boxes", 6, 70, _ALL),
    Stage("07a", "07a_split_accumulator_blackwell", "Stage 7: split accumulator (Blackwell)", "two TMEM slots of a 256 x 512 tile, released apart; write the hand-over", 7, 65, "CPU · Blackwell"),
    Stage("07b", "07b_split_accumulator_hopper", "Stage 7: split accumulator (Hopper)", "two consumer warpgroups take turns", 7, 50, _HOPPER),
    Stage("08a", "08a_benchmarks", "Benchmarks", "the default call against every baseline; what each stage bought", None, 60, _HOPPER),
    Stage("08b", "08b_default_call", "The default call", "how grouped_gemm picks a configuration, judged on layers no one tuned", None, 55, _HOPPER),
    Stage("09", "09_moe_layer", "The whole MoE layer", "routing, gather, gate+up with fused SwiGLU, down, combine", None, 60, _ALL),
    Stage("A1", "A1_measuring_honestly", "Appendix: measuring honestly", "interleaved rounds, the power cap, drift, Nsight Compute", None, 55),
    Stage("A2", "A2_latency_model", "Appendix: the latency model", "what the model counts, which terms are fitted, how far to trust it", None, 65),
)  # fmt: skip


def _mark(ok: bool) -> str:
    return "yes" if ok else "-"


#: Where the measured step of each kernel stage comes from: the run kind and whether its records
#: carry per-round medians (paired ratios) or only medians.
STEP_SOURCES = (("ablation", "paired per round"), ("stages", "ratio of medians"))


def _x(value: float) -> str:
    return f"×{value:.2f}"


def measured_steps(results_root: Path | None = None, gpu: str = "H200") -> dict[int, dict]:
    """``{kernel stage: step}`` for every stage measured against the previous one on ``gpu``:
    from the ``ablation`` run (stages 3-7, paired per round) where it has the stage, else from the
    ``stages`` run (stages 1-3). Each step is :func:`pearl_moe.bench.compare.step_summary`'s entry
    plus the run's ``kind``, ``date`` and ``method``."""
    from ..bench.compare import ablation_summary, step_summary
    from ..results import load_run

    root = results_root or ROOT / "results"
    steps: dict[int, dict] = {}
    for kind, method in STEP_SOURCES:
        try:
            run = load_run(gpu, kind, root)
        except FileNotFoundError:
            continue
        impls = {r["impl"] for r in run["records"]}
        chain = [f"pearl-s{n}" for n in range(1, 9) if f"pearl-s{n}" in impls]
        for step in step_summary(ablation_summary(run, chain=chain)):
            stage = int(step["to"].removeprefix("pearl-s"))
            if stage not in steps and "all" in step:
                steps[stage] = dict(
                    step, kind=kind, date=str(run["env"]["date"])[:10], method=method
                )
    return steps


def _step_cell(step: dict | None) -> str:
    """A stage's step in the course map, short: decode · prefill (geomeans)."""
    if not step:
        return "-"
    return " · ".join(_x(step[part]["geomean"]) for part in ("decode", "prefill") if part in step)


#: Where the course map's step column is explained (a heading of docs/performance.md).
STEPS_ANCHOR = "docs/performance.md#each-kernel-stage-against-the-one-before"


def render_stage_table(results_root: Path | None = None) -> str:
    """The course map: every notebook with what it teaches, where it runs live and its time, and
    each kernel stage's measured step on the H200 in two short numbers (decode · prefill: time
    against the previous stage, from ``results/H200``; nothing typed by hand), shown on the
    stage's first notebook that runs on Hopper (the steps were measured with the sm_90a kernels).
    How the steps are taken, with their ranges, is :func:`render_steps_table`'s block."""
    steps = measured_steps(results_root)
    rows = [
        "| # | notebook | you'll learn | runs on | minutes | H200 step: decode · prefill |",
        "|---|---|---|---|---|---|",
    ]
    # a stage's step once, on its first notebook that runs on Hopper (the steps are sm_90a's)
    step_row = {}
    for s in STAGES:
        if s.taught_stage and "Hopper" in s.runs_on:
            step_row.setdefault(s.taught_stage, s.label)
    for s in STAGES:
        name = f"[{s.title}](notebooks/{s.notebook}.ipynb)" if s.has_notebook() else s.title
        step = "-"
        if s.taught_stage and step_row.get(s.taught_stage) == s.label:
            step = _step_cell(steps.get(s.taught_stage))
        rows.append(f"| {s.label} | {name} | {s.idea} | {s.runs_on} | {s.minutes} | {step} |")
    if steps:
        rows += [
            "",
            "H200 step: the stage's time over the previous stage's, measured (below 1: faster); "
            f"shapes, ranges and runs: [docs/performance.md]({STEPS_ANCHOR}).",
        ]
    return "\n".join(rows)


def render_steps_table(results_root: Path | None = None) -> str:
    """Each kernel stage against the one before on the H200, with the range over the shapes and
    the run it comes from: the long form of the course map's step column."""
    from ..results import run_path

    root = results_root or ROOT / "results"
    steps = measured_steps(results_root)
    if not steps:
        return "_No `stages` or `ablation` run recorded for H200 yet._"
    rows = [
        "| kernel stage | decode | prefill | all | run |",
        "|---|---|---|---|---|",
    ]
    for n, st in sorted(steps.items()):
        cells = []
        for part in ("decode", "prefill"):
            q = st.get(part)
            cells.append(f"{_x(q['geomean'])} ({q['lo']:.2f}-{q['hi']:.2f})" if q else "-")
        rows.append(
            f"| {n} / {n - 1} | {cells[0]} | {cells[1]} | {_x(st['all']['geomean'])} | "
            f"`{run_path('H200', st['kind'], root).name}` |"
        )
    notes = []
    for kind, method in STEP_SOURCES:
        mine = {n: st for n, st in steps.items() if st["kind"] == kind}
        if not mine:
            continue
        first = next(iter(mine.values()))
        tokens = sorted({t for st in mine.values() for p in ("decode", "prefill") if p in st
                         for t in st[p]["tokens"]})  # fmt: skip
        dec = [t for t in tokens if t <= 256]
        pre = [t for t in tokens if t > 256]
        notes.append(
            f"Kernel stages {min(mine)}-{max(mine)}: "
            f"`results/H200/{run_path('H200', kind, root).name}` "
            f"({first['date']}), {method}; geomean over the three models at "
            f"{'/'.join(map(str, dec))} tokens per GPU (decode) and "
            f"{'/'.join(map(str, pre))} (prefill), balanced routing, in brackets the range over "
            "those shapes"
        )
    rows += [
        "",
        "Each kernel stage's time over the previous stage's, measured on the H200 with the sm_90a "
        "kernels (below 1: the stage is faster); the course map in the README shows the decode "
        "and prefill geomeans on the stage's notebook. "
        + ". ".join(notes)
        + ". The figure `ablation_h200` shows every shape with the spread of its rounds.",
    ]
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
    from ..results import rows as replay_rows
    from ..results import run_path

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
        f"`results/{gpu}/{run_path(gpu, 'stages', root).name}`.",
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
        from ..results import load_run
        from .measurements import current_names

        best = min(sweep, key=lambda r: r["median_us"])
        ceilings = load_run(gpu, "stage_sweep", root)["ceilings"]
        probe = ceilings.get("read_probe_bytes_per_s", ceilings["read_bytes_per_s"])
        text = (
            f"Fastest stage-3 configuration of the ring-depth sweep (`stage_sweep.json`, "
            f"{best['model']} {best['tokens_per_gpu']} tok): `{current_names(best['impl'])}`, "
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
                f"{model} {tokens} tok {b['impl']} {b['median_us']:.0f} µs "
                f"(`{run_path(gpu, b['kind'], root).name}`)"
            )
    if cells:
        extra.append(
            "Fastest baseline at decode in any recorded run (each run measured its own ceilings, "
            "so compare these in µs, not in % of floor): " + ", ".join(cells) + "."
        )
    for paragraph in extra:
        lines += ["", paragraph]
    return "\n".join(lines)


#: Baselines of the compare table, in the order a reader meets them in notebook 08a.
COMPARE_BASELINES = (
    ("triton", "Triton"),
    ("grouped_mm", "torch grouped_mm"),
    ("loop", "cuBLAS loop"),
    ("quack-tuned", "quack tuned"),
    ("quack", "quack"),
    ("flashinfer", "FlashInfer"),
)


def render_compare_table(results_root: Path | None = None, gpu: str = "H200") -> str:
    """Markdown table of the default call (``pearl``: ``grouped_gemm(A, W, offsets)``, no stage, no
    config) against every baseline of the ``compare`` run: per shape our time (% of floor), each
    baseline's time, the best baseline and the paired ratio; then geomean, worst, shapes above
    1.03, the decode speed-up over tuned quack and the run's read ceiling beside the datasheet's.
    """
    from ..bench.compare import compare_summary
    from ..results import load_run, run_path, run_scheduler

    root = results_root or ROOT / "results"
    try:
        run = load_run(gpu, "compare", root)
    except FileNotFoundError:
        return f"_No `compare` run recorded for {gpu} yet (`python -m pearl_moe bench --kind compare`)._"
    s = compare_summary(run)
    recs = {(r["problem"], r["impl"]): r for r in run["records"] if r.get("status") == "ok"}
    present = [(i, label) for i, label in COMPARE_BASELINES if i in s["baselines"]]
    present += [(i, i) for i in s["baselines"] if i not in dict(COMPARE_BASELINES)]
    env = run["env"]
    walk, why = run_scheduler(run)
    head = (
        "| model | tokens | routing | floor µs | default call µs (% of floor) | "
        + " | ".join(f"{label} µs" for _, label in present)
        + " | best baseline (% of floor) | ratio (rounds) |"
    )
    lines = [
        f"Measured on {env.get('gpu', gpu).replace('NVIDIA ', '')} ({str(env['date'])[:10]}), "
        f"`results/{gpu}/{run_path(gpu, 'compare', root).name}`: the three models' gate+up "
        "shapes, EP=8, CUDA-graph "
        "medians in µs, every implementation tuned (the default call by its tuned table, "
        "Triton by timing its candidates, quack by its autotuner). Ratio = default call / best "
        "baseline, paired round by round (below 1: ours is faster; in brackets the range of the "
        f"rounds). Tile scheduler of this run: {walk} walk ({why}).",
        "",
        head,
        "|---|---|---|---|---|" + "---|" * len(present) + "---|---|",
    ]
    for r in s["rows"]:
        pid = r["problem"]
        ours = f"{r['ours_us']:.1f} ({r['ours_pct_floor']:.0f}%)" if "ours_us" in r else "-"
        cells = []
        for impl, _ in present:
            rec = recs.get((pid, impl))
            cells.append(f"{rec['time']['median_us']:.1f}" if rec else "-")
        best = f"{r['best']} ({r['best_pct_floor']:.0f}%)" if "best" in r else "-"
        ratio = "-"
        if "ratio" in r:
            flag = " **above 1.03**" if r["ratio"] > s["tie"] else ""
            ratio = f"{r['ratio']:.3f} ({r['lo']:.3f}-{r['hi']:.3f}){flag}"
        lines.append(
            f"| {r['model']} | {r['tokens']} | {r['routing']} | {r['floor_us']:.1f} | {ours} | "
            + " | ".join(cells)
            + f" | {best} | {ratio} |"
        )
    worst = s["worst"]
    d = s["decode_vs_quack"]
    c = s["ceilings"]
    above = s["above_tie"]

    def shape(pid: str) -> str:
        model, _, tokens, _, routing = pid.split("|")
        return f"{model}, {tokens} token{'s' if tokens != '1' else ''}, {routing}"

    def shapes_in(text: str) -> str:
        return re.sub(
            r"[^|,;()]+\|gate_up\|\d+\|EP\d+\|\w+", lambda m: shape(m.group(0).strip()), text
        )

    summary = f"Over {s['compared']} shapes: geomean ratio **{s['geomean_ratio']:.3f}**"
    if worst:
        summary += (
            f", worst {worst['ratio']:.3f} ({shape(worst['problem'])}, against {worst['best']})"
        )
    if above:
        count = f"{len(above)} shape{'s' if len(above) > 1 else ''}"
        summary += f"; {count} above {s['tie']:.2f} (" + "; ".join(shape(a) for a in above) + ")."
    else:
        summary += f"; no shape above {s['tie']:.2f}."
    if d["shapes"]:
        summary += (
            f" At decode (≤ {d['max_tokens']} tokens) the default call is "
            f"{d['geomean_speedup']:.2f}x faster than {d['quack']} (geomean over the "
            f"{d['shapes']} shapes where both ran)."
        )
    summary += (
        f" Read ceiling of this run: {c['read_tb_s']:.2f} TB/s (read probes {c['read_probe_tb_s']:.2f}"
        f" TB/s; {shapes_in(c['read_source'])})"
    )
    if c.get("datasheet_read_tb_s"):
        summary += (
            f", {c['read_pct_of_datasheet']:.0f}% of the {c['datasheet_gpu']} datasheet's "
            f"{c['datasheet_read_tb_s']:.1f} TB/s"
        )
    summary += f"; dense bf16 ceiling {c['bf16_tflop_s']:.0f} TFLOP/s. The floor uses both."
    lines += ["", summary, *_changed_picks_note(run)]
    return "\n".join(lines)


def _measured_on(env: dict, gpu: str, path: Path) -> str:
    """``Measured on <GPU> (<date>), `results/<gpu>/<file>``` for a run read from ``path``."""
    return (
        f"Measured on {env.get('gpu', gpu).replace('NVIDIA ', '')} "
        f"({str(env.get('date', '?'))[:10]}), `results/{gpu}/{path.name}`"
    )


def render_general_table(results_root: Path | None = None, gpu: str = "H200") -> str:
    """The default call on shapes no one tuned: the ``compare_general`` run's held-out set by
    tokens per GPU (geomean and worst ratio against the best baseline, who won), beside the
    course shapes of the same run; the shapes above the tie, those the run did not reach, and
    the shapes whose pick has changed since the run (the table or the picker changed)."""
    from ..bench.compare import by_tokens, compare_summary
    from ..results import load_run, run_path

    root = results_root or ROOT / "results"
    try:
        run = load_run(gpu, "compare_general", root)
    except FileNotFoundError:
        return (
            f"_No `compare_general` run recorded for {gpu} yet "
            "(`bash scripts/general_runs.sh compare` on the GPU)._"
        )
    s = compare_summary(run)
    env = run["env"]
    lines = [
        _measured_on(env, gpu, run_path(gpu, "compare_general", root))
        + ": the default call against "
        + ", ".join(s["baselines"])
        + " in one run (interleaved rounds, CUDA graphs). Ratio = default call / best baseline "
        "(below 1: ours is faster); a shape counts as lost above "
        f"{s['tie']:.2f}.",
        "",
        "| set | tokens per GPU | shapes | geomean ratio | worst (against) | above "
        f"{s['tie']:.2f} | fastest baseline (shapes) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("held-out", "course"):
        for g in by_tokens(s, name):
            worst = g["worst"]
            wins = ", ".join(f"{b} {c}" for b, c in g["wins"].items())
            lines.append(
                f"| {name} | {g['tokens']} | {g['compared']} | {g['geomean_ratio']:.3f} | "
                f"{worst['ratio']:.3f} ({worst['problem'].split('|')[0]}, {worst['best']}) | "
                f"{len(g['above_tie'])} | {wins} |"
            )
    notes = []
    for name, g in s["by_set"].items():
        notes.append(
            f"{name}: {g['compared']} shapes, geomean **{g['geomean_ratio']:.3f}** "
            f"({g['geomean_losses_tied']:.3f} had every loss been a tie), worst "
            f"{g['worst']['ratio']:.3f} ({g['worst']['problem']}), {len(g['above_tie'])} above "
            f"{s['tie']:.2f}"
        )
    lines += ["", "Over the run: " + "; ".join(notes) + "."]
    unreached = list(s["missing"]) + list(env.get("skipped_problems") or [])
    if unreached:
        lines += [
            "",
            f"Not reached by this run ({len(unreached)}, a deadline; "
            "`scripts/general_runs.sh compare` continues it): " + ", ".join(unreached) + ".",
        ]
    lines += _changed_picks_note(run)
    return "\n".join(lines)


def _changed_picks_note(run: dict) -> list[str]:
    """Lines naming the problems whose default pick changed since ``run`` timed them
    (:func:`pearl_moe.bench.compare.changed_picks`; ``bench --resume --remeasure-changed``
    times them again), or none."""
    from ..bench.compare import changed_picks

    changed = changed_picks(run)
    if not changed:
        return []
    return [
        "",
        f"Picks changed since this run ({len(changed)}; their times above are of the "
        "configuration the run timed): "
        + "; ".join(f"{c['problem']}: {c['timed']} -> {c['now']}" for c in changed)
        + ".",
    ]


def render_layer_table(results_root: Path | None = None, gpu: str = "H200") -> str:
    """The whole MoE layer forward (``python -m pearl_moe layer``): per problem the fused layer's
    time against its floor and its ratio to each other implementation (paired round by round),
    then the layer benchmark's goals, met or not, judged on the committed run."""
    from ..bench import layer
    from ..results import run_path

    root = results_root or ROOT / "results"
    run = layer.load_layer_run(gpu, root)
    if run is None:
        return (
            f"_No layer run recorded for {gpu} yet (`bash scripts/layer_runs.sh` on the GPU): "
            "no layer time is claimed here._"
        )
    s = layer.layer_summary(run)
    ours, others = s["ours"], s["impls"][1:]
    env = run["env"]
    lines = [
        _measured_on(env, gpu, run_path(gpu, "moe_layer", root))
        + ": the whole layer forward (routing metadata, gather, gate+up, activation, down, "
        f"combine) in CUDA graphs, interleaved rounds. `{ours}` is ours with the activation in "
        "the gate+up epilogue where `autotune.fuse_activation` says so (else as a pass of its "
        "own); the floor moves both weight sets of the active experts and the "
        "activations at the run's read ceiling. Ratio = ours / theirs (below 1: ours is faster).",
        "",
        "| model | tokens | routing | floor us | "
        + " | ".join([ours, *others])
        + " | "
        + " | ".join(f"vs {o}" for o in others)
        + " |",
        "|---|---|---|---|" + "---|" * (1 + 2 * len(others)),
    ]
    for r in s["rows"]:
        times = []
        for impl in [ours, *others]:
            us = r["us"].get(impl)
            cell = "-" if us is None else f"{us:.1f}"
            if impl == ours and "of_floor" in r:
                cell += f" ({r['of_floor']:.3f}x)"
            times.append(cell)
        ratios = [f"{r['vs'][o]['ratio']:.3f}" if o in r["vs"] else "-" for o in others]
        floor = f"{r['floor_us']:.1f}" if r["floor_us"] else "-"
        lines.append(
            f"| {r['model']} | {r['tokens']} | {r['routing']} | {floor} | "
            + " | ".join(times + ratios)
            + " |"
        )
    g, met = s["goals"], s["goals"]["met"]

    def verdict(key):
        return {True: "met", False: "**not met**", None: "not judged (no data)"}[met[key]]

    def num(value, fmt):
        return "-" if value is None else format(value, fmt)

    lines += [
        "",
        f"Goals: at decode (up to {layer.DECODE_TOKENS} tokens per GPU) within {layer.FLOOR_GOAL:.2f}x the "
        f"floor: worst {num(g['decode_worst_of_floor'], '.3f')}x, {verdict('floor')}; "
        f"against quack's composition a geomean of at most {layer.QUACK_GEOMEAN_GOAL:.2f} and no shape "
        f"above {layer.TIE:.2f}: geomean {num(g['quack_geomean'], '.3f')}, worst "
        f"{num(g['quack_worst'], '.3f')}, {g['quack_above_tie']} of {g['quack_shapes']} above, "
        f"{verdict('quack')}; at decode at least {layer.TORCH_GOAL:.1f}x faster than the torch "
        f"composition: {num(g['decode_speedup_over_torch'], '.2f')}x, {verdict('torch')}.",
    ]
    unreached = g["missing"] + list(env.get("skipped_problems") or [])
    if unreached:
        lines += ["", f"Not measured in this run ({len(unreached)}): " + ", ".join(unreached) + "."]
    sonic = layer.load_layer_run(gpu, root, "moe_layer_sonic")
    if sonic is not None:
        lines += ["", *_sonic_lines(run, sonic, ours, run_path(gpu, "moe_layer_sonic", root))]
    return "\n".join(lines)


def _sonic_lines(run: dict, sonic: dict, ours: str, path: Path) -> list[str]:
    """SonicMoE's layer, timed in a run of its own (its pinned CuTe DSL and quack), beside ours:
    a ratio across two runs, labeled as such."""
    from ..bench import layer
    from ..bench.compare import geomean

    rows = layer.cross_run_ratios(run, sonic, "sonic", ours)
    if not rows:
        return []
    env = sonic["env"]
    version = next((r["config"].get("sonic_moe") for r in sonic["records"]
                    if r.get("config", {}).get("sonic_moe")), "?")  # fmt: skip
    lines = [
        f"SonicMoE {version} (`results/{path.parent.name}/{path.name}`), timed in a run of its "
        f"own on an {env.get('gpu', '?').replace('NVIDIA ', '')} ({str(env.get('date', '?'))[:10]}; "
        f"CuTe DSL {env.get('cutlass_dsl')}, quack {env.get('quack')}, torch {env.get('torch')}), "
        "with the same problems, inputs, checks and timing; its read and bf16 ceilings were "
        f"{rows[0]['read_ceiling_ratio']:.3f}x and {rows[0]['bf16_ceiling_ratio']:.3f}x this "
        "run's. A ratio across two runs: medians, not paired round by round, so it resolves a "
        "few percent, not the 2% of a ratio within one run.",
        "",
        "| model | tokens | routing | sonic us | ours / sonic (across runs) |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r['model']} | {r['tokens']} | {r['routing']} | {r['theirs_us']:.1f} | "
              f"{r['ratio']:.3f} |" for r in rows]  # fmt: skip
    ratios = [r["ratio"] for r in rows]
    worst = max(rows, key=lambda r: r["ratio"])
    lines += ["", f"Against SonicMoE over {len(rows)} problems: geomean {geomean(ratios):.3f}, "
              f"worst {worst['ratio']:.3f} ({worst['model']}, {worst['tokens']} tokens, "
              f"{worst['routing']})."]  # fmt: skip
    return lines


def render_ceilings_table(results_root: Path | None = None) -> str:
    """Every committed run's read ceiling: the probes' rate, and where a kernel of the run moved
    its bytes faster, the rate it demonstrated (which then is the ceiling, so that kernel sits at
    100% of its floor by construction). From each run file's ``ceilings``."""
    from ..results import list_runs, read_run
    from .measurements import current_names

    rows = []
    if results_root is not None and not Path(results_root).is_dir():
        return "_No run committed under results/._"
    for entry in list_runs(results_root):
        c = read_run(entry["path"])["ceilings"]
        probe = c.get("read_probe_bytes_per_s", c["read_bytes_per_s"])
        raised = c["read_bytes_per_s"] > probe
        source = str(c.get("read_ceiling_source", ""))
        m = re.search(r"rate (\S+) on ([^|]+)\|(\w+)\|(\d+)\|", source)
        who = "the probes"
        if raised:
            who = f"{m[1]} on {m[2]}, {m[3].replace('_', '+')}, {m[4]} tokens" if m else source
            who = current_names(who)
        rows.append(
            f"| {entry['gpu_dir']} | `{entry['path'].name}` | {probe / 1e12:.2f} | "
            f"{c['read_bytes_per_s'] / 1e12:.2f} | {who} |"
        )
    if not rows:
        return "_No run committed under results/._"
    return "\n".join(
        [
            "| GPU | run | read probes TB/s | read ceiling TB/s | ceiling set by |",
            "|---|---|---:|---:|---|",
            *rows,
        ]
    )


#: The headline's rows: (which layers, tokens per GPU in words, the set of the run's rows, a test
#: on a row). Plain words only: the configurations are in docs/tuning.md.
HEADLINE_GROUPS = (
    ("the course's three models", "1-256 (decode)", "course",
     lambda r: r["tokens"] <= 256 and r["routing"] == "balanced"),
    ("the course's three models", "64, skewed routing", "course",
     lambda r: r["routing"] == "skewed"),
    ("the course's three models", "1024", "course", lambda r: r["tokens"] == 1024),
    ("the course's three models", "4096 (prefill)", "course", lambda r: r["tokens"] == 4096),
    ("{models} models no one tuned for", "1-16 (decode)", "held-out",
     lambda r: r["tokens"] <= 256),
    ("{models} models no one tuned for", "512", "held-out", lambda r: r["tokens"] == 512),
    ("{models} models no one tuned for", "4096 (prefill)", "held-out",
     lambda r: r["tokens"] == 4096),
)  # fmt: skip

#: Baselines in words, for the headline.
BASELINE_WORDS = {
    "triton": "Triton",
    "grouped_mm": "torch `grouped_mm`",
    "loop": "a cuBLAS loop",
    "quack": "quack's default",
    "quack-tuned": "quack tuned",
    "flashinfer": "FlashInfer",
}


def _pct(values: list[float]) -> str:
    from ..bench.compare import geomean

    return f"{100 * geomean([v / 100 for v in values]):.0f}%"


def _course_run_note(general: dict, root: Path, gpu: str) -> list[str]:
    """How the headline's course rows relate to the course's own run (``compare``, notebook 08a):
    its baselines, its geomeans, and what differs at 1024 tokens; every number from the two
    runs."""
    from ..bench.compare import compare_summary, geomean
    from ..results import load_run, run_path

    try:
        run = load_run(gpu, "compare", root)
    except FileNotFoundError:
        return []
    course = compare_summary(run)
    rows = [r for r in course["rows"] if "ratio" in r]
    at = {r["problem"]: r for r in rows if r["tokens"] == 1024}
    if not rows or not at:
        return []
    timed = {(r["problem"], r["impl"]) for r in run["records"] if r["status"] == "ok"}
    absent = [b for b in course["baselines"] if any((pid, b) not in timed for pid in at)]
    here = [g for g in general["rows"] if g["problem"] in at and "ratio" in g]
    baselines = [BASELINE_WORDS.get(b, b) for b in course["baselines"]]
    text = (
        f"Notebook 08a teaches the course's own run (`results/{gpu}/"
        f"{run_path(gpu, 'compare', root).name}`): the same {len(rows)} shapes of the course's "
        "models in another run, against " + ", ".join(baselines[:-1]) + f" and {baselines[-1]}; "
        f"ratio {geomean([r['ratio'] for r in rows]):.2f} ({max(r['ratio'] for r in rows):.2f}) "
        f"over them all, {geomean([r['ratio'] for r in at.values()]):.2f} "
        f"({max(r['ratio'] for r in at.values()):.2f}) at 1024 tokens."
    )
    if absent and here:
        fastest = sum(g["best"] in absent for g in here)
        again = [g["ours_us"] / at[g["problem"]]["ours_us"] for g in here]
        same = all(g.get("ours_config") == at[g["problem"]].get("ours_config") for g in here)
        text += (
            f" At 1024 tokens that run has no {' or '.join(BASELINE_WORDS.get(b, b) for b in absent)}"
            " (the fastest baseline of this run on "
            + (f"all {len(here)}" if fastest == len(here) else f"{fastest} of those {len(here)}")
            + " shapes), and "
            f"the default call took {min(again):.2f}-{max(again):.2f}x as long here as there"
            + (" with the same configurations" if same else "")
            + ": "
            "times move between runs (notebook A1), so a ratio compares only within its run."
        )
    return ["", text]


def render_headline_table(results_root: Path | None = None, gpu: str = "H200") -> str:
    """The README's speed table, in plain words: the default call against the fastest tuned
    baseline on each shape, grouped by tokens per GPU, on the course's models and on models no one
    tuned for, all from one run (``compare_general``; without it, the course's ``compare`` run),
    then the whole layer in one sentence. Geomeans over each group's shapes; nothing typed by
    hand."""
    from ..bench.compare import compare_summary, geomean
    from ..results import load_run, run_path

    root = results_root or ROOT / "results"
    run = kind = None
    for kind in ("compare_general", "compare"):
        try:
            run = load_run(gpu, kind, root)
            break
        except FileNotFoundError:
            continue
    if run is None:
        return f"_No `compare` run recorded for {gpu} yet (`python -m pearl_moe bench --kind compare`)._"
    s = compare_summary(run)
    gpu_name = run["env"].get("gpu", gpu).replace("NVIDIA ", "")
    baselines = [BASELINE_WORDS.get(b, b) for b in s["baselines"]]
    lines = [
        f"Measured on the {gpu_name} in one run (`results/{gpu}/{run_path(gpu, kind, root).name}`"
        "; CUDA graphs, interleaved rounds): the default call against the fastest of "
        + ", ".join(baselines[:-1])
        + f" and {baselines[-1]} on each shape. % of floor: the floor (the time the run's "
        "measured read and compute ceilings allow) over the time; 100% is the floor. Ratio: "
        "default call / fastest baseline, geomean over the shapes, in brackets the worst shape "
        "(below 1: ours is faster).",
        "",
        "| layers | tokens per GPU | shapes | default call, % of floor | fastest baseline, "
        "% of floor | ratio (worst) |",
        "|---|---|---:|---:|---:|---|",
    ]
    for label, tokens, part, test in HEADLINE_GROUPS:
        every = [r for r in s["rows"] if r.get("set", "course") == part]
        rows = [r for r in every if "ratio" in r and test(r)]
        if not rows:
            continue
        lines.append(
            f"| {label.format(models=len({r['model'] for r in every}))} | {tokens} | {len(rows)} | "
            f"{_pct([r['ours_pct_floor'] for r in rows])} | "
            f"{_pct([r['best_pct_floor'] for r in rows])} | "
            f"{geomean([r['ratio'] for r in rows]):.2f} ({max(r['ratio'] for r in rows):.2f}) |"
        )
    if kind == "compare_general":
        lines += _course_run_note(s, root, gpu)
    try:
        from ..bench import layer

        layer_run = layer.load_layer_run(gpu, root)
        goals = layer.layer_summary(layer_run)["goals"] if layer_run is not None else {}
    except Exception:  # noqa: BLE001 - the layer's sentence is optional
        goals = {}
    if goals.get("quack_geomean") and goals.get("decode_speedup_over_torch"):
        lines += [
            "",
            f"The whole MoE layer (routing to combine, the course's models) takes "
            f"{goals['quack_geomean']:.2f}x the time of the same layer on quack's GEMMs (geomean "
            f"over {goals['quack_shapes']} problems) and is "
            f"{goals['decode_speedup_over_torch']:.2f}x faster than the torch composition at "
            f"decode (`results/{gpu}/{run_path(gpu, 'moe_layer', root).name}`).",
        ]
    return "\n".join(lines)


#: The options the tuner offers, as the tuned tables use them: (what it is, in words; the
#: configuration code of ``GemmConfig.describe``; a test on an entry's configuration).
TABLE_OPTIONS = (
    ("tiles of 8-32 rows (below the post's 64)", "8x…, 16x…, 32x…", lambda c: c["tile_m"] < 64),
    ("64-row tiles (stage 5)", "64x…", lambda c: c["tile_m"] == 64),
    ("128-row tiles", "128x…", lambda c: c["tile_m"] == 128),
    ("256-row tiles (two consumer warpgroups of 128 rows)", "256x…", lambda c: c["tile_m"] == 256),
    ("direct store from registers (stage 4)", "direct",
     lambda c: c["epilogue"] == "direct_store"),
    ("TMA-store epilogue", "tma", lambda c: c["epilogue"] != "direct_store"),
    ("B ring entries of two K tiles (stage 6)", "B2", lambda c: c.get("b_k_tiles", 1) == 2),
    ("two accumulators, consumer warpgroups taking turns (stage 7)", "pingpong",
     lambda c: c.get("acc_slots", 1) == 2),
    ("of them 128 × 192 tiles", "128x192x64 … pingpong",
     lambda c: c.get("acc_slots", 1) == 2 and (c["tile_m"], c.get("tile_n")) == (128, 192)),
    ("256 × 192 tiles", "256x192x64", lambda c: (c["tile_m"], c.get("tile_n")) == (256, 192)),
    ("A boxes kept inside A", "shiftA", lambda c: c.get("shift_a_box")),
    ("swapped operands", "swapAB", lambda c: c.get("swap_ab")),
    ("the scheduler's serial walk", "serialwalk",
     lambda c: c.get("walk", "warp-parallel") != "warp-parallel"),
    ("clusters of two CTAs along N (A shared by multicast)", "clusterN2",
     lambda c: c.get("cluster_n", 1) == 2),
    ("clusters of two CTAs along M (B shared by multicast)", "clusterM2",
     lambda c: c.get("cluster_m", 1) == 2),
    ("grouped tile order", "ng…", lambda c: c.get("n_group")),
)  # fmt: skip


def _entry_tokens(entry: dict) -> int | None:
    m = re.search(r"(\d+) tokens", str(entry.get("measured_at", "")))
    return int(m.group(1)) if m else None


def render_options_table(tables: dict[str, dict] | None = None) -> str:
    """How often each option the tuner offers is the pick of a tuned table's entries (each GPU's
    ``pearl_moe/tuning/<GPU>.json``), at decode (up to 256 tokens per GPU) and beyond: the counts
    docs/tuning.md quotes, never typed by hand."""
    import json

    if tables is None:  # the committed files, whatever $PEARL_MOE_TUNING says
        tables = {}
        for gpu in ("H200", "H100"):
            path = Path(__file__).resolve().parents[1] / "tuning" / f"{gpu}.json"
            if path.is_file():
                tables[gpu] = json.loads(path.read_text())
    if not tables:
        return "_No tuned table committed._"
    split = {}
    for gpu, table in tables.items():
        entries = table["entries"]
        decode = [e for e in entries if (_entry_tokens(e) or 0) <= 256]
        split[gpu] = (decode, [e for e in entries if e not in decode])
    head = "| option | code |" + "".join(
        f" {gpu}: decode ({len(d)}) | {gpu}: 512 tokens and more ({len(p)}) |"
        for gpu, (d, p) in split.items()
    )
    lines = [
        "Entries of each GPU's tuned table (`pearl_moe/tuning/<GPU>.json`) whose pick uses the "
        "option, at decode (up to 256 tokens per GPU) and beyond (in the header: how many "
        "entries each part has). A pick uses several options at once.",
        "",
        head,
        "|---|---|" + "---:|---:|" * len(split),
    ]
    for words, code, test in TABLE_OPTIONS:
        cells = [str(sum(1 for e in part if test(e["config"]))) for d, p in split.values()
                 for part in (d, p)]  # fmt: skip
        lines.append(f"| {words} | `{code}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The generated blocks of each page, by the page's path in the repository: ``python -m pearl_moe
#: figures`` rewrites each between its ``<!-- NAME:begin -->`` / ``<!-- NAME:end -->`` markers
#: (the figure list of ``docs/figures.md`` is :mod:`pearl_moe.course.figures`' own block).
DOC_BLOCKS: dict[str, dict] = {
    "README.md": {"stages": render_stage_table, "headline": render_headline_table},
    "docs/performance.md": {
        "steps": render_steps_table,
        "ceilings": render_ceilings_table,
        "compare": render_compare_table,
        "speed": render_speed_table,
    },
    "docs/tuning.md": {
        "general": render_general_table,
        "general-h100": lambda: render_general_table(gpu="H100"),
        "options": render_options_table,
    },
    "docs/moe_layer.md": {"layer": render_layer_table},
}


def block_text(text: str, name: str) -> str | None:
    """The body of ``text``'s ``<!-- name:begin -->`` ... ``<!-- name:end -->`` block, or None."""
    m = re.search(
        rf"<!-- {re.escape(name)}:begin -->\n(.*?)<!-- {re.escape(name)}:end -->", text, re.S
    )
    return m.group(1) if m else None


def update_doc(path: Path, blocks: dict) -> bool:
    """Rewrite the generated ``blocks`` (``{marker: renderer}``) of the page at ``path``; True when
    it changed. A page without one of the markers is an error (the block would silently rot)."""
    text = new = path.read_text()
    for name, render in blocks.items():
        block = re.compile(
            rf"(<!-- {re.escape(name)}:begin -->\n)(.*?)(<!-- {re.escape(name)}:end -->)", re.S
        )
        if not block.search(new):
            raise ValueError(f"{path} has no <!-- {name}:begin --> ... <!-- {name}:end --> block")
        body = render()
        new = block.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(3), new)
    if new != text:
        path.write_text(new)
    return new != text


def update_docs(root: Path | None = None) -> list[Path]:
    """Rewrite every page's generated blocks (:data:`DOC_BLOCKS`); the pages that changed."""
    root = root or ROOT
    return [root / page for page, blocks in DOC_BLOCKS.items() if update_doc(root / page, blocks)]


def dsl_available() -> bool:
    """Whether CuTe DSL (nvidia-cutlass-dsl) can be imported here."""
    return importlib.util.find_spec("cutlass") is not None
