"""The run files of ``results/``: their schema, and the one place that reads and writes them.

    from pearl_moe import results
    results.list_runs()                      # every results/<gpu>/<kind>.json(.gz)
    rows = results.rows(model="GLM 5.3", impl=["quack", "triton"])
    print(results.table(gpu="H200"))

A run file (``results/<gpu>/<kind>.json``, or ``.json.gz`` for the large ones) holds one bench run::

    {
      "schema": "pearl-moe-bench/1",
      "kind": "baselines",
      "env": {gpu, sm_count, l2_bytes, clocks, clocks_under_load, driver, cuda, torch,
              cutlass_dsl, quack, triton, date, host_python, command, scheduler,
              kernel_sources (from 2026-12-01)},
      "ceilings": {read_bytes_per_s, bf16_flops_per_s, ... how they were measured},
      "problems": [{id, model, tokens_per_gpu, ep, routing, projection, k, n, experts, counts,
                    rows, active_experts, bytes_moved, flops, floor_us}],
      "records": [{problem, impl, status, config, time{median_us, min_us, max_us, ...},
                   metrics{tb_per_s, tflop_per_s, floor_us, pct_of_floor, bound},
                   correctness{ok, max_abs_err, torch_bf16_max_abs_err, tolerance, ...}, error}]
    }

Problems are stored once and referenced by id. ``env.clocks`` was read before any GPU work (the idle
clock); ``env.clocks_under_load`` (runs from 2026-11-30 on) holds the clocks sampled while the GPU was
busy. :func:`run_scheduler` says which tile-scheduler walk a run timed, from ``env`` or from its date.

The whole MoE layer's runs (``python -m pearl_moe layer``: ``moe_layer``, ``moe_layer_sonic``,
``moe_layer_steps``) have the schema :data:`LAYER_SCHEMA`: the same head, problems and records, a
problem being one layer on one GPU (``{id, model, tokens_per_gpu, ep, routing, hidden,
intermediate, experts, top_k, rows, active_experts, bytes_moved, flops, floor_us}``) and a record
one implementation of it or one step of ours (``step:<name>``, no floor metrics). :func:`read_run`
reads either schema and validates the file against its own (:func:`validate_run`); :func:`runs`
lists the grouped-GEMM runs only (its rows are GEMM rows).

A *row* (:func:`rows`, :func:`run_rows`) is one implementation on one problem, flattened: the
problem (model, tokens, routing, k, n, experts, rows, bytes, flops), the implementation and its
config, the times, the metrics and the correctness numbers, plus the run's GPU, date and ceilings.

Writing: :func:`new_run` starts a run (``kind``, :func:`environment`, the measured ceilings); the
bench adds one :func:`problem_entry` per problem and one record per implementation;
:func:`raise_read_ceiling` lifts the read ceiling to the fastest rate a record demonstrated;
:func:`write_run` validates the run and writes it with one problem or record per line
(:func:`dumps_run`), gzipped where the path ends in ``.gz``. :func:`environment` reads the GPU, clocks, driver, library versions and
:func:`kernel_sources`; :func:`clocks_under_load` samples the clocks while the GPU is busy. Only
those two need a GPU, and they fall back to what they can read.

This module imports only the workload model (:func:`problem_from_entry` rebuilds a
:class:`~pearl_moe.workloads.GroupedProblem`): the bench, the models and the course read and write
runs through it.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from .workloads import GroupedProblem

__all__ = [
    "RESULTS_DIR",
    "SCHEMA",
    "LAYER_SCHEMA",
    "STATUSES",
    "IDLE_CLOCK_SOURCE",
    "SCHEDULER_CUTOVER",
    "validate_run",
    "read_run",
    "read_json",
    "run_path",
    "run_files",
    "runs",
    "list_runs",
    "load_run",
    "problem_from_entry",
    "run_scheduler",
    "rows",
    "run_rows",
    "best_by_problem",
    "format_table",
    "table",
    "problem_id",
    "problem_entry",
    "environment",
    "new_run",
    "write_run",
    "kernel_sources",
    "clocks_under_load",
    "LOAD_CLOCK_SOURCE",
    "SCHEDULER",
]

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"

SCHEMA = "pearl-moe-bench/1"
#: The MoE layer's runs (:mod:`pearl_moe.bench.layer` writes them), kept beside the grouped GEMM's
#: in ``results/<gpu>/`` and left out of :func:`runs`' folder listing.
LAYER_SCHEMA = "pearl-moe-layer/1"
#: ok: checked and timed; incorrect: failed the check (not timed); unavailable: could not load here;
#: error: raised while checking or timing.
STATUSES = ("ok", "incorrect", "unavailable", "error")

_PROBLEM_KEYS = (
    "id",
    "model",
    "tokens_per_gpu",
    "ep",
    "routing",
    "projection",
    "k",
    "n",
    "experts",
    "counts",
    "rows",
    "active_experts",
    "bytes_moved",
    "flops",
)
_RECORD_KEYS = ("problem", "impl", "status", "config")
_OK_KEYS = ("time", "metrics", "correctness")
#: What a layer run's problems and records hold at least (its steps' records have no metrics and
#: its records of a status other than ok no config).
_LAYER_PROBLEM_KEYS = ("id", "model", "tokens_per_gpu", "ep", "routing", "experts", "top_k",
                       "rows", "active_experts", "bytes_moved", "flops")  # fmt: skip
_LAYER_RECORD_KEYS = ("problem", "impl", "status")
_LAYER_OK_KEYS = ("time",)

#: The label of the clocks read before any GPU work. Runs recorded before 2026-11-30 said only
#: "nvidia-smi at the start of the run"; :func:`read_run` shows those with this fuller label.
IDLE_CLOCK_SOURCE = (
    "nvidia-smi at the start of the run, before any GPU work: the idle clock, "
    "not the clock the kernels ran at"
)
_LEGACY_IDLE_CLOCK_SOURCE = "nvidia-smi at the start of the run"

#: When the warp-parallel walk replaced the serial one (one expert per dependent load): the commit
#: "scheduler: seek walks 32 experts per step" (c374394). Runs without ``env.scheduler`` are dated:
#: everything measured before this time used the serial walk.
SCHEDULER_CUTOVER = "2026-11-30T11:46:45+00:00"


# ---------------------------------------------------------------------------- files
def validate_run(run: dict) -> dict:
    """Raise ValueError if ``run`` does not follow its schema (:data:`SCHEMA`, or
    :data:`LAYER_SCHEMA` for a layer run); return it."""
    layer = run.get("schema") == LAYER_SCHEMA
    if not layer and run.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} or {LAYER_SCHEMA} file (schema={run.get('schema')!r})")
    for key in ("kind", "env", "ceilings", "problems", "records"):
        if key not in run:
            raise ValueError(f"missing top-level key {key!r}")
    for key in ("gpu", "date"):
        if key not in run["env"]:
            raise ValueError(f"env lacks {key!r}")
    for key in ("read_bytes_per_s", "bf16_flops_per_s"):
        if not run["ceilings"].get(key, 0) > 0:
            raise ValueError(f"ceiling {key!r} missing or not positive")
    problem_keys, record_keys, ok_keys = (
        (_LAYER_PROBLEM_KEYS, _LAYER_RECORD_KEYS, _LAYER_OK_KEYS) if layer
        else (_PROBLEM_KEYS, _RECORD_KEYS, _OK_KEYS)
    )  # fmt: skip
    ids = set()
    for p in run["problems"]:
        missing = [k for k in problem_keys if k not in p]
        if missing:
            raise ValueError(f"problem {p.get('id')!r} lacks {missing}")
        if not layer and (sum(p["counts"]) != p["rows"] or len(p["counts"]) != p["experts"]):
            raise ValueError(f"problem {p['id']!r}: counts do not match rows/experts")
        ids.add(p["id"])
    for r in run["records"]:
        missing = [k for k in record_keys if k not in r]
        if missing:
            raise ValueError(f"record {r.get('impl')!r} lacks {missing}")
        if r["problem"] not in ids:
            raise ValueError(f"record {r['impl']!r} names an unknown problem {r['problem']!r}")
        if r["status"] not in STATUSES:
            raise ValueError(f"unknown status {r['status']!r}")
        if r["status"] == "ok":
            missing = [k for k in ok_keys if k not in r]
            if missing:
                raise ValueError(f"ok record {r['impl']!r} lacks {missing}")
            if not layer and not r["correctness"]["ok"]:
                raise ValueError(f"record {r['impl']!r} is 'ok' but failed its check")
            if not r["time"]["median_us"] > 0:
                raise ValueError(f"record {r['impl']!r} has a non-positive time")
    return run


def read_json(path: str | Path):
    """The JSON in ``path``, gunzipped first when it ends in ``.gz``."""
    path = Path(path)
    if path.suffix == ".gz":
        import gzip

        return json.loads(gzip.decompress(path.read_bytes()).decode())
    return json.loads(path.read_text())


def read_run(path: str | Path) -> dict:
    """Read and validate a result file (``.json``, or ``.json.gz`` for runs stored gzipped), a
    grouped-GEMM run or a layer run (:func:`validate_run`). The clocks of runs recorded with the
    older, shorter label are shown with :data:`IDLE_CLOCK_SOURCE` (in memory only): they were
    read before any GPU work."""
    return _read_validated(read_json(path))


def _read_validated(run: dict) -> dict:
    run = validate_run(run)
    clocks = run["env"].get("clocks")
    if isinstance(clocks, dict) and clocks.get("source") == _LEGACY_IDLE_CLOCK_SOURCE:
        clocks["source"] = IDLE_CLOCK_SOURCE
    return run


def run_files(folder: str | Path) -> list[Path]:
    """The result files directly in ``folder`` (``results/<gpu>/``), sorted: ``*.json`` and the
    runs stored gzipped (``*.json.gz``) to keep ``results/`` small. Subfolders (``history/``,
    ``power/``, ``schedule/`` ...) hold experiments and are not listed."""
    folder = Path(folder)
    return sorted([*folder.glob("*.json"), *folder.glob("*.json.gz")])


def runs(
    gpu: str | None = "H200",
    root: str | Path | None = None,
    files: Iterable[str | Path] | None = None,
) -> Iterator[tuple[Path, dict]]:
    """``(path, run)`` for each result file of ``results/<gpu>/`` (:func:`run_files`; every GPU
    folder, in name order, when ``gpu`` is None), or for ``files`` when given, read with
    :func:`read_run` one at a time."""
    if files is None:
        root = Path(root) if root is not None else RESULTS_DIR
        folders = [root / gpu] if gpu else sorted(d for d in root.iterdir() if d.is_dir())
        files = [f for folder in folders for f in run_files(folder)]
        listed = True
    else:
        listed = False
    for path in files:
        run = read_json(path)
        if listed and run.get("schema") == LAYER_SCHEMA:
            continue  # the layer's run: not a grouped GEMM run
        yield Path(path), _read_validated(run)


def list_runs(root: str | Path | None = None) -> list[dict]:
    """One entry per result file: path, gpu folder, kind, GPU name, date, number of records."""
    return [
        {
            "path": path,
            "gpu_dir": path.parent.name,
            "kind": run["kind"],
            "gpu": run["env"].get("gpu"),
            "date": run["env"].get("date"),
            "records": len(run["records"]),
        }
        for path, run in runs(None, root)
    ]


def run_path(gpu: str = "H200", kind: str = "baselines", root: str | Path | None = None) -> Path:
    """The file a run of ``kind`` is read from: ``results/<gpu>/<kind>.json`` when it exists (a
    run of this machine's), else the committed ``<kind>.json.gz`` (which may not exist either)."""
    root = Path(root) if root is not None else RESULTS_DIR
    path = root / gpu / f"{kind}.json"
    return path if path.exists() else path.with_suffix(".json.gz")


def load_run(
    gpu: str = "H200", kind: str = "baselines", root: str | Path | None = None, missing_ok=False
) -> dict | None:
    """The run ``results/<gpu>/<kind>.json`` (or ``.json.gz``: :func:`run_path`), validated;
    with ``missing_ok``, None where neither file exists."""
    path = run_path(gpu, kind, root)
    if missing_ok and not path.exists():
        return None
    return read_run(path)


# ---------------------------------------------------------------------------- metadata
def problem_from_entry(entry: dict) -> GroupedProblem:
    """The :class:`~pearl_moe.workloads.GroupedProblem` a run's problem entry describes."""
    meta = {
        key: entry.get(key)
        for key in ("model", "tokens_per_gpu", "ep", "routing", "projection", "seed")
    }
    return GroupedProblem(
        k=entry["k"], n=entry["n"], counts=tuple(entry["counts"]), name=entry["id"], meta=meta
    )


def run_scheduler(run: dict) -> tuple[str, str]:
    """``(scheduler, how we know)`` of a run: ``env.scheduler`` when recorded, else from its date
    (before :data:`SCHEDULER_CUTOVER`: ``serial``; from then on: ``warp-parallel``)."""
    env = run.get("env", {})
    if env.get("scheduler"):
        return env["scheduler"], "recorded in env.scheduler"
    date = _dt.datetime.fromisoformat(str(env["date"]))
    if date.tzinfo is None:
        date = date.replace(tzinfo=_dt.timezone.utc)
    if date < _dt.datetime.fromisoformat(SCHEDULER_CUTOVER):
        return (
            "serial",
            f"run dated {env['date']}, before the warp-parallel walk ({SCHEDULER_CUTOVER})",
        )
    return "warp-parallel", f"run dated {env['date']}, after {SCHEDULER_CUTOVER}"


# ---------------------------------------------------------------------------- rows
def _flatten(run: dict, path: Path | None) -> list[dict]:
    problems = {p["id"]: p for p in run["problems"]}
    out = []
    for r in run["records"]:
        p = problems[r["problem"]]
        row = {
            "gpu": run["env"].get("gpu"),
            "date": run["env"].get("date"),
            "kind": run["kind"],
            "file": str(path) if path else None,
            "model": p["model"],
            "tokens_per_gpu": p["tokens_per_gpu"],
            "ep": p["ep"],
            "routing": p["routing"],
            "projection": p["projection"],
            "k": p["k"],
            "n": p["n"],
            "experts": p["experts"],
            "rows": p["rows"],
            "active_experts": p["active_experts"],
            "bytes_moved": p["bytes_moved"],
            "flops": p["flops"],
            "floor_us": p.get("floor_us"),
            "read_ceiling_tb_s": run["ceilings"]["read_bytes_per_s"] / 1e12,
            "bf16_ceiling_tflop_s": run["ceilings"]["bf16_flops_per_s"] / 1e12,
            "impl": r["impl"],
            "status": r["status"],
            "config": r.get("config", {}),
            "error": r.get("error"),
            # the check's verdict, recorded for every record that was checked (None: not checked)
            "correct": (r.get("correctness") or {}).get("ok"),
            "check_message": (r.get("correctness") or {}).get("message"),
        }
        if r["status"] == "ok":
            row.update(
                median_us=r["time"]["median_us"],
                min_us=r["time"]["min_us"],
                max_us=r["time"]["max_us"],
                tb_per_s=r["metrics"]["tb_per_s"],
                tflop_per_s=r["metrics"]["tflop_per_s"],
                pct_of_floor=r["metrics"]["pct_of_floor"],
                max_abs_err=r["correctness"]["max_abs_err"],
                torch_bf16_err=r["correctness"]["torch_bf16_max_abs_err"],
            )
        out.append(row)
    return out


def _match(value, wanted) -> bool:
    if wanted is None:
        return True
    if isinstance(wanted, str) or not isinstance(wanted, Iterable):
        wanted = [wanted]
    return value in set(wanted)


def rows(
    gpu: str | None = "H200",
    kind: str | Iterable[str] | None = None,
    model=None,
    impl=None,
    routing=None,
    tokens=None,
    ok_only: bool = True,
    root: str | Path | None = None,
) -> list[dict]:
    """Flattened records from results/, filtered (each filter: one value or a list of values)."""
    out = []
    for path, run in runs(gpu, root):
        if not _match(run["kind"], kind):
            continue
        for row in _flatten(run, path):
            if ok_only and row["status"] != "ok":
                continue
            if (
                _match(row["model"], model)
                and _match(row["impl"], impl)
                and _match(row["routing"], routing)
                and _match(row["tokens_per_gpu"], tokens)
            ):
                out.append(row)
    return out


def run_rows(
    run: dict | str | Path,
    model=None,
    impl=None,
    routing=None,
    tokens=None,
    ok_only: bool = True,
) -> list[dict]:
    """Flattened records of one run (a dict from :func:`load_run` / ``read_run``, or a file path),
    filtered as in :func:`rows`. The file is named in each row only when a path is given."""
    path = None
    if not isinstance(run, dict):
        path = Path(run)
        run = read_run(path)
    return [
        row
        for row in _flatten(run, path)
        if (not ok_only or row["status"] == "ok")
        and _match(row["model"], model)
        and _match(row["impl"], impl)
        and _match(row["routing"], routing)
        and _match(row["tokens_per_gpu"], tokens)
    ]


def best_by_problem(rs: list[dict]) -> dict[tuple, dict]:
    """(kind, model, tokens, routing) -> the fastest row."""
    best: dict[tuple, dict] = {}
    for r in rs:
        key = (r["kind"], r["model"], r["tokens_per_gpu"], r["routing"])
        if key not in best or r["median_us"] < best[key]["median_us"]:
            best[key] = r
    return best


# ---------------------------------------------------------------------------- tables
def format_table(run: dict) -> str:
    """One line per problem: floor, then time in us (% of floor) per implementation."""
    impls = []
    for r in run["records"]:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    by_key = {(r["problem"], r["impl"]): r for r in run["records"]}
    head = f"{'model':<16}{'tok':>5} {'routing':<9}{'floor us':>9}"
    head += "".join(f"{i:>20}" for i in impls)
    lines = [head, "-" * len(head)]
    for p in run["problems"]:
        row = f"{p['model']:<16}{p['tokens_per_gpu']:>5} {p['routing']:<9}"
        row += f"{p.get('floor_us', float('nan')):>9.1f}"
        for impl in impls:
            r = by_key.get((p["id"], impl))
            if r is None:
                cell = "-"
            elif r["status"] == "ok":
                cell = f"{r['time']['median_us']:.1f} ({r['metrics']['pct_of_floor']:.0f}%)"
            else:
                cell = r["status"]
            row += f"{cell:>20}"
        lines.append(row)
    return "\n".join(lines)


def table(gpu: str = "H200", kind: str = "baselines", root: str | Path | None = None) -> str:
    """The run as the bench CLI prints it: a heading (GPU, date, ceilings), then
    :func:`format_table`."""
    run = load_run(gpu, kind, root)
    head = (
        f"{kind} measured on {run['env'].get('gpu')} ({run['env'].get('date', '')[:10]}); "
        f"ceilings: read {run['ceilings']['read_bytes_per_s'] / 1e12:.2f} TB/s, "
        f"bf16 {run['ceilings']['bf16_flops_per_s'] / 1e12:.0f} TFLOP/s"
    )
    return head + "\n" + format_table(run)


# ------------------------------------------------------------------------------- writing runs
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

    root = Path(__file__).resolve().parent / "kernels"
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


def dumps_run(run: dict) -> str:
    """Compact JSON with one problem or record per line: small, and diffs stay readable."""
    head = {k: v for k, v in run.items() if k not in ("problems", "records")}
    text = json.dumps(head, indent=1)[:-2]  # reopen the object
    for key in ("problems", "records"):
        items = ",\n  ".join(json.dumps(x, separators=(",", ":")) for x in run[key])
        text += f',\n "{key}": [\n  {items}\n ]'
    return text + "\n}\n"


def write_run(run: dict, path: str | Path) -> Path:
    """Validate and write ``run`` (floats to 5 significant digits, to keep files small), gzipped
    (reproducibly: no name, no time stamp) where ``path`` ends in ``.gz``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    validate_run(run)
    data = dumps_run(_round_floats(run)).encode()
    if path.suffix == ".gz":
        import gzip

        data = gzip.compress(data, compresslevel=9, mtime=0)
    tmp = path.with_suffix(path.suffix + ".part")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path
