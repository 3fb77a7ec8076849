"""``python -m pearl_moe selftest``: everything to run on a GPU the kernels have never run on, in one go.

Written for the first B200 (or B300) that runs the sm_100a kernels, and run end to end on Hopper
with the sm_90a kernels, so that on that day only the architecture differs. From a clone of the
repository (the GPU tests live in ``tests/``; ``docs/first_run_b200.md`` says what to send back)::

    python -m pearl_moe selftest                 # every phase; results under results/<GPU>/
    python -m pearl_moe selftest --dry-run       # the plan, with each phase's time limit (no GPU)
    python -m pearl_moe selftest --quick         # fewer shapes and rounds in tune/ablation/compare
    python -m pearl_moe selftest --phases smoke,descriptors,tests,multitile   # correctness only

Phases, in order. Each is a child process (or several) with a time limit, so a crash or a hang
in one is recorded under its name and the next phase still runs; each writes its log, and its
data where it has some, under ``--out``:

``environment``  GPU, SM count, the driver's count of 2-CTA clusters that fit at once beside
                 ``sms // 2``, the compile target, clocks, driver, versions: ``environment.json``
``smoke``        one small launch per kernel family (:data:`gpu_cases.SMOKE`), each in its own
                 process with a short limit: a hang or an illegal instruction names its kernel
                 family before anything long runs; each records the architecture of the cubin
                 the driver loaded (``smoke_<family>.json``)
``descriptors``  the per-expert TMA store descriptors patched on the device, with the GEMM's own
                 store atoms (:mod:`pearl_moe.diagnostics.descriptor_check`)
``tests``        ``pytest -m gpu``: on a B200 the sm_100a suite (``tests/test_kernels_gpu.py``,
                 ``test_kernels_sm100_gpu.py``, ``test_multi_tile_gpu.py``) and every other GPU
                 test, under a per-test limit (:mod:`pearl_moe.diagnostics.watchdog`): a hung test
                 is named, and pytest goes on with the tests after it in a fresh process
``sanitizers``   compute-sanitizer memcheck, racecheck and synccheck on :data:`gpu_cases.SANITIZER`
``multitile``    the same three tools on the multi-tile cases (:data:`gpu_cases.MULTI_TILE`: 2-4
                 CTAs or clusters, 5-70 tiles each, K tiles several times every ring)
``tune``         ``python -m pearl_moe tune``: this GPU's table of default configurations
``ablation``     ``python -m pearl_moe bench --kind ablation``: each course stage against the last
``compare``      ``python -m pearl_moe bench --compare``: the default call (with the new table)
                 against every baseline that runs here, interleaved rounds

The last lines printed say which phases passed, what the run found about the GPU (the cubin
architecture the driver loaded, the cluster count) and what to send back. A phase that fails does
not stop the others; the exit status is 1 if any failed, 2 if nothing could run (no GPU, or a GPU
the kernels have no target for).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "PHASES",
    "Phase",
    "cases_for",
    "loaded_cubins",
    "main",
    "plan",
    "run_cases",
    "run_phase",
    "summary",
]

PHASES = (
    "environment",
    "smoke",
    "descriptors",
    "tests",
    "sanitizers",
    "multitile",
    "tune",
    "ablation",
    "compare",
)
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck")
ROOT = Path(__file__).resolve().parents[2]
#: The GPU a plan is written for when this machine has none (``--dry-run`` on a CPU).
PLAN_GPU = {"sm_100a": "B200", "sm_90a": "H200"}
#: Time limits (seconds): a smoke launch (its compile included), one GPU test, whole phases.
SMOKE_TIMEOUT_S = 300
TEST_TIMEOUT_S = 600
TESTS_TIMEOUT_S = 3 * 3600
#: Restarts of the test phase after a hung or crashed test, at most.
MAX_RESTARTS = 8


def cases_for(family: str):
    """``(name, stage, config, counts, n, k)`` of the sanitizer cases of ``family``
    (:data:`pearl_moe.diagnostics.gpu_cases.SANITIZER`; config None: the stage's course one)."""
    from .gpu_cases import SANITIZER, course

    return [
        (c.id, c.stage, c.config or course(family, c.stage), c.counts, c.n, c.k)
        for c in SANITIZER[family]
    ]


@dataclass
class Phase:
    """One step of the self-test: a child process and where its output goes. ``kind``
    ``"pytest"`` is run by :func:`run_phase` under the per-test watchdog, restarted after a hung
    or crashed test."""

    name: str
    command: list[str]
    log: str
    env: dict = field(default_factory=dict)
    timeout_s: float = 3600.0
    files: list[str] = field(default_factory=list)
    kind: str = "command"
    test_timeout_s: float | None = None
    ok: bool | None = None
    returncode: int | None = None
    seconds: float = 0.0
    note: str = ""
    details: dict = field(default_factory=dict)

    def limit(self) -> str:
        text = f"{self.timeout_s:.0f} s"
        if self.test_timeout_s:
            text += f" in all, {self.test_timeout_s:.0f} s a test"
        return text


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m pearl_moe selftest",
        description="First run on a new GPU: smoke launches, descriptor check, GPU tests, "
        "compute-sanitizer, tune, ablation and comparison, with one summary at the end.",
    )
    p.add_argument("--out", default=None, help="output folder (default results/<GPU>/)")
    p.add_argument("--phases", default=",".join(PHASES), help="comma list of " + ", ".join(PHASES))
    p.add_argument(
        "--quick",
        action="store_true",
        help="tune, ablation and compare on fewer shapes and rounds (about 10 minutes in all)",
    )
    p.add_argument("--sanitizer", default=None, help="compute-sanitizer binary (default: found)")
    p.add_argument(
        "--tools",
        default=",".join(SANITIZER_TOOLS),
        help="compute-sanitizer tools of the sanitizers and multitile phases",
    )
    p.add_argument("--test-timeout", type=float, default=TEST_TIMEOUT_S,
                   help=f"seconds one GPU test may run (default {TEST_TIMEOUT_S})")  # fmt: skip
    p.add_argument("--smoke-timeout", type=float, default=SMOKE_TIMEOUT_S,
                   help=f"seconds one smoke launch may take, compile included "
                        f"(default {SMOKE_TIMEOUT_S})")  # fmt: skip
    p.add_argument(
        "--family",
        choices=sorted(PLAN_GPU),
        default=None,
        help="with --dry-run on a machine without a GPU: whose plan to print (default sm_100a)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
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


def _sanitized(sanitizer, tool: str, target: list[str]) -> list[str]:
    cmd = [sanitizer or "compute-sanitizer", "--tool", tool, "--error-exitcode", "1"]
    if tool == "memcheck":
        # cuda-python probes the driver with calls that fail harmlessly; memcheck would count them
        cmd += ["--report-api-errors", "no"]
    return cmd + target


def plan(args, gpu: str, out: Path, sanitizer: str | None, family: str = "sm_100a") -> list[Phase]:
    """The phases to run, as child processes, in order."""
    from .gpu_cases import SMOKE
    from .watchdog import ENV_PROGRESS, ENV_SKIP, ENV_TIMEOUT

    py = sys.executable
    me = [py, "-m", "pearl_moe.diagnostics.selftest"]
    wanted = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = sorted(set(wanted) - set(PHASES))
    if unknown:
        raise ValueError(f"unknown phases {unknown}; known: {', '.join(PHASES)}")
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if set(tools) - set(SANITIZER_TOOLS):
        raise ValueError(f"unknown tools {sorted(set(tools) - set(SANITIZER_TOOLS))}")
    table = out / f"tuning_{gpu}.json"
    quick_tokens = "1,64,4096"
    steps: list[Phase] = []
    for name in PHASES:
        if name not in wanted:
            continue
        if name == "environment":
            steps.append(Phase(name, [*me, "--environment", str(out)], "environment.log",
                               files=["environment.json"], timeout_s=300))  # fmt: skip
        elif name == "smoke":
            for case in SMOKE[family]:
                steps.append(
                    Phase(f"smoke:{case.id}", [*me, "--smoke", case.id, str(out)],
                          f"smoke_{case.id}.log", files=[f"smoke_{case.id}.json"],
                          timeout_s=args.smoke_timeout)
                )  # fmt: skip
        elif name == "descriptors":
            steps.append(Phase(name, [*me, "--descriptors", str(out)], "descriptors.log",
                               files=["descriptors.json"], timeout_s=900))  # fmt: skip
        elif name == "tests":
            progress = out / "pytest_progress.tsv"
            env = {
                ENV_PROGRESS: str(progress),
                ENV_SKIP: str(out / "pytest_skip.txt"),
                ENV_TIMEOUT: f"{args.test_timeout:g}",
            }
            cmd = [py, "-m", "pytest", "-m", "gpu", "-q", "-rfE", "-p", "no:cacheprovider",
                   "-p", "pearl_moe.diagnostics.watchdog", str(ROOT / "tests")]  # fmt: skip
            steps.append(
                Phase(name, cmd, "pytest_gpu.log", env=env, files=[progress.name],
                      timeout_s=TESTS_TIMEOUT_S, kind="pytest", test_timeout_s=args.test_timeout)
            )  # fmt: skip
        elif name == "sanitizers":
            for tool in tools:
                steps.append(Phase(f"sanitizers:{tool}", _sanitized(sanitizer, tool, [*me, "--cases"]),
                                   f"{tool}.log", timeout_s=1800))  # fmt: skip
        elif name == "multitile":
            for tool in tools:
                steps.append(
                    Phase(f"multitile:{tool}", _sanitized(sanitizer, tool, [*me, "--multitile"]),
                          f"multitile_{tool}.log", timeout_s=2400)
                )  # fmt: skip
        elif name == "tune":
            cmd = [py, "-m", "pearl_moe", "tune", "--out", str(table), "--no-merge"]
            if args.quick:
                cmd += ["--tokens", quick_tokens, "--limit", "8", "--rounds", "2",
                        "--skew-tokens", ""]  # fmt: skip
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


# ---------------------------------------------------------------------------- running
def _run_in_group(command, stdout, stderr, env, cwd, timeout):
    """:func:`subprocess.run` whose time limit ends the child's whole process group (a
    compute-sanitizer and the program it wraps, a pytest and its compile workers): a hung GPU
    kernel's process must not outlive its phase."""
    proc = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=env, cwd=cwd,
                            start_new_session=True)  # fmt: skip
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        raise
    return subprocess.CompletedProcess(command, proc.returncode)


def run_phase(phase: Phase, out: Path, runner=None) -> Phase:
    """Run one phase's command with its output in ``out / phase.log``; fills ok, time, note.

    ``runner`` replaces the process runner (tests; the signature of :func:`subprocess.run`'s
    ``(command, stdout, stderr, env, cwd, timeout)``). A ``"pytest"`` phase runs under the
    per-test watchdog (:func:`_run_pytest`)."""
    runner = runner or _run_in_group
    env = dict(os.environ, PYTHONUNBUFFERED="1", **phase.env)
    tool = phase.name.startswith(("sanitizers", "multitile"))
    if tool and not Path(phase.command[0]).is_file() and shutil.which(phase.command[0]) is None:
        phase.ok, phase.note = None, "skipped: compute-sanitizer not found (--sanitizer PATH)"
        return phase
    t0 = time.monotonic()
    if phase.kind == "pytest":
        _run_pytest(phase, out, runner, env)
    else:
        with open(out / phase.log, "w") as log:
            try:
                res = runner(phase.command, stdout=log, stderr=subprocess.STDOUT, env=env,
                             cwd=str(ROOT), timeout=phase.timeout_s)  # fmt: skip
                phase.returncode = res.returncode
                phase.ok = res.returncode == 0
            except subprocess.TimeoutExpired:
                phase.ok = False
                phase.note = f"timed out after {phase.timeout_s:.0f} s (hung?)"
            except OSError as err:
                phase.ok, phase.note = False, f"could not start: {err}"
    phase.seconds = round(time.monotonic() - t0, 1)
    if not phase.note:
        phase.note = _last_line(out / phase.log)
    return phase


def _run_pytest(phase: Phase, out: Path, runner, env: dict) -> None:
    """pytest under :mod:`pearl_moe.diagnostics.watchdog`: when a test hangs past its limit or
    crashes the process (or poisons its CUDA context), the test is recorded and pytest starts
    again without the tests already run, until every test has run or the phase's time is up.
    ``phase.details``: counts of outcomes, the hung tests, the restarts."""
    from .watchdog import ENV_PROGRESS, ENV_SKIP, read_progress

    progress, skip = Path(env[ENV_PROGRESS]), Path(env[ENV_SKIP])
    for path in (progress, skip, Path(str(progress) + ".tracebacks")):
        path.unlink(missing_ok=True)
    deadline = time.monotonic() + phase.timeout_s
    hung: list[str] = []
    poisoned = 0
    runs = 0
    timed_out = False
    with open(out / phase.log, "w") as log:
        while runs <= MAX_RESTARTS:
            runs += 1
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            log.write(f"=== pytest run {runs} ===\n")
            log.flush()
            try:
                res = runner(phase.command, stdout=log, stderr=subprocess.STDOUT, env=env,
                             cwd=str(ROOT), timeout=left)  # fmt: skip
                phase.returncode = res.returncode
            except subprocess.TimeoutExpired:
                timed_out = True
            except OSError as err:
                phase.ok, phase.note = False, f"could not start: {err}"
                return
            state = read_progress(progress)
            new = [t for t in state["hung"] if t not in hung]
            hung += new
            lost_context = len(state["poisoned"]) > poisoned
            poisoned = len(state["poisoned"])
            if timed_out or not (new or lost_context):
                break  # every test ran (or the process ended for a reason of its own)
            for t in new:
                log.write(f"=== {t} did not finish (past {phase.test_timeout_s:g} s, or it "
                          f"crashed the process): going on without it ===\n")  # fmt: skip
            if lost_context:
                log.write(f"=== {state['poisoned'][-1]} left the CUDA context unusable: going "
                          "on in a fresh process ===\n")  # fmt: skip
            log.flush()
            skip.write_text("\n".join([*state["outcomes"], *hung]) + "\n")
    state = read_progress(progress)
    counts: dict = {}
    for outcome, _ in state["outcomes"].values():
        counts[outcome] = counts.get(outcome, 0) + 1
    phase.details = {"outcomes": counts, "hung": hung, "poisoned": state["poisoned"],
                     "runs": runs}  # fmt: skip
    failed = counts.get("failed", 0) + counts.get("error", 0)
    phase.ok = not failed and not hung and not timed_out and phase.returncode in (0, 5)
    text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no test ran"
    if hung:
        text += f"; hung or crashed: {', '.join(hung)} (limit {phase.test_timeout_s:g} s a test)"
    if timed_out:
        text += f"; the phase ran out of its {phase.timeout_s:.0f} s"
    phase.note = text


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
        "smoke:",
        "multi-tile:",
        "wrote",
    ):
        for ln in reversed(lines):
            if key in ln:
                return ln[:200]
    return lines[-1][:200] if lines else ""


def _gpu_lines(record: dict) -> list[str]:
    """What the run found about the GPU: SMs, clusters, the loaded cubins' architecture."""
    env = record.get("environment") or {}
    lines = []
    if env.get("sm_count"):
        clusters = env.get("max_active_clusters_2")
        lines.append(
            f"GPU: {env.get('gpu')}, capability {env.get('capability')}, {env['sm_count']} SMs; "
            f"clusters of 2 CTAs the driver fits at once: {clusters} (sms // 2 = "
            f"{env['sm_count'] // 2}); kernels compiled for {env.get('compile_target')}"
        )
    cubins = record.get("cubins") or {}
    if cubins:
        archs = sorted({str(v) for v in cubins.values()})
        lines.append(
            f"cubins the driver loaded (smoke launches): {', '.join(archs)}"
            + ("" if len(archs) == 1 else f" ({cubins})")
        )
    return lines


def summary(phases: list[Phase], out: Path, gpu: str, record: dict | None = None) -> str:
    """The closing lines: one per phase, what the run found about the GPU, what to send back."""
    width = max((len(p.name) for p in phases), default=10)
    lines = [f"pearl-moe selftest on {gpu}: results in {out}"]
    for p in phases:
        status = {True: "PASSED", False: "FAILED", None: "skipped"}[p.ok]
        lines.append(f"  {p.name:<{width}}  {status:<7} {p.seconds:7.1f} s  {p.note}")
    lines += _gpu_lines(record or {})
    failed = [p.name for p in phases if p.ok is False]
    hung = [t for p in phases for t in p.details.get("hung", [])]
    timed_out = [p.name for p in phases if "timed out" in p.note]
    if not failed:
        lines.append("all phases passed")
    else:
        lines.append(f"FAILED: {', '.join(failed)} (logs under {out})")
        if timed_out:
            lines.append(f"  hung (ran past their limit): {', '.join(timed_out)}")
        if hung:
            lines.append(f"  hung or crashed tests: {', '.join(hung)}")
    lines.append(
        f"send back: tar czf selftest_{gpu}.tgz -C {out.parent} {out.name}  (every log, "
        "selftest.json, environment.json, smoke_*.json, descriptors.json, pytest_progress.tsv "
        f"and the measurements; tuning_{gpu}.json becomes pearl_moe/tuning/{gpu}.json)"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------- in-process modes
def run_cases(family: str) -> bool:
    """Run the sanitizer cases of ``family`` (:data:`gpu_cases.SANITIZER`), each against the
    float32 reference on a NaN-poisoned output. What the sanitizers wrap (and a GPU test). The
    references run on the CPU, so no cuBLAS GEMM runs under the sanitizer (cuBLAS's own kernels
    report racecheck hazards on an H100): the GPU runs our kernels and PyTorch's small input,
    fill and comparison kernels. Returns True when every case is right."""
    from .gpu_cases import SANITIZER, check_case

    ok = True
    for seed, case in enumerate(SANITIZER[family]):
        res = check_case(case, seed=seed, cpu_reference=True)
        print(f"{family} {case.id}: {res}", flush=True)
        ok &= bool(res["ok"])
    print(f"cases: {'all right' if ok else 'FAILED'}", flush=True)
    return ok


def run_multitile(family: str, names=None) -> bool:
    """The multi-tile cases of ``family`` (:data:`gpu_cases.MULTI_TILE`, all or ``names``): what
    the multitile phase wraps in compute-sanitizer; the references run on the CPU, as in
    :func:`run_cases`. Returns True when every case is right."""
    from .gpu_cases import MULTI_TILE, check_any

    ok = True
    for case in MULTI_TILE[family]:
        if names and case.id not in names:
            continue
        t0 = time.monotonic()
        res = check_any(case, seed=11, cpu_reference=True)
        print(f"{family} {case.id} ({case.ctas} CTAs): {res} in {time.monotonic() - t0:.1f} s",
              flush=True)  # fmt: skip
        ok &= bool(res["ok"])
    print(f"multi-tile: {'all right' if ok else 'FAILED'}", flush=True)
    return ok


def loaded_cubins(fn, device_index: int = 0) -> list[dict]:
    """The kernels of a compiled function's loaded library as the driver sees them: name, the
    architecture of the binary it loaded (``binary_version`` 100 = sm_100) and the PTX version."""
    import cuda.bindings.driver as drv

    def ok(result):
        err, *values = result
        if err != drv.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{err}")
        return values[0] if len(values) == 1 else values

    library = drv.CUlibrary(int(fn.library))
    count = ok(drv.cuLibraryGetKernelCount(library))
    kernels = ok(drv.cuLibraryEnumerateKernels(count, library))
    device = ok(drv.cuDeviceGet(device_index))
    attr = drv.CUfunction_attribute
    found = []
    for kernel in kernels:
        name = ok(drv.cuKernelGetName(kernel))
        found.append(
            {
                "kernel": name.decode() if isinstance(name, bytes) else str(name),
                "binary_version": int(ok(drv.cuKernelGetAttribute(
                    attr.CU_FUNC_ATTRIBUTE_BINARY_VERSION, kernel, device))),
                "ptx_version": int(ok(drv.cuKernelGetAttribute(
                    attr.CU_FUNC_ATTRIBUTE_PTX_VERSION, kernel, device))),
            }
        )  # fmt: skip
    return found


def _smoke(name: str, out: Path) -> int:
    """One smoke launch (:data:`gpu_cases.SMOKE`): run it, check it, name the cubin loaded."""
    import torch

    from ..kernels import api, autotune
    from ..kernels.targets import compile_target, persistent_ctas
    from .gpu_cases import SMOKE, check_any

    family = api.arch_of("cuda")
    case = next((c for c in SMOKE[family] if c.id == name), None)
    if case is None:
        print(f"smoke: no case {name!r} for {family}", file=sys.stderr)
        return 2
    print(f"smoke: {family} {case.id}: compiling and launching ...", flush=True)
    t0 = time.monotonic()
    res = check_any(case, seed=1)
    record = {"case": case.id, "family": family, "target": compile_target(family),
              "seconds": round(time.monotonic() - t0, 2), **res}  # fmt: skip
    try:
        stage, config = case.resolved(family, autotune.gpu_name("cuda"))
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        ctas = persistent_ctas(family, config, sms, "cuda")
        fn = api.compiled_kernel(family, stage, config, case.n, case.k, len(case.counts), ctas)
        record["cubins"] = loaded_cubins(fn)
        versions = sorted({c["binary_version"] for c in record["cubins"]})
        record["binary_version"] = versions[0] if len(versions) == 1 else versions
    except Exception as err:  # reported beside the result: the launch itself is what matters
        record["cubins_error"] = f"{type(err).__name__}: {err}"[:300]
    (out / f"smoke_{case.id}.json").write_text(json.dumps(record, indent=1, default=str))
    print(f"smoke: {case.id}: {'ok' if res['ok'] else 'WRONG'} {res} "
          f"(cubin binary version {record.get('binary_version', '?')})", flush=True)  # fmt: skip
    return 0 if res["ok"] else 1


def _environment(out: Path) -> int:
    from ..results import environment

    env = environment("python -m pearl_moe selftest")
    try:
        import torch

        from ..kernels.targets import compile_target, gpu_target, max_active_clusters

        family, target = gpu_target(torch.device("cuda"))
        env.update(family=family, target=target, compile_target=compile_target(family))
        env["sms_half"] = env["sm_count"] // 2
        env["max_active_clusters_2"] = max_active_clusters(0, 2)
    except Exception as err:
        env["cluster_query_error"] = f"{type(err).__name__}: {err}"[:300]
    (out / "environment.json").write_text(json.dumps(env, indent=1, default=str))
    print(json.dumps(env, indent=1, default=str))
    print(
        f"environment: {env.get('gpu')}, {env.get('sm_count')} SMs, clusters of 2 that fit: "
        f"{env.get('max_active_clusters_2')} (sms // 2 = {env.get('sms_half')}), driver "
        f"{env.get('driver')}, torch {env.get('torch')}, DSL {env.get('cutlass_dsl')}, "
        f"{env.get('date')}"
    )
    return 0


def _descriptors(out: Path) -> int:
    from .descriptor_check import check_all, format_report

    report = check_all()
    (out / "descriptors.json").write_text(json.dumps(report, indent=1))
    print(format_report(report))
    return 0 if report["ok"] else 1


def _record(phases, argv, gpu, family, target, out: Path) -> dict:
    """``selftest.json``: the phases, the GPU's facts from ``environment.json`` and the cubins
    the smoke launches loaded."""
    try:
        env = json.loads((out / "environment.json").read_text())
    except (OSError, ValueError):
        env = {}
    cubins = {}
    for path in sorted(out.glob("smoke_*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        cubins[data.get("case", path.stem)] = data.get("binary_version", data.get("cubins_error"))
    keys = ("gpu", "capability", "sm_count", "sms_half", "max_active_clusters_2", "family",
            "target", "compile_target", "driver", "torch", "cutlass_dsl")  # fmt: skip
    return {
        "gpu": gpu,
        "family": family,
        "target": target,
        "argv": argv,
        "environment": {k: env.get(k) for k in keys if k in env},
        "cubins": cubins,
        "phases": [
            {
                k: getattr(p, k)
                for k in ("name", "ok", "returncode", "seconds", "note", "log", "files", "details")
            }
            | {"command": " ".join(p.command), "timeout_s": p.timeout_s}
            for p in phases
        ],
    }


def _child_mode(argv: list[str]) -> int | None:
    """The in-process modes a phase runs as its child process; None if ``argv`` is none."""
    if argv[:1] in (["--environment"], ["--descriptors"]):
        fn = _environment if argv[0] == "--environment" else _descriptors
        return fn(Path(argv[1]))
    if argv[:1] == ["--smoke"]:
        return _smoke(argv[1], Path(argv[2]))
    if argv[:1] in (["--cases"], ["--multitile"]):
        from ..kernels.api import arch_of

        family = arch_of("cuda")
        if argv[0] == "--cases":
            return 0 if run_cases(family) else 1
        return 0 if run_multitile(family, argv[1:]) else 1
    return None


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    child = _child_mode(argv)
    if child is not None:
        return child
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        if args.dry_run:
            family = args.family or "sm_100a"
            gpu = PLAN_GPU[family]
            out = Path(args.out) if args.out else ROOT / "results" / gpu
            print(f"selftest: no GPU here; the plan a {gpu} ({family}) runs, phase by phase:")
            return _print_plan(args, gpu, out, family)
        print(
            "selftest runs on a CUDA GPU; none is visible here. On a CPU, `pytest` checks what "
            "can be checked without one (every kernel compiled, its SASS against the budgets); "
            "`--dry-run` prints the plan.",
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
    gpu = gpu_name("cuda") or "GPU"
    out = Path(args.out) if args.out else ROOT / "results" / gpu
    print(f"selftest: {gpu} ({family} kernels compiled for {target}) -> {out}")
    if args.dry_run:
        return _print_plan(args, gpu, out, family)
    out.mkdir(parents=True, exist_ok=True)
    try:
        phases = plan(args, gpu, out, find_sanitizer(args.sanitizer), family)
    except ValueError as err:
        print(f"selftest: {err}", file=sys.stderr)
        return 2
    for p in phases:
        print(f"--- {p.name} (limit {p.limit()}): {' '.join(p.command)}", flush=True)
        run_phase(p, out)
        print(f"    {'ok' if p.ok else 'FAILED' if p.ok is False else 'skipped'} in {p.seconds} s: "
              f"{p.note}", flush=True)  # fmt: skip
    record = _record(phases, argv, gpu, family, target, out)
    (out / "selftest.json").write_text(json.dumps(record, indent=1, default=str))
    print()
    print(summary(phases, out, gpu, record))
    return 1 if any(p.ok is False for p in phases) else 0


def _print_plan(args, gpu: str, out: Path, family: str) -> int:
    try:
        phases = plan(args, gpu, out, find_sanitizer(args.sanitizer), family)
    except ValueError as err:
        print(f"selftest: {err}", file=sys.stderr)
        return 2
    width = max(len(p.name) for p in phases)
    for p in phases:
        print(f"  {p.name:<{width}}  limit {p.limit():<24} {' '.join(p.command)}  > {p.log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
