"""Helpers the course notebooks share: where we run, kernel source, replayed results, a few plots.

The notebooks stay thin: they import a stage from :mod:`pearl_moe.kernels`, and this module does
the chores around it.

* **Where are we?** :func:`detect_machine` tells a live Blackwell GPU (the sm_100a kernels run), a
  live Hopper GPU (the sm_90a twins run) and a machine without a usable GPU (measurements are
  replayed from ``results/``; Blackwell latency comes from :mod:`pearl_moe.perfmodel`).
* **Show the code that matters.** :func:`show_source` displays one method of a stage with syntax
  highlighting, :func:`show_pair` puts the Blackwell method next to its Hopper counterpart and
  :func:`show_diff` shows what one stage changed in a method of the previous one. Targets are
  ``"module:Qual.name"`` strings, read from the file with :mod:`ast`, so showing code never
  imports CuTe DSL (nor picks its compile target) in the notebook's process.
* **Say where a number comes from.** :func:`load_kernel_results` reads the H200 runs of our
  kernels written by the benchmark harness (``results/H200/stages.json`` and
  ``results/H200/stage_sweep.json``, ``python -m pearl_moe bench``); :func:`kernel_rows`,
  :func:`stage_series`, :func:`correctness_summary` and :func:`stage_sweep` read their records
  through :mod:`pearl_moe.replay`; :func:`describe_run` says what the run was measured on and
  :func:`measurement_source` turns it into a label: "live on ...", "replayed from ... (measured
  <date> on <GPU>)" or "no recorded measurement yet".
* **Run live.** :func:`stage_impl` wraps a stage as a :class:`pearl_moe.bench.harness.Implementation`,
  so the notebooks check and time it with the same harness as the baselines.
* **Emulate the clipped stores.** :func:`simulate_tile_stores` replays, in NumPy, the bounds rule
  of the TMA store for each way a kernel can describe the output, to show which rows each tile
  writes.
"""

from __future__ import annotations

import ast
import difflib
import html
import importlib.util
import inspect
import os
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .config import LEGACY_FIELD_NAMES
from .hardware import GpuSpec, get_gpu

__all__ = [
    "ROOT",
    "Machine",
    "SourceView",
    "detect_machine",
    "get_source",
    "show_source",
    "show_pair",
    "source_diff",
    "diff_stats",
    "show_diff",
    "sass_by_kernel",
    "families_table",
    "STAGE_IMPLS",
    "results_path",
    "load_kernel_results",
    "measurement_source",
    "measured_date",
    "describe_run",
    "kernel_rows",
    "stage_series",
    "floor_series",
    "correctness_summary",
    "stage_sweep",
    "baseline",
    "can_run_live",
    "stage_impl",
    "simulate_tile_stores",
    "plot_stage_sweep",
    "plot_latency_bars",
]

ROOT = Path(__file__).resolve().parent.parent
#: Set to "cpu" to replay results even where a GPU is present (used by tests and curious readers).
FORCE_ENV = "PEARL_MOE_MACHINE"


# ---------------------------------------------------------------------------- the machine
@dataclass(frozen=True)
class Machine:
    """What this process can run: ``mode`` is ``"blackwell"``, ``"hopper"`` or ``"cpu"``."""

    mode: str
    gpu_name: str | None = None
    capability: tuple[int, int] | None = None
    spec: GpuSpec | None = None

    @property
    def live(self) -> bool:
        """True when our kernels can run here (a Blackwell or Hopper GPU)."""
        return self.mode in ("blackwell", "hopper")

    @property
    def arch(self) -> str | None:
        return {"blackwell": "sm_100a", "hopper": "sm_90a"}.get(self.mode)

    def describe(self) -> str:
        if self.mode == "blackwell":
            return (
                f"live Blackwell GPU ({self.gpu_name}, sm_{self.capability[0]}{self.capability[1]}):"
                " the sm_100a kernels run here"
            )
        if self.mode == "hopper":
            return (
                f"live Hopper GPU ({self.gpu_name}, sm_{self.capability[0]}{self.capability[1]}): "
                "the sm_90a twins run here; Blackwell latency comes from the performance model"
            )
        why = f"{self.gpu_name} is neither Hopper nor Blackwell" if self.gpu_name else "no GPU"
        return (
            f"CPU replay ({why}): kernels are compiled, not run; measurements are replayed from "
            "results/ and Blackwell latency comes from the performance model"
        )


def detect_machine(force: str | None = None) -> Machine:
    """Look at the CUDA device torch sees (if any) and say which of the three cases we are in.

    ``force="cpu"`` (or the environment variable ``PEARL_MOE_MACHINE=cpu``) pretends there is no
    GPU, which replays recorded results even on a GPU machine.
    """
    force = force or os.environ.get(FORCE_ENV)
    if force not in (None, "", "cpu", "auto"):
        raise ValueError(f"force must be 'cpu' or 'auto', got {force!r}")
    if force == "cpu":
        return Machine("cpu")
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return Machine("cpu")
    if not torch.cuda.is_available():
        return Machine("cpu")
    name = torch.cuda.get_device_name()
    cap = tuple(torch.cuda.get_device_capability())
    try:
        spec = get_gpu(name)
    except ValueError:
        spec = None
    mode = {9: "hopper", 10: "blackwell"}.get(cap[0], "cpu")
    return Machine(mode, name, cap, spec)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- source code
def _module_file(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no module {module!r}", name=module)
    return Path(spec.origin)


def _find_node(tree: ast.Module, qualname: str):
    body = tree.body
    node = None
    for part in qualname.split("."):
        node = next(
            (
                n
                for n in body
                if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and n.name == part
            ),
            None,
        )
        if node is None:
            return None
        body = node.body
    return node


def get_source(target, method: str | None = None) -> tuple[str, str]:
    """``(source, where)`` of a class, function or method.

    ``target`` is ``"package.module:Qual.name"`` (read with :mod:`ast`, nothing is imported), or a
    Python object (class, function, module) read with :mod:`inspect`. ``method`` names a method of
    the target class. ``where`` is ``"path/relative/to/repo.py:line"``.
    """
    if isinstance(target, str):
        module, _, qualname = target.partition(":")
        if method:
            qualname = f"{qualname}.{method}" if qualname else method
        path = _module_file(module)
        text = path.read_text()
        if not qualname:
            return text, _where(path, 1)
        node = _find_node(ast.parse(text), qualname)
        if node is None:
            raise LookupError(
                f"{module} has no {qualname!r} (it may be inherited: name the class that defines it)"
            )
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        lines = text.splitlines()[first - 1 : node.end_lineno]
        return textwrap.dedent("\n".join(lines)), _where(path, first)
    obj = getattr(target, method) if method else target
    obj = inspect.unwrap(getattr(obj, "__func__", obj))
    lines, first = inspect.getsourcelines(obj)
    return textwrap.dedent("".join(lines)).rstrip("\n"), _where(
        Path(inspect.getsourcefile(obj)), max(first, 1)
    )


def _where(path: Path, line: int) -> str:
    try:
        shown = path.resolve().relative_to(ROOT)
    except ValueError:
        shown = path
    return f"{shown}:{line}"


def _highlight(code: str, lexer: str = "python") -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import get_lexer_by_name
    except ImportError:  # pragma: no cover - pygments comes with Jupyter
        return f"<pre>{html.escape(code)}</pre>"
    formatter = HtmlFormatter(noclasses=True, style="default", nowrap=False)
    return highlight(code, get_lexer_by_name(lexer), formatter)


_BOX = (
    "<div style='flex:1; min-width:0; overflow-x:auto; font-size:85%; border:1px solid #ddd;"
    " padding:0 0.5em'>"
)


class SourceView:
    """Code shown in a notebook: highlighted HTML in Jupyter, plain text everywhere else."""

    def __init__(self, panels: Sequence[tuple[str, str]], lexer: str = "python"):
        self.panels = list(panels)  # (title, code)
        self.lexer = lexer

    @property
    def code(self) -> str:
        return "\n\n".join(code for _, code in self.panels)

    def _repr_html_(self) -> str:
        boxes = [
            f"{_BOX}<p style='margin:0.3em 0'><b>{html.escape(title)}</b></p>"
            f"{_highlight(code, self.lexer)}</div>"
            for title, code in self.panels
        ]
        return (
            f"<div style='display:flex; gap:0.8em; align-items:flex-start'>{''.join(boxes)}</div>"
        )

    def __repr__(self) -> str:
        return "\n\n".join(f"# --- {title}\n{code}" for title, code in self.panels)


def show_source(target, method: str | None = None, title: str | None = None) -> SourceView:
    """One method (or class, function) with syntax highlighting, titled with its file and line."""
    code, where = get_source(target, method)
    return SourceView([(f"{title} — {where}" if title else where, code)])


def show_pair(
    left, right, titles: Sequence[str] = ("Blackwell (sm_100a)", "Hopper (sm_90a)")
) -> SourceView:
    """Two pieces of code side by side: by default the Blackwell method, then its Hopper twin.

    ``left`` and ``right`` are targets as for :func:`get_source` (or ``(target, method)`` pairs).
    """
    panels = []
    for title, item in zip(titles, (left, right), strict=True):
        target, method = item if isinstance(item, tuple) else (item, None)
        code, where = get_source(target, method)
        panels.append((f"{title} — {where}", code))
    return SourceView(panels)


def source_diff(old, new, context: int = 3) -> str:
    """Unified diff from ``old`` to ``new`` (targets as for :func:`get_source`)."""
    panels = []
    for item in (old, new):
        target, method = item if isinstance(item, tuple) else (item, None)
        panels.append(get_source(target, method))
    (a, where_a), (b, where_b) = panels
    return "".join(
        difflib.unified_diff(
            a.splitlines(keepends=True),
            b.splitlines(keepends=True),
            fromfile=where_a,
            tofile=where_b,
            n=context,
        )
    )


def diff_stats(diff: str) -> tuple[int, int]:
    """``(added, removed)`` lines of a unified diff (headers not counted)."""
    added = sum(1 for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---"))
    return added, removed


def show_diff(old, new, context: int = 3, title: str | None = None) -> SourceView:
    """What changed between two stages' versions of a method, as a highlighted unified diff."""
    diff = source_diff(old, new, context)
    added, removed = diff_stats(diff)
    head = title or "diff"
    return SourceView([(f"{head}: +{added} / -{removed} lines", diff or "(identical)\n")], "diff")


# ---------------------------------------------------------------------------- SASS
def sass_by_kernel(sass: str) -> dict[str, Counter]:
    """Opcode counts of every kernel function in a SASS listing (a module may hold several).

    Keys are the function names with CuTe DSL's long suffixes cut to something readable.
    """
    from .inspect import count_opcodes

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

    ``reports`` maps a label to a :class:`~pearl_moe.inspect.KernelReport` or to a dict of family
    counts (e.g. ``count_families`` of one kernel from :func:`sass_by_kernel`).
    """
    from .inspect import FAMILIES

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


# ---------------------------------------------------------------------------- recorded results
#: Stage number -> the bench implementation name of that stage (``python -m pearl_moe bench``).
STAGE_IMPLS = {1: "pearl-s1", 2: "pearl-s2", 3: "pearl-s3"}


def results_path(name: str = "stages.json", gpu: str = "H200", root: Path | None = None):
    """``results/<gpu>/<name>`` in the repository (it may not exist yet)."""
    return (root or ROOT / "results") / gpu / name


def load_kernel_results(
    path: str | Path | None = None,
    gpu: str = "H200",
    kind: str = "stages",
    root: Path | None = None,
) -> dict | None:
    """The recorded H200 run of our kernels, or None when there is none yet.

    The file is a benchmark-harness run (``python -m pearl_moe bench --kind <kind>``, schema in
    :mod:`pearl_moe.bench.records`): ``results/<gpu>/stages.json`` (stages 1-3 and the torch
    baselines over the models and batch sizes) or ``results/<gpu>/stage_sweep.json`` (stage 3 at
    several pipeline depths and tile shapes). It is read with :func:`pearl_moe.bench.records.read_run`,
    which raises on a file that breaks the schema; only a missing file gives None. The path is added
    under ``_path`` so labels can name it.
    """
    from .bench.records import read_run

    path = Path(path) if path is not None else results_path(f"{kind}.json", gpu, root)
    if not path.exists():
        return None
    run = read_run(path)
    run["_path"] = str(path)
    return run


def measured_date(run: Mapping | None) -> str | None:
    """The day a recorded run was measured (``YYYY-MM-DD``), if it says."""
    if not run:
        return None
    date = (run.get("env") or {}).get("date")
    return str(date)[:10] if date else None


def describe_run(run: Mapping | None) -> str:
    """What a recorded run was measured on, from its ``env`` and ``ceilings``: GPU, date, clocks
    (as nvidia-smi read them at the start of the run), driver, CUDA, library versions, ceilings."""
    if not run:
        return "no recorded measurement yet"
    env = run.get("env") or {}
    parts = [f"{env.get('gpu', 'an unnamed GPU')}, measured {measured_date(run) or '?'}"]
    clocks = env.get("clocks") or {}
    if "sm_clock_mhz" in clocks:
        sm = f"SM {clocks['sm_clock_mhz']} MHz"
        if clocks.get("sm_clock_max_mhz"):
            sm += f" (max {clocks['sm_clock_max_mhz']})"
        mem = ""
        if clocks.get("mem_clock_mhz"):
            mem = f", memory {clocks['mem_clock_mhz']} MHz"
            if clocks.get("mem_clock_max_mhz"):
                mem += f" (max {clocks['mem_clock_max_mhz']})"
        parts.append(f"clocks {sm}{mem}, read by {clocks.get('source', 'an unrecorded method')}")
    versions = [
        f"{label} {env[key]}"
        for key, label in (
            ("driver", "driver"),
            ("cuda", "CUDA"),
            ("torch", "torch"),
            ("cutlass_dsl", "CUTLASS DSL"),
        )
        if env.get(key)
    ]
    if versions:
        parts.append(", ".join(versions))
    ceilings = run.get("ceilings") or {}
    if ceilings.get("read_bytes_per_s") and ceilings.get("bf16_flops_per_s"):
        parts.append(
            f"measured ceilings: read {ceilings['read_bytes_per_s'] / 1e12:.2f} TB/s, "
            f"bf16 {ceilings['bf16_flops_per_s'] / 1e12:.0f} TFLOP/s"
        )
    return "; ".join(parts)


def _rel(path) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def measurement_source(
    data: Mapping | None = None, machine: Machine | None = None, expected: str | Path | None = None
) -> str:
    """Where the latencies shown next come from, in words.

    ``"live on <GPU>"`` when ``machine`` is live, ``"replayed from <file> (measured <date> on
    <GPU>)"`` when a recorded run ``data`` is given, ``"no recorded measurement yet (<file> is
    missing)"`` otherwise.
    """
    if machine is not None and machine.live:
        return f"live on {machine.gpu_name}"
    if data:
        gpu = (data.get("env") or {}).get("gpu", "an unnamed GPU")
        when = measured_date(data) or "on an unrecorded date"
        return f"replayed from {_rel(data.get('_path', '?'))} (measured {when} on {gpu})"
    expected = expected or results_path()
    return f"no recorded measurement yet ({_rel(expected)} is missing)"


def _impl_name(stage_or_impl) -> str:
    return STAGE_IMPLS.get(stage_or_impl, str(stage_or_impl))


def kernel_rows(
    data: Mapping | None, model: str | None = None, impl=None, routing: str | None = None
) -> list[dict]:
    """Rows of a recorded run (:func:`pearl_moe.replay.run_rows`, every status), optionally of one
    model, implementation (a stage number or a bench name) and routing."""
    from . import replay

    if not data:
        return []
    if impl is not None:
        impl = [_impl_name(i) for i in ([impl] if isinstance(impl, int | str) else impl)]
    return replay.run_rows(dict(data), model=model, impl=impl, routing=routing, ok_only=False)


def stage_series(
    data: Mapping | None, model: str, impl, routing: str = "balanced"
) -> list[tuple[int, float]]:
    """``(tokens per GPU, seconds)`` of one implementation (stage number or bench name, e.g. 2 or
    ``"grouped_mm"``) on ``model``: the median times of the records that passed their check."""
    return sorted(
        (r["tokens_per_gpu"], r["median_us"] * 1e-6)
        for r in kernel_rows(data, model, impl, routing)
        if r["status"] == "ok"
    )


def floor_series(
    data: Mapping | None, model: str, routing: str = "balanced"
) -> list[tuple[int, float]]:
    """``(tokens per GPU, seconds)`` of the floor of each recorded problem of ``model``."""
    return sorted(
        {
            (r["tokens_per_gpu"], r["floor_us"] * 1e-6)
            for r in kernel_rows(data, model, routing=routing)
            if r.get("floor_us")
        }
    )


def _verdict(row: dict | None) -> str:
    if row is None:
        return "not recorded"
    if row["status"] == "ok":
        return "pass"
    if row["status"] == "incorrect":
        return f"FAIL ({row.get('check_message') or 'wrong values'})"
    return f"not checked ({row['status']}: {row.get('error') or 'no detail'})"


def correctness_summary(
    data: Mapping | None, stages: Sequence = (1, 2, 3), model: str | None = None
) -> list[str]:
    """One line per recorded problem: the outcome of the check run before timing (fresh random
    inputs, NaN-poisoned output, compared with a float32 reference) for each of ``stages`` (stage
    numbers or bench implementation names), from the records' ``correctness`` and ``status``."""
    impls = [_impl_name(s) for s in stages]
    by_problem: dict[tuple, dict[str, dict]] = {}
    for r in kernel_rows(data, model, impls):
        key = (r["model"], r["tokens_per_gpu"], r["routing"], r["rows"])
        by_problem.setdefault(key, {})[r["impl"]] = r
    lines = []
    for (mdl, tokens, routing, rows), got in by_problem.items():
        marks = []
        for impl in impls:
            row = got.get(impl)
            mark = f"{impl}: {_verdict(row)}"
            if row is not None and row["status"] == "ok":
                mark += f" (max |err| {row['max_abs_err']:.2g})"
            marks.append(mark)
        lines.append(
            f"{mdl:>16}, {tokens:>4} tokens/GPU {routing:<8} ({rows} rows): " + ", ".join(marks)
        )
    return lines


def stage_sweep(data: Mapping | None, tile_m: int | None = None) -> list[dict]:
    """Recorded stage-3 latencies at several pipeline depths (``stage_sweep.json``).

    One dict per record that passed its check, largest ``tile_m`` first, then by ring depth:
    ``ring_depth``, ``tile_m``, ``tile_n``, ``tile_k`` (from the record's ``config.gemm_config``), ``seconds``,
    ``floor_seconds``, ``pct_of_floor``, ``impl``, ``model``, ``tokens``.
    """
    out = []
    for r in kernel_rows(data):
        cfg = (r.get("config") or {}).get("gemm_config")
        if r["status"] != "ok" or not cfg:
            continue
        cfg = {LEGACY_FIELD_NAMES.get(key, key): value for key, value in cfg.items()}
        if tile_m is not None and cfg.get("tile_m") != tile_m:
            continue
        out.append(
            {
                "ring_depth": cfg["ring_depth"],
                "tile_m": cfg["tile_m"],
                "tile_n": cfg["tile_n"],
                "tile_k": cfg["tile_k"],
                "seconds": r["median_us"] * 1e-6,
                "floor_seconds": r["floor_us"] * 1e-6 if r.get("floor_us") else None,
                "pct_of_floor": r["pct_of_floor"],
                "impl": r["impl"],
                "model": r["model"],
                "tokens": r["tokens_per_gpu"],
            }
        )
    return sorted(out, key=lambda d: (-d["tile_m"], d["ring_depth"]))


def baseline(
    impl: str,
    model: str,
    tokens: int,
    routing: str = "balanced",
    gpu: str = "H200",
    kind: str = "baselines",
    root: Path | None = None,
) -> dict | None:
    """One recorded baseline time (``results/<gpu>/<kind>.json``, the bench schema), or None.

    Returns ``{"seconds", "floor_seconds", "pct_of_floor", "source"}``; ``source`` says which file
    and date it was replayed from.
    """
    from . import replay

    path = results_path(f"{kind}.json", gpu, root)
    if not path.exists():
        return None
    for r in replay.run_rows(path, model=model, impl=impl, routing=routing, tokens=tokens):
        return {
            "seconds": r["median_us"] * 1e-6,
            "floor_seconds": r["floor_us"] * 1e-6,
            "pct_of_floor": r["pct_of_floor"],
            "source": f"replayed from {_rel(path)} (measured {str(r['date'])[:10]} on {r['gpu']})",
        }
    return None


# ---------------------------------------------------------------------------- live runs
def can_run_live(arch: str, stage: int) -> tuple[bool, str]:
    """Whether ``stage`` has a launcher for ``arch`` here, and what a live run of it means.

    Imports the stage module (CuTe DSL: call it on a GPU machine only). The sm_90a stages have
    been run, verified and measured on an H200. The sm_100a stages implement ``compile_kernel``
    and ``launch`` too, so on a B200 :func:`pearl_moe.kernels.grouped_gemm` launches them, but
    they have only been compile-verified (on a CPU): they have never run on any GPU, and a live
    run on a B200 is their first test, checked against the float32 reference.
    """
    from .kernels.api import stage_module

    try:
        module = stage_module(arch, stage)
    except Exception as exc:  # noqa: BLE001 - any import problem means "not runnable here"
        return False, f"stage {stage} for {arch} does not import here ({type(exc).__name__}: {exc})"
    missing = [f for f in ("compile_kernel", "launch") if not hasattr(module, f)]
    if missing:
        return False, f"stage {stage} for {arch} has no {' / '.join(missing)} yet (compile-only)"
    if arch == "sm_100a":
        return True, (
            f"stage {stage} for sm_100a has compile_kernel + launch but has never run on a GPU "
            "(compile-verified only): this live run is its first test, checked against the "
            "float32 reference"
        )
    return True, f"stage {stage} for {arch} runs here (run, verified and measured on an H200)"


def stage_impl(stage: int, config=None):
    """Stage ``stage`` of our kernels as a bench :class:`~pearl_moe.bench.harness.Implementation`.

    Stages 2 and 3 call :func:`pearl_moe.kernels.grouped_gemm` without the host-side offsets check
    (no device-to-host copy, so a CUDA graph can capture the call). Stage 1 is the per-expert loop:
    like the harness's cuBLAS loop it is handed the row counts on the host.
    """
    from .bench.harness import Implementation, Prepared
    from .workloads import counts_to_offsets

    def prepare(A, W, offsets, counts):
        import torch

        from .kernels import api
        from .kernels.host import cuda_stream, device_end_offsets

        arch = api._arch_of(A.device)
        cfg = (config or api.default_config(arch)).resolved()
        if stage != 1:

            def run(out):
                return api.grouped_gemm(
                    A, W, offsets, config=cfg, out=out, stage=stage, check=False
                )

            return Prepared(run, asdict(cfg))
        experts, n, k = W.shape
        sms = torch.cuda.get_device_properties(A.device).multi_processor_count
        compiled = api._compiled(arch, 1, cfg, n, k, experts, sms)
        module = api.stage_module(arch, 1)
        ends = device_end_offsets(offsets, experts)
        host = counts_to_offsets(counts)

        def run(out):
            module.launch(compiled, A, W, ends, out, host, cuda_stream(A.device))
            return out

        return Prepared(run, {**asdict(cfg), "launches": sum(1 for c in counts if c)})

    return Implementation(f"pearl stage {stage}", prepare, {}, f"pearl-moe stage {stage}")


# ---------------------------------------------------------------------------- clipped stores
def simulate_tile_stores(
    counts: Sequence[int], tile_m: int, scheme: str, poison: int = -1
) -> tuple[np.ndarray, np.ndarray]:
    """Which expert wrote each output row when every m tile stores a full ``tile_m``-row box.

    The TMA unit writes a box element only if its coordinates lie inside the extents of the
    descriptor it stores through. ``scheme`` is how the kernel describes the output:

    * ``"whole"``: one descriptor over all rows (what a plain GEMM uses). The box of an expert's last
      tile runs on into the next expert's rows: this is the bug the grouped kernels avoid;
    * ``"per_expert"`` (sm_100a stages 2-3): one descriptor per expert, ``rows_e`` rows starting
      at the expert's first row; the box is placed at ``m_tile * tile_m`` inside it;
    * ``"clipped_view"`` (sm_90a stages 2-3): one 3-D view ``out3[i, j, e] = out[e - tile_m + i, j]``
      with ``i < tile_m``; the box starts at ``i = tile_m - valid`` of slice ``e = row0 + valid``.

    Returns ``(owner, writes)``: per output row, the expert whose tile wrote it last (``poison``
    if none) and how many tile stores wrote it. A correct scheme writes every row exactly once, by
    its own expert.
    """
    rows = int(sum(counts))
    owner = np.full(rows, poison, dtype=np.int64)
    writes = np.zeros(rows, dtype=np.int64)
    start = 0
    for e, m_e in enumerate(counts):
        for m_tile in range(-(-int(m_e) // tile_m)):
            row0 = start + m_tile * tile_m
            valid = min(tile_m, start + m_e - row0)
            for r in range(tile_m):  # every row of the box
                if scheme == "whole":
                    coord, extent, dest = row0 + r, rows, row0 + r
                elif scheme == "per_expert":
                    coord, extent = m_tile * tile_m + r, m_e
                    dest = start + coord
                elif scheme == "clipped_view":
                    coord, extent = (tile_m - valid) + r, tile_m  # the i coordinate
                    dest = (row0 + valid) - tile_m + coord  # out3[i, :, e] = out[e - tile_m + i]
                else:
                    raise ValueError(f"unknown scheme {scheme!r}")
                if 0 <= coord < extent:  # the TMA bounds rule: outside the extents, not written
                    writes[dest] += 1
                    owner[dest] = e
        start += m_e
    return owner, writes


# ---------------------------------------------------------------------------- plots
def plot_stage_sweep(
    measured: Sequence[tuple[int, float]] | Mapping[str, Sequence[tuple[int, float]]] | None,
    modeled: Mapping[str, Sequence[tuple[int, float]]],
    measured_label: str,
    measured_floor: float | None = None,
    modeled_floor: float | None = None,
    measured_gpu: str = "H200",
    modeled_gpu: str = "B200",
    title: str = "",
):
    """Latency against pipeline stages: measured (left) and modeled (right), never mixed.

    ``measured`` is ``(stages, seconds)`` points (or a dict of labelled series), ``None`` when
    nothing is recorded; ``modeled`` maps a label to ``(stages, seconds)`` points from
    :func:`pearl_moe.perfmodel.predict`. Floors are drawn as dashed lines.
    """
    from matplotlib.figure import Figure

    from .plots import OKABE_ITO, style

    with style():
        fig = Figure(figsize=(10.0, 3.8), layout="constrained")
        ax_m, ax_p = fig.subplots(1, 2)
        series = measured if isinstance(measured, Mapping) else {"stage 3": measured or []}
        drew = False
        for i, (label, points) in enumerate(series.items()):
            if points:
                s, t = zip(*sorted(points), strict=True)
                ax_m.plot(s, np.array(t) * 1e6, "-o", ms=4, color=OKABE_ITO[i], label=label)
                drew = True
        if not drew:
            ax_m.text(
                0.5, 0.5, "no recorded measurement yet", ha="center", va="center",
                transform=ax_m.transAxes, color="#555555",
            )  # fmt: skip
        if measured_floor and drew:
            ax_m.axhline(measured_floor * 1e6, color="#555555", ls="--", label="floor")
        ax_m.set_title(f"{measured_gpu}, measured: {measured_label}", fontsize=8)
        for i, (label, points) in enumerate(modeled.items()):
            s, t = zip(*sorted(points), strict=True)
            ax_p.plot(s, np.array(t) * 1e6, ":o", ms=4, color=OKABE_ITO[i], label=label)
        if modeled_floor:
            ax_p.axhline(modeled_floor * 1e6, color="#555555", ls="--", label="floor (modeled)")
        ax_p.set_title(
            f"{modeled_gpu}, modeled (pearl_moe.perfmodel, not a measurement)", fontsize=8
        )
        for ax in (ax_m, ax_p):
            ax.set_xlabel("pipeline stages (A/B ring entries)")
            ax.set_ylabel("latency (us)")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        if title:
            fig.suptitle(title, fontsize=10)
    return fig


def plot_latency_bars(
    bars: Sequence[tuple[str, float | None, str]],
    floor: float | None = None,
    title: str = "",
):
    """Horizontal bars ``(label, seconds or None, source)``; the source is printed on each bar.

    Missing values (None) are drawn as an empty row that says "no recorded measurement yet".
    """
    from matplotlib.figure import Figure

    from .plots import OKABE_ITO, style

    with style():
        fig = Figure(figsize=(7.5, 0.55 * len(bars) + 1.2), layout="constrained")
        ax = fig.add_subplot()
        y = np.arange(len(bars))[::-1]
        top = max([v for _, v, _ in bars if v] + [floor or 0]) * 1e6 or 1.0
        for yi, (_label, value, source) in zip(y, bars, strict=True):
            color = OKABE_ITO[0] if "modeled" not in source else OKABE_ITO[1]
            if value:
                ax.barh(
                    yi, value * 1e6, 0.6, color=color, hatch="//" if "modeled" in source else ""
                )
                ax.text(
                    value * 1e6, yi, f" {value * 1e6:.0f} us, {source}", va="center", fontsize=7
                )
            else:
                ax.text(0, yi, f" {source}", va="center", fontsize=7, color="#555555")
        if floor:
            ax.axvline(floor * 1e6, color="#555555", ls="--", lw=1.2)
            ax.text(floor * 1e6, y[0] + 0.45, " floor", fontsize=7, color="#555555")
        ax.set_yticks(y, [b[0] for b in bars])
        ax.set_xlim(0, top * 1.9)
        ax.set_xlabel("latency (us)")
        ax.grid(axis="y", visible=False)
        if title:
            ax.set_title(title)
    return fig
