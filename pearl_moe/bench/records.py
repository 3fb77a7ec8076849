"""Writing result files: the run the bench fills, its environment, and the file on disk.

:func:`new_run` starts a run (``kind``, :func:`environment`, the measured ceilings); the bench adds
one :func:`problem_entry` per problem and one record per implementation; :func:`raise_read_ceiling`
lifts the read ceiling to the fastest rate a record demonstrated; :func:`write_run` validates the run
and writes it with one problem or record per line. :func:`environment` reads the GPU, clocks,
driver, library versions and :func:`kernel_sources`; :func:`clocks_under_load` samples the clocks
while the GPU is busy.

The schema, its validation and every read of ``results/`` live in :mod:`pearl_moe.replay`; the names
of the reader used with the writer (``read_run``, ``run_files``, ``validate_run``, ``SCHEMA`` ...) are
importable from here too. Nothing here needs a GPU except :func:`environment` and
:func:`clocks_under_load`, which fall back to what they can read.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import subprocess
import sys
from pathlib import Path

from ..replay import (
    IDLE_CLOCK_SOURCE,
    SCHEDULER_CUTOVER,
    SCHEMA,
    STATUSES,
    problem_from_entry,
    read_run,
    run_files,
    run_scheduler,
    validate_run,
)
from ..workloads import GroupedProblem

__all__ = [
    "SCHEMA",
    "STATUSES",
    "problem_id",
    "problem_entry",
    "problem_from_entry",
    "environment",
    "new_run",
    "validate_run",
    "write_run",
    "read_run",
    "run_files",
    "kernel_sources",
    "clocks_under_load",
    "IDLE_CLOCK_SOURCE",
    "LOAD_CLOCK_SOURCE",
    "SCHEDULER",
    "SCHEDULER_CUTOVER",
    "run_scheduler",
]


def problem_id(problem: GroupedProblem) -> str:
    m = problem.meta
    if m:
        return f"{m['model']}|{m['projection']}|{m['tokens_per_gpu']}|EP{m['ep']}|{m['routing']}"
    return problem.label()


def problem_entry(problem: GroupedProblem, ceilings: dict | None = None) -> dict:
    m = problem.meta
    entry = {
        "id": problem_id(problem),
        "model": m.get("model"),
        "tokens_per_gpu": m.get("tokens_per_gpu"),
        "ep": m.get("ep"),
        "routing": m.get("routing"),
        "projection": m.get("projection"),
        "seed": m.get("seed"),
        "k": problem.k,
        "n": problem.n,
        "experts": problem.experts,
        "counts": list(problem.counts),
        "rows": problem.rows,
        "active_experts": problem.active_experts,
        "bytes_moved": problem.bytes_moved(),
        "flops": problem.flops,
    }
    if ceilings:
        entry["floor_us"] = 1e6 * problem.floor_seconds(
            ceilings["read_bytes_per_s"], ceilings["bf16_flops_per_s"]
        )
    return entry


def raise_read_ceiling(run: dict) -> dict:
    """Make the read ceiling at least the fastest rate any implementation demonstrated in ``run``.

    A ceiling is what the GPU has shown it can do. The read probes (a sum over several GB) are not
    the fastest possible readers: a grouped GEMM streaming its weights can beat them, and a floor
    built on a beaten probe would show more than 100 % of floor. Every correct record moved at least
    ``bytes_moved`` bytes in its best time, so ``bytes_moved / min time`` is a demonstrated read rate
    (writes included, so it never overstates the reads). The floors and metrics of the run are
    recomputed from that ceiling; the probes' own rates stay recorded. Returns ``run``, changed.
    """
    ceilings = run["ceilings"]
    probe = ceilings.get("read_probe_bytes_per_s", ceilings["read_bytes_per_s"])
    problems = {p["id"]: p for p in run["problems"]}
    best, best_by = probe, None
    for rec in run["records"]:
        if rec.get("status") != "ok" or rec["problem"] not in problems:
            continue
        rate = problems[rec["problem"]]["bytes_moved"] / (rec["time"]["min_us"] * 1e-6)
        if rate > best:
            best, best_by = rate, f"{rec['impl']} on {rec['problem']}"
    ceilings["read_probe_bytes_per_s"] = probe
    ceilings["read_bytes_per_s"] = best
    ceilings["read_ceiling_source"] = (
        f"raised above the probes to the rate {best_by} demonstrated (bytes that must move / best time)"
        if best_by
        else "the probes (no implementation read faster)"
    )
    read, flops = ceilings["read_bytes_per_s"], ceilings["bf16_flops_per_s"]
    for entry in run["problems"]:
        entry["floor_us"] = 1e6 * max(entry["bytes_moved"] / read, entry["flops"] / flops)
    for rec in run["records"]:
        if rec.get("status") != "ok" or rec["problem"] not in problems:
            continue
        p = problems[rec["problem"]]
        seconds = rec["time"]["median_us"] * 1e-6
        rec["metrics"]["floor_us"] = p["floor_us"]
        rec["metrics"]["pct_of_floor"] = 100.0 * p["floor_us"] * 1e-6 / seconds
        rec["metrics"]["bound"] = (
            "memory" if p["bytes_moved"] / read >= p["flops"] / flops else "compute"
        )
    return run


def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


LOAD_CLOCK_SOURCE = "nvidia-smi while a bf16 matmul loop kept the GPU busy"


def _smi_query(fields: str, keys: list[str], runner=subprocess.run) -> dict:
    """One nvidia-smi query of the first GPU as {key: value}; {} where it cannot be read."""
    try:
        res = runner(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    if res.returncode != 0 or not res.stdout.strip():
        return {}
    values = [v.strip() for v in res.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(keys, values, strict=False))


def _nvidia_smi(runner=subprocess.run) -> dict:
    fields = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit"
    keys = ["name", "driver", "sm_clock_mhz", "sm_clock_max_mhz", "mem_clock_mhz"]
    keys += ["mem_clock_max_mhz", "power_limit_w"]
    return _smi_query(fields, keys, runner)


_LOAD_FIELDS = (
    "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active",
    ["sm_clock_mhz", "mem_clock_mhz", "power_draw_w", "temperature_c", "throttle_reasons"],
)


def clocks_under_load(
    when: str,
    busy_seconds: float = 1.0,
    device="cuda",
    runner=subprocess.run,
    n: int = 8192,
) -> dict:
    """The clocks while the GPU is busy: queue about ``busy_seconds`` of bf16 matmuls (``n``-square),
    read nvidia-smi while they run, then wait for them. Call it after the warm-up (the ceilings),
    and again at the end of a run, so the record says what clock the kernels ran at, not the idle
    clock of a GPU that has not started yet. ``when`` says at which point of the run it was read."""
    import time

    import torch

    def sync():
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)

    a = torch.randn((n, n), device=device, dtype=torch.bfloat16)
    b = torch.randn((n, n), device=device, dtype=torch.bfloat16)
    torch.mm(a, b)
    sync()
    t0 = time.perf_counter()
    torch.mm(a, b)
    sync()
    one = max(time.perf_counter() - t0, 1e-4)
    for _ in range(max(1, min(2000, int(busy_seconds / one)))):
        torch.mm(a, b)  # queued: the host returns at once and reads the clocks below
    time.sleep(min(0.2, busy_seconds / 4))  # let the clocks ramp up under the load
    sample = _smi_query(*_LOAD_FIELDS, runner=runner)
    if not sample:  # an older or newer driver may not know the throttle field: the rest alone
        fields, keys = _LOAD_FIELDS
        sample = _smi_query(fields.rsplit(",", 1)[0], keys[:-1], runner=runner)
    sync()
    del a, b
    if not sample:
        return {"when": when, "source": "unavailable (nvidia-smi could not be read)"}
    return {**sample, "when": when, "source": LOAD_CLOCK_SOURCE}


#: How the device tile scheduler of this tree walks the experts
#: (:meth:`pearl_moe.kernels.scheduler.TileScheduler.seek`): "warp-parallel", 32 experts per
#: dependent load. Runs record it as ``env.scheduler``.
SCHEDULER = "warp-parallel"


def kernel_sources() -> str:
    """A short hash of the kernels' source (every ``pearl_moe/kernels/**/*.py``, path and text):
    two runs with the same hash timed the same kernel code. Runs before 2026-12-01 lack it."""
    import hashlib

    root = Path(__file__).resolve().parent.parent / "kernels"
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def environment(command: str | None = None) -> dict:
    """GPU, clocks, driver and library versions, the date, the host Python, the tile
    scheduler's walk (:data:`SCHEDULER`) and the hash of the kernels' source
    (:func:`kernel_sources`)."""
    env: dict = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "scheduler": SCHEDULER,
        "kernel_sources": kernel_sources(),
        "host_python": platform.python_version(),
        "platform": platform.platform(),
        "command": command or " ".join(sys.argv),
        "torch": _version("torch"),
        "cutlass_dsl": _version("nvidia-cutlass-dsl"),
        "quack": _version("quack-kernels"),
        "triton": _version("triton"),
    }
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env["gpu"] = props.name
            env["sm_count"] = props.multi_processor_count
            env["l2_bytes"] = props.L2_cache_size
            env["memory_bytes"] = props.total_memory
            env["capability"] = f"{props.major}.{props.minor}"
    except Exception as exc:  # pragma: no cover - torch is a dependency
        env["torch_error"] = repr(exc)
    smi = _nvidia_smi()
    if smi:
        env["driver"] = smi.pop("driver")
        env["clocks"] = {k: v for k, v in smi.items() if k != "name"}
        env["clocks"]["source"] = IDLE_CLOCK_SOURCE
    else:
        try:
            import torch

            if torch.cuda.is_available():
                env["clocks"] = {
                    "sm_clock_mhz": torch.cuda.clock_rate(),
                    "source": "torch.cuda.clock_rate at the start of the run (idle)",
                }
        except Exception:
            env["clocks"] = {"source": "unavailable"}
    return env


def new_run(kind: str, env: dict, ceilings: dict) -> dict:
    return {
        "schema": SCHEMA,
        "kind": kind,
        "env": env,
        "ceilings": ceilings,
        "problems": [],
        "records": [],
    }


def _round_floats(obj, digits: int = 5):
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _round_floats(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round_floats(v, digits) for v in obj]
    return obj


def _dumps(run: dict) -> str:
    """Compact JSON with one problem or record per line: small, and diffs stay readable."""
    head = {k: v for k, v in run.items() if k not in ("problems", "records")}
    text = json.dumps(head, indent=1)[:-2]  # reopen the object
    for key in ("problems", "records"):
        items = ",\n  ".join(json.dumps(x, separators=(",", ":")) for x in run[key])
        text += f',\n "{key}": [\n  {items}\n ]'
    return text + "\n}\n"


def write_run(run: dict, path: str | Path) -> Path:
    """Validate and write ``run`` (floats to 5 significant digits, to keep files small)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    validate_run(run)
    tmp = path.with_suffix(path.suffix + ".part")
    tmp.write_text(_dumps(_round_floats(run)))
    tmp.replace(path)
    return path
