"""``python -m pearl_moe selftest``: everything to run on a GPU the kernels have never run on, in one go.

Written for the first B200 (or B300) that runs the sm_100a kernels, and run end to end on the H200
with the sm_90a kernels, so that on that day only the architecture differs. From a clone of the
repository (the GPU tests live in ``tests/``)::

    python -m pearl_moe selftest                 # every phase; results under results/<GPU>/
    python -m pearl_moe selftest --quick         # fewer shapes and rounds in tune/ablation/compare
    python -m pearl_moe selftest --phases tests,descriptors,sanitizers   # correctness only

Phases, in order (each is a child process, so a crash or a hang in one does not stop the next;
each writes its log, and its data where it has some, under ``--out``):

``environment``  GPU, SM count, clocks, driver, torch / DSL versions, date: ``environment.json``
``tests``        ``pytest -m gpu``: every GPU test of the package, this architecture's kernels
``descriptors``  the per-expert TMA store descriptors patched on the device
                 (:mod:`pearl_moe.diagnostics.descriptor_check`): bytes and clipped stores
``sanitizers``   compute-sanitizer memcheck, racecheck and synccheck on the cases most likely to
                 break first (:data:`CASES`): stage 3 with experts of 1, 15, 16 and 200 rows;
                 stage 7 with fewer K tiles than ring entries and ``n`` not a multiple of 512;
                 stage 6 with an odd K-tile count; zero-row experts in every case
``tune``         ``python -m pearl_moe tune``: this GPU's table of default configurations
``ablation``     ``python -m pearl_moe bench --kind ablation``: each course stage against the last
``compare``      ``python -m pearl_moe bench --compare``: the default call (with the new table)
                 against every baseline that runs here, interleaved rounds

The last lines printed say which phases passed and what to send back. A phase that fails does not
stop the others; the exit status is 1 if any failed, 2 if nothing could run (no GPU, or a GPU
the kernels have no target for).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CASES", "PHASES", "Phase", "cases_for", "main", "plan", "run_cases", "summary"]

PHASES = ("environment", "tests", "descriptors", "sanitizers", "tune", "ablation", "compare")
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck")
ROOT = Path(__file__).resolve().parents[2]

#: The sanitizer cases: (name, course stage, config changes per kernel family ("*": every family;
#: a family not named skips the case), expert row counts, n, k). Every case has zero-row experts;
#: n and k are chosen for what each case stresses (see the module doc). The TMA-store cases
#: (stages 2 and 3) are the ones that store through descriptors patched on the device on sm_100a.
CASES = (
    ("stage 3, experts of 1, 15, 16 and 200 rows", 3, {"*": {}}, (1, 15, 0, 16, 200, 0), 384, 256),
    ("stage 2, experts of 1, 15, 16 and 200 rows", 2, {"*": {}}, (1, 15, 0, 16, 200, 0), 384, 256),
    (
        "stage 3, 2-CTA 256 x 256 tiles with TMA stores",
        3,
        {"sm_100a": {"tile_m": 256, "tile_n": 256, "cta_group": 2}},
        (1, 0, 15, 16, 200, 300),
        512,
        256,
    ),
    ("stage 6, odd K-tile count (3 tiles, two-tile B entries)", 6, {"*": {}}, (5, 0, 70, 130), 384, 192),
    ("stage 7, 2 K tiles (fewer than the ring holds), n = 640", 7, {"*": {}}, (0, 3, 300, 17), 640, 128),
    ("stage 5, zero-row experts around a ragged one", 5, {"*": {}}, (0, 0, 37, 0), 256, 320),
)  # fmt: skip


def cases_for(family: str, cases=CASES):
    """``(name, stage, config, counts, n, k)`` of the cases that apply to ``family``."""
    from ..kernels.ladder import stage_config

    out = []
    for name, stage, changes, counts, n, k in cases:
        change = changes.get(family, changes.get("*"))
        if change is not None:
            out.append((name, stage, stage_config(family, stage).with_(**change), counts, n, k))
    return out


@dataclass
class Phase:
    """One step of the self-test: a child process and where its output goes."""

    name: str
    command: list[str]
    log: str
    env: dict = field(default_factory=dict)
    timeout_s: float = 3600.0
    files: list[str] = field(default_factory=list)
    ok: bool | None = None
    returncode: int | None = None
    seconds: float = 0.0
    note: str = ""


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m pearl_moe selftest",
        description="First run on a new GPU: GPU tests, descriptor check, compute-sanitizer, "
        "tune, ablation and comparison, with one summary at the end.",
    )
    p.add_argument("--out", default=None, help="output folder (default results/<GPU>/)")
    p.add_argument("--phases", default=",".join(PHASES), help="comma list of " + ", ".join(PHASES))
    p.add_argument(
        "--quick",
        action="store_true",
        help="tune, ablation and compare on fewer shapes and rounds (about 10 minutes in all)",
    )
    p.add_argument("--sanitizer", default=None, help="compute-sanitizer binary (default: found)")
    p.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    p.add_argument(
        "--cases", action="store_true", help=argparse.SUPPRESS
    )  # run CASES in this process (what each sanitizer wraps)
    return p.parse_args(argv)


def find_sanitizer(explicit: str | None = None) -> str | None:
    """compute-sanitizer: ``explicit``, else on PATH, else under ``$CUDA_HOME`` or /usr/local/cuda."""
    if explicit:
        return explicit
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if base and Path(base, "bin", "compute-sanitizer").is_file():
            return str(Path(base, "bin", "compute-sanitizer"))
    return None


def plan(args, gpu: str, out: Path, sanitizer: str | None) -> list[Phase]:
    """The phases to run, as child processes, in order."""
    py = sys.executable
    wanted = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = sorted(set(wanted) - set(PHASES))
    if unknown:
        raise ValueError(f"unknown phases {unknown}; known: {', '.join(PHASES)}")
    table = out / f"tuning_{gpu}.json"
    quick_tokens = "1,64,4096"
    steps: list[Phase] = []
    for name in PHASES:
        if name not in wanted:
            continue
        if name == "environment":
            steps.append(
                Phase(name, [py, "-m", "pearl_moe.diagnostics.selftest", "--environment", str(out)], "environment.log",
                      files=["environment.json"], timeout_s=120)
            )  # fmt: skip
        elif name == "tests":
            steps.append(
                Phase(name, [py, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                             str(ROOT / "tests")], "pytest_gpu.log", timeout_s=3600)
            )  # fmt: skip
        elif name == "descriptors":
            steps.append(
                Phase(name, [py, "-m", "pearl_moe.diagnostics.selftest", "--descriptors", str(out)],
                      "descriptors.log", files=["descriptors.json"], timeout_s=600)
            )  # fmt: skip
        elif name == "sanitizers":
            for tool in SANITIZER_TOOLS:
                cmd = [sanitizer or "compute-sanitizer", "--tool", tool, "--error-exitcode", "1"]
                if tool == "memcheck":
                    cmd += ["--report-api-errors", "no"]
                steps.append(
                    Phase(f"sanitizers:{tool}", cmd + [py, "-m", "pearl_moe.diagnostics.selftest", "--cases"],
                          f"{tool}.log", timeout_s=1800)
                )  # fmt: skip
        elif name == "tune":
            cmd = [py, "-m", "pearl_moe", "tune", "--out", str(table), "--no-merge"]
            if args.quick:
                cmd += [
                    "--tokens",
                    quick_tokens,
                    "--limit",
                    "8",
                    "--rounds",
                    "2",
                    "--skew-tokens",
                    "",
                ]
            steps.append(Phase(name, cmd, "tune.log", files=[table.name], timeout_s=7200))
        elif name == "ablation":
            cmd = [py, "-m", "pearl_moe", "bench", "--kind", "ablation",
                   "--out", str(out / "ablation.json")]  # fmt: skip
            if args.quick:
                cmd += ["--tokens", "16,4096", "--rounds", "5", "--reps", "3"]
            steps.append(Phase(name, cmd, "ablation.log", files=["ablation.json"], timeout_s=3600))
        elif name == "compare":
            impls = (
                "pearl,triton,grouped_mm" if args.quick else "pearl,triton,grouped_mm,quack,loop"
            )
            cmd = [py, "-m", "pearl_moe", "bench", "--compare", "--kind", "compare",
                   "--impls", impls, "--out", str(out / "compare.json")]  # fmt: skip
            if args.quick:
                cmd += ["--tokens", quick_tokens, "--rounds", "6"]
            # the default call reads the table the tune phase wrote, when it wrote one
            env = {"PEARL_MOE_TUNING": str(table)} if "tune" in wanted else {}
            steps.append(
                Phase(name, cmd, "compare.log", env=env, files=["compare.json"], timeout_s=7200)
            )
    return steps


def run_phase(phase: Phase, out: Path, runner=None) -> Phase:
    """Run one phase's command with its output in ``out / phase.log``; fills ok, time, note.

    ``runner`` replaces :func:`subprocess.run` (tests).
    """
    runner = runner or subprocess.run
    env = dict(os.environ, PYTHONUNBUFFERED="1", **phase.env)
    if phase.name.startswith("sanitizers") and not Path(phase.command[0]).is_file():
        if shutil.which(phase.command[0]) is None:
            phase.ok, phase.note = None, "skipped: compute-sanitizer not found (--sanitizer PATH)"
            return phase
    t0 = time.monotonic()
    with open(out / phase.log, "w") as log:
        try:
            res = runner(
                phase.command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
                timeout=phase.timeout_s, check=False,
            )  # fmt: skip
            phase.returncode = res.returncode
            phase.ok = res.returncode == 0
        except subprocess.TimeoutExpired:
            phase.ok, phase.note = False, f"timed out after {phase.timeout_s:.0f} s"
        except OSError as err:
            phase.ok, phase.note = False, f"could not start: {err}"
    phase.seconds = round(time.monotonic() - t0, 1)
    if not phase.note:
        phase.note = _last_line(out / phase.log)
    return phase


def _last_line(path: Path) -> str:
    """The log's last non-empty line that says something (pytest's summary, a sanitizer's)."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for key in (
        "passed",
        "failed",
        "ERROR SUMMARY",
        "RACECHECK SUMMARY",
        "descriptor check",
        "wrote",
    ):
        for ln in reversed(lines):
            if key in ln:
                return ln[:200]
    return lines[-1][:200] if lines else ""


def summary(phases: list[Phase], out: Path, gpu: str) -> str:
    """The closing lines: one per phase, then what to send back."""
    width = max((len(p.name) for p in phases), default=10)
    lines = [f"pearl-moe selftest on {gpu}: results in {out}"]
    for p in phases:
        status = {True: "PASSED", False: "FAILED", None: "skipped"}[p.ok]
        lines.append(f"  {p.name:<{width}}  {status:<7} {p.seconds:7.1f} s  {p.note}")
    failed = [p.name for p in phases if p.ok is False]
    lines.append(
        "all phases passed" if not failed else f"FAILED: {', '.join(failed)} (logs under {out})"
    )
    lines.append(
        f"send back: the folder {out} (tar czf selftest_{gpu}.tgz {out}); it holds every log, "
        "environment.json and the measurements, and tuning_<GPU>.json goes to "
        "pearl_moe/tuning/<GPU>.json"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------- in-process modes
def run_cases(family: str, cases=CASES) -> bool:
    """Run the :data:`CASES` of ``family``, each against the float32 reference on a NaN-poisoned
    output. What the sanitizers wrap (and a GPU test). Returns True when every case is right."""
    from ..bench.verify import random_inputs, run_checked
    from ..kernels import grouped_gemm

    ok = True
    for seed, (name, stage, config, counts, n, k) in enumerate(cases_for(family, cases)):
        A, W, offs = random_inputs(counts, n, k, seed=seed)
        res = run_checked(
            lambda A, W, o, out, st=stage, cfg=config: grouped_gemm(
                A, W, o, out=out, stage=st, config=cfg
            ),
            A, W, offs, offs.tolist(),
        )  # fmt: skip
        print(f"{family} {name}: {config.describe()}: {res}", flush=True)
        ok &= bool(res["ok"])
    print(f"cases: {'all right' if ok else 'FAILED'}", flush=True)
    return ok


def _environment(out: Path) -> int:
    from ..results import environment

    env = environment("python -m pearl_moe selftest")
    (out / "environment.json").write_text(json.dumps(env, indent=1, default=str))
    print(json.dumps(env, indent=1, default=str))
    print(
        f"environment: {env.get('gpu')}, {env.get('sm_count')} SMs, driver {env.get('driver')}, "
        f"torch {env.get('torch')}, DSL {env.get('cutlass_dsl')}, {env.get('date')}"
    )
    return 0


def _descriptors(out: Path) -> int:
    from .descriptor_check import check_descriptors, format_report

    report = check_descriptors()
    (out / "descriptors.json").write_text(json.dumps(report, indent=1))
    print(format_report(report))
    return 0 if report["ok"] else 1


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # in-process modes a phase runs as its child process
    for flag, fn in (("--environment", _environment), ("--descriptors", _descriptors)):
        if argv[:1] == [flag]:
            return fn(Path(argv[1]))
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            "selftest runs on a CUDA GPU; none is visible here. On a CPU, `pytest` checks what "
            "can be checked without one (every kernel compiled, its SASS against the budgets).",
            file=sys.stderr,
        )
        return 2
    from ..kernels.autotune import gpu_name
    from ..kernels.targets import gpu_target

    try:
        family, target = gpu_target(torch.device("cuda"))
    except ValueError as err:
        print(f"selftest: {err}", file=sys.stderr)
        return 2
    if args.cases:
        return 0 if run_cases(family) else 1
    gpu = gpu_name("cuda") or "GPU"
    out = Path(args.out) if args.out else ROOT / "results" / gpu
    out.mkdir(parents=True, exist_ok=True)
    try:
        phases = plan(args, gpu, out, find_sanitizer(args.sanitizer))
    except ValueError as err:
        print(f"selftest: {err}", file=sys.stderr)
        return 2
    print(
        f"selftest: {gpu} ({family} kernels compiled for {target}); {len(phases)} phases -> {out}"
    )
    if args.dry_run:
        for p in phases:
            print(f"  {p.name}: {' '.join(p.command)}  > {p.log}")
        return 0
    for p in phases:
        print(f"--- {p.name}: {' '.join(p.command)}", flush=True)
        run_phase(p, out)
        print(f"    {'ok' if p.ok else 'FAILED' if p.ok is False else 'skipped'} in {p.seconds} s: "
              f"{p.note}", flush=True)  # fmt: skip
    record = {
        "gpu": gpu,
        "family": family,
        "target": target,
        "argv": argv,
        "phases": [
            {
                k: getattr(p, k)
                for k in ("name", "ok", "returncode", "seconds", "note", "log", "files")
            }
            | {"command": " ".join(p.command)}
            for p in phases
        ],
    }
    (out / "selftest.json").write_text(json.dumps(record, indent=1))
    print()
    print(summary(phases, out, gpu))
    return 1 if any(p.ok is False for p in phases) else 0


if __name__ == "__main__":
    sys.exit(main())
