"""Read the committed measurements in ``results/`` on any machine, GPU or not.

    from pearl_moe import replay
    replay.list_runs()                      # every results/<gpu>/<kind>.json(.gz)
    rows = replay.rows(model="GLM 5.3", impl=["quack", "triton"])
    print(replay.table(gpu="H200"))

A *row* is one implementation on one problem, flattened: the problem (model, tokens, routing, k, n,
experts, rows, bytes, flops), the implementation and its config, the times, the metrics and the
correctness numbers, plus the run's GPU, date and ceilings. Tables and plots read rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .bench.records import read_run, run_files

__all__ = [
    "RESULTS_DIR",
    "list_runs",
    "load_run",
    "rows",
    "run_rows",
    "table",
    "best_by_problem",
]

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


def list_runs(root: str | Path | None = None) -> list[dict]:
    """One entry per result file: path, gpu folder, kind, GPU name, date, number of records."""
    root = Path(root) if root is not None else RESULTS_DIR
    runs = []
    for path in [f for gpu in sorted(root.iterdir()) if gpu.is_dir() for f in run_files(gpu)]:
        run = read_run(path)
        runs.append(
            {
                "path": path,
                "gpu_dir": path.parent.name,
                "kind": run["kind"],
                "gpu": run["env"].get("gpu"),
                "date": run["env"].get("date"),
                "records": len(run["records"]),
            }
        )
    return runs


def load_run(gpu: str = "H200", kind: str = "baselines", root: str | Path | None = None) -> dict:
    root = Path(root) if root is not None else RESULTS_DIR
    path = root / gpu / f"{kind}.json"
    return read_run(path if path.exists() else path.with_suffix(".json.gz"))


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
    root = Path(root) if root is not None else RESULTS_DIR
    out = []
    folders = [root / gpu] if gpu else sorted(d for d in root.iterdir() if d.is_dir())
    for path in [f for folder in folders for f in run_files(folder)]:
        run = read_run(path)
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


def table(gpu: str = "H200", kind: str = "baselines", root: str | Path | None = None) -> str:
    """The run as printed by the bench CLI: time in us (% of floor) per implementation."""
    from .bench.cli import format_table

    run = load_run(gpu, kind, root)
    head = (
        f"{kind} measured on {run['env'].get('gpu')} ({run['env'].get('date', '')[:10]}); "
        f"ceilings: read {run['ceilings']['read_bytes_per_s'] / 1e12:.2f} TB/s, "
        f"bf16 {run['ceilings']['bf16_flops_per_s'] / 1e12:.0f} TFLOP/s"
    )
    return head + "\n" + format_table(run)
