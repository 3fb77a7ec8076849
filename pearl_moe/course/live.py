"""Run a stage live: whether it can run here, and the stage as a benchmark implementation.

:func:`can_run_live` says whether a stage has a launcher for this GPU's target and what a live
run of it means (the sm_100a stages have never run on a GPU: a live B200 run is their first
test). :func:`stage_impl` wraps a stage as a :class:`pearl_moe.bench.harness.Implementation`, so
the notebooks check and time it with the same harness as the baselines; :func:`time_step_live`
times a stage against the previous one the way the recorded ablation did (interleaved rounds,
paired ratio), on a Hopper GPU (the sm_90a twins) or a Blackwell GPU (the sm_100a kernels) alike;
:func:`live_source` labels what it measured.
"""

from __future__ import annotations

from dataclasses import asdict

__all__ = ["can_run_live", "stage_impl", "time_step_live", "live_source", "format_live_step"]


def can_run_live(arch: str, stage: int) -> tuple[bool, str]:
    """Whether ``stage`` has a launcher for ``arch`` here, and what a live run of it means.

    Imports the stage module (CuTe DSL: call it on a GPU machine only). The sm_90a stages have
    been run, verified and measured on an H200. The sm_100a stages implement ``compile_kernel``
    and ``launch`` too, so on a B200 :func:`pearl_moe.kernels.grouped_gemm` launches them, but
    they have only been compile-verified (on a CPU): they have never run on any GPU, and a live
    run on a B200 is their first test: checked against the float32 reference, then timed against
    the previous stage (:func:`time_step_live`).
    """
    from ..kernels.api import stage_module

    try:
        stage_module(arch, stage)  # imports the kernels of the arch
    except Exception as exc:  # noqa: BLE001 - any import problem means "not runnable here"
        return False, f"stage {stage} for {arch} does not import here ({type(exc).__name__}: {exc})"
    if arch == "sm_100a":
        return True, (
            f"stage {stage} for sm_100a has compile_kernel + launch but has never run on a GPU "
            "(compile-verified only): this live run is its first test, checked against the "
            "float32 reference before it is timed"
        )
    return True, f"stage {stage} for {arch} runs here (run, verified and measured on an H200)"


def stage_impl(stage: int, config=None):
    """Stage ``stage`` of our kernels as a bench :class:`~pearl_moe.bench.harness.Implementation`.

    Stages 2 and 3 call :func:`pearl_moe.kernels.grouped_gemm` without the host-side offsets check
    (no device-to-host copy, so a CUDA graph can capture the call). Stage 1 is the per-expert loop:
    like the harness's cuBLAS loop it is handed the row counts on the host.
    """
    from ..bench.harness import Implementation, Prepared
    from ..workloads import counts_to_offsets

    def prepare(A, W, offsets, counts):
        import torch

        from ..kernels import api
        from ..kernels.host import cuda_stream, device_end_offsets

        arch = api.arch_of(A.device)
        cfg = (config or api.default_config(arch, stage)).resolved()
        if stage != 1:

            def run(out):
                return api.grouped_gemm(
                    A, W, offsets, config=cfg, out=out, stage=stage, check=False
                )

            return Prepared(run, asdict(cfg))
        experts, n, k = W.shape
        sms = torch.cuda.get_device_properties(A.device).multi_processor_count
        compiled = api.compiled_kernel(arch, 1, cfg, n, k, experts, sms)
        module = api.stage_module(arch, 1)
        ends = device_end_offsets(offsets, experts)
        host = counts_to_offsets(counts)

        def run(out):
            module.launch(compiled, A, W, ends, out, host, cuda_stream(A.device))
            return out

        return Prepared(run, {**asdict(cfg), "launches": sum(1 for c in counts if c)})

    return Implementation(f"pearl stage {stage}", prepare, {}, f"pearl-moe stage {stage}")


def _describe_config(config: dict | None) -> str | None:
    """A timed side's config in one line; the stage-1 loop adds its number of launches."""
    from dataclasses import fields

    from ..config import GemmConfig

    if not config:
        return None
    names = {f.name for f in fields(GemmConfig)}
    text = GemmConfig.from_dict({k: v for k, v in config.items() if k in names}).describe()
    launches = config.get("launches")
    return f"{text}, {launches} launches" if launches is not None else text


def time_step_live(
    stage: int, problem, rounds: int = 5, reps: int = 5, floor_s: float | None = None
):
    """Time stage ``stage - 1`` and ``stage`` on ``problem`` on this GPU, interleaved round by round.

    The method of the recorded ablation (:func:`pearl_moe.bench.harness.time_interleaved`, CUDA
    graphs over rotating input sets, outputs checked after the replays), on one problem. Returns a
    row shaped like those of :func:`~pearl_moe.course.measurements.ablation_step` (``prev_us``,
    ``this_us``, spreads, configs, ``ratio`` / ``lo`` / ``hi`` / ``rounds``, ``verdict``), plus
    ``outputs_ok``; ``floor_us`` is ``floor_s`` when given. A stage that fails to run is reported
    in ``status`` instead of timed.

    Nothing here depends on the architecture: on a Blackwell GPU the two stages are the sm_100a
    kernels (:func:`stage_impl` launches the stage of the GPU's target). Check them first
    (:func:`pearl_moe.bench.harness.check`, as the notebooks do): there, these are their first
    runs, and a kernel that writes wrong rows is not worth timing. Label the row with
    :func:`live_source`.
    """
    from ..bench import harness
    from ..bench.compare import paired_ratio
    from .measurements import step_verdict

    got = harness.time_interleaved(
        {"prev": stage_impl(stage - 1), "this": stage_impl(stage)},
        problem,
        rounds=rounds,
        reps=reps,
    )
    meta = problem.meta
    row = {
        "model": meta.get("model", problem.name),
        "tokens": meta.get("tokens_per_gpu"),
        "routing": meta.get("routing"),
        "floor_us": floor_s * 1e6 if floor_s else None,
    }
    status, times, outputs = [], {}, []
    for side in ("prev", "this"):
        timing, config = got[side]
        if isinstance(timing, Exception):
            status.append(f"error: {type(timing).__name__}: {timing}")
            row[f"{side}_us"] = row[f"{side}_spread_pct"] = row[f"{side}_config"] = None
            continue
        status.append("ok")
        times[side] = {"time": timing.as_dict()}
        row[f"{side}_us"] = timing.median_s * 1e6
        row[f"{side}_spread_pct"] = timing.spread.get("range_pct")
        row[f"{side}_config"] = _describe_config(config)
        outputs.append(timing.outputs_ok)
        if floor_s:
            row[f"{side}_pct_floor"] = 100.0 * floor_s / timing.median_s
    row["status"] = tuple(status)
    row["outputs_ok"] = all(o is not False for o in outputs)
    if len(times) == 2:
        row.update(paired_ratio(times["this"], times["prev"]))
        row["verdict"] = step_verdict(row)
    return row


def live_source(machine) -> str:
    """The label of a live measurement on ``machine``: ``"live on <GPU>"``
    (:func:`~pearl_moe.course.measurements.measurement_source`), and on a Blackwell GPU what the
    numbers are: the first live runs of the sm_100a kernels, timed after they passed the check
    against the float32 reference."""
    from .measurements import measurement_source

    where = measurement_source(None, machine)
    if machine is not None and machine.mode == "blackwell":
        where += (
            " (first live runs of the sm_100a kernels, timed after their check against the "
            "float32 reference)"
        )
    return where


def format_live_step(row, stage: int, where: str) -> str:
    """One line for a row of :func:`time_step_live`: both medians, the paired ratio and its verdict,
    whether the graph's outputs passed their check; a stage that failed says how."""
    a, b = stage - 1, stage
    if row.get("prev_us") is None or row.get("this_us") is None:
        return f"{where}: stage {a} / stage {b} not both timed: {', '.join(row['status'])}"
    ratio = f"{row['ratio']:.3f} ({row['verdict']})" if "ratio" in row else "not compared"
    return (
        f"{where}, {row['model']} {row['tokens']} tok: stage {a} {row['prev_us']:.1f} us, "
        f"stage {b} {row['this_us']:.1f} us, ratio {ratio}; outputs checked after timing: "
        + ("ok" if row.get("outputs_ok") else "FAILED")
    )
