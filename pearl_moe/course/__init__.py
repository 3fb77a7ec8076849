"""The course: what the notebooks call, one module per concern. Nothing in the library imports it.

The notebooks stay thin: they import a stage from :mod:`pearl_moe.kernels`, and this package does
the chores around it. Every name of the helper modules below is importable from
``pearl_moe.course`` directly; the drawing and generating modules are imported by their own name:
``plots`` (every figure, the one module that imports matplotlib), ``widgets`` (the interactive
explorers), ``figures`` (``python -m pearl_moe figures``: regenerate ``figures/``), ``doc_tables``
(the tables rendered into the README and ``docs/``), ``kernel_report`` (``python -m pearl_moe
inspect``: compile any stage for any target without a GPU; PTX, SASS, shared memory, TMEM) and
``exercises``.

=====================  ==========================================================================
module                 what it holds
=====================  ==========================================================================
``machine``            :func:`detect_machine`, :class:`Machine`: a live Blackwell GPU, a live
                       Hopper GPU, or a machine that replays recorded results
``sources``            :func:`show_source`, :func:`show_pair`, :func:`show_diff`,
                       :func:`show_excerpt`: the code that matters, read with :mod:`ast` (CuTe
                       DSL is never imported to show code)
``sass``               :func:`sass_by_kernel`, :func:`families_table`, :func:`sass_lines`: SASS
                       opcode counts per kernel, a table of families, matching instructions
``scratch``            :func:`compile_scratch`, the ``%%cute_compile`` cell magic: compile a small
                       kernel written in a notebook cell for sm_100a and sm_90a (one worker
                       process per target) and read its SASS and shared memory
``measurements``       :func:`load_kernel_results`, :func:`measurement_source`,
                       :func:`stage_series`, :func:`check_table`, :func:`ablation_step`, ...: the
                       recorded H200 runs of our kernels, each number labeled with where it comes
                       from
``profiles``           :func:`ncu_export`: a Nsight Compute export under ``results/H200/`` (metrics
                       per implementation, problem and run)
``host_run``           :func:`run_printing`: run CuTe host code on the CPU, read its ``cute.printf``
``live``               :func:`can_run_live`, :func:`stage_impl`, :func:`time_step_live`: run a
                       stage with the benchmark harness on a GPU
``simulate``           :func:`simulate_tile_stores`: the TMA store's bounds rule replayed in NumPy
=====================  ==========================================================================

The notebooks' own figures are drawn by :mod:`pearl_moe.course.plots` and re-exported here:
:func:`plot_latency_bars`, :func:`plot_recorded_vs_tokens`, :func:`plot_stage_sweep`,
:func:`plot_stage_budgets`, :func:`plot_stage_occupancy` (or :func:`same_tiles` where a stage keeps
its tile), :func:`plot_ablation_step` and :func:`say_model`.
"""

from ._paths import ROOT
from .exercises import check_exercise, compile_solution, show_solution
from .host_run import run_printing
from .live import can_run_live, format_live_step, stage_impl, time_step_live
from .machine import FORCE_ENV, Machine, detect_machine
from .measurements import (
    DECODE_MAX_TOKENS,
    STAGE_IMPLS,
    ablation_step,
    baseline,
    check_table,
    correctness_summary,
    describe_run,
    floor_series,
    format_ablation_step,
    gpu_check_lines,
    gpu_check_summary,
    kernel_rows,
    load_kernel_results,
    measured_date,
    measurement_source,
    results_path,
    stage_series,
    stage_sweep,
    step_latency_bars,
    step_verdict,
)
from .plots import (
    plot_ablation_step,
    plot_latency_bars,
    plot_recorded_vs_tokens,
    plot_stage_budgets,
    plot_stage_occupancy,
    plot_stage_sweep,
    same_tiles,
    say_model,
)
from .profiles import ncu_export
from .sass import families_table, gemm_families, sass_by_kernel, sass_lines
from .scratch import ScratchReport, compile_scratch, load_ipython_extension
from .simulate import simulate_tile_stores
from .sources import (
    SourceView,
    diff_stats,
    get_excerpt,
    get_source,
    show_diff,
    show_excerpt,
    show_pair,
    show_source,
    side_by_side,
    source_diff,
)

__all__ = [
    "check_exercise",
    "compile_solution",
    "show_solution",
    "ROOT",
    "FORCE_ENV",
    "Machine",
    "detect_machine",
    "SourceView",
    "get_source",
    "show_source",
    "show_pair",
    "source_diff",
    "diff_stats",
    "show_diff",
    "get_excerpt",
    "show_excerpt",
    "side_by_side",
    "sass_by_kernel",
    "families_table",
    "gemm_families",
    "sass_lines",
    "ScratchReport",
    "compile_scratch",
    "load_ipython_extension",
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
    "check_table",
    "stage_sweep",
    "baseline",
    "DECODE_MAX_TOKENS",
    "ablation_step",
    "format_ablation_step",
    "step_latency_bars",
    "step_verdict",
    "gpu_check_lines",
    "gpu_check_summary",
    "ncu_export",
    "run_printing",
    "can_run_live",
    "stage_impl",
    "time_step_live",
    "format_live_step",
    "simulate_tile_stores",
    "plot_stage_sweep",
    "plot_latency_bars",
    "plot_recorded_vs_tokens",
    "say_model",
    "plot_stage_budgets",
    "plot_stage_occupancy",
    "same_tiles",
    "plot_ablation_step",
]
