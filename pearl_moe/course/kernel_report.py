"""Compile any kernel stage for any target without a GPU and report what the compiler produced.

CuTe DSL compiles for a target chosen by the ``CUTE_DSL_ARCH`` environment variable, read when
``cutlass`` is first imported and configured. To compile for ``sm_100a`` and ``sm_90a`` from the same
program (a notebook, the test suite), every compile runs in a fresh worker process with the
variable set; requests for one target share a worker. Results are cached on disk, keyed by stage,
target, config, problem shape, the DSL version and the source of the kernels, so a notebook or a
test run recompiles only what changed.

A :class:`KernelReport` holds the PTX, the SASS (nvdisasm), instruction counts by opcode family,
the dynamic shared memory the launch requests (read from the lowered host code: the launch
configuration's ``dynamicSmemBytes``) and the TMEM columns the kernel allocates (the operand of
``tcgen05.alloc`` in the PTX)::

    python -m pearl_moe inspect --stage 4 --arch sm_100a
    python -m pearl_moe inspect --stage 3 --arch sm_100a --tile 128x128x64 --ring-depth 6
    python -m pearl_moe inspect --stage 2 --arch sm_90a --sass | less
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config import ARCHS, EPILOGUES, WALKS, GemmConfig, smem_budget, tmem_columns
from ..kernels.compile_cache import source_fingerprint

__all__ = [
    "FAMILIES",
    "KernelReport",
    "cache_dir",
    "compile_many",
    "compile_stage",
    "count_families",
    "count_opcodes",
    "default_shape",
    "main",
    "parse_launches",
    "parse_tmem_columns",
    "stage_module_name",
]

#: SASS opcode families the course talks about, each a regex on the full opcode (with modifiers).
FAMILIES: dict[str, str] = {
    "HGMMA (wgmma)": r"^HGMMA",
    "UTC*MMA (tcgen05.mma)": r"^UTC[A-Z]*MMA",
    "UTCBAR (tcgen05.commit)": r"^UTCBAR",
    "LDTM (tcgen05.ld)": r"^LDTM",
    "UTMALDG (TMA load)": r"^UTMALDG",
    "UTMASTG (TMA store)": r"^UTMASTG",
    # global stores with their cache modifiers (e.g. .NA: no L1 allocation) in any order
    "STG.E.128": r"^STG\.E(\.[A-Z0-9]+)*\.128$",
    "STG.E.ENL2.256": r"^STG\.E(\.[A-Z0-9]+)*\.ENL2\.256$",
    "STG (other)": r"^STG(?!\.E(\.[A-Z0-9]+)*\.128$)(?!\.E(\.[A-Z0-9]+)*\.ENL2\.256$)",
    "STS (SMEM store)": r"^STS",
    "STSM (stmatrix)": r"^STSM",
    "SYNCS (mbarrier)": r"^SYNCS",
    "BAR (named barrier)": r"^BAR",
    # register spills: local-memory stores and loads (none in a kernel that fits its registers)
    "STL/LDL (spills)": r"^(STL|LDL)",
}

_SASS_LINE = re.compile(
    r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)"
)
_ARCH_DIRS = {"sm_100a": "sm100", "sm_90a": "sm90"}


# ---------------------------------------------------------------------- parsing (pure)
def disassemble(cubin: bytes) -> tuple[str, str]:
    """SASS of ``cubin`` from the first disassembler on this machine that reads it.

    Used when the DSL will not dump SASS itself (it refuses an nvdisasm older than the toolchain
    it was built with). Tries ``nvdisasm`` and then ``cuobjdump -sass`` from the CUDA toolkit on
    PATH or under ``/usr/local/cuda/bin``; returns ``(sass, tool)``. Raises ``RuntimeError`` with
    what to install when none works.
    """
    import shutil

    candidates = []
    for name, args in (("nvdisasm", []), ("cuobjdump", ["-sass"])):
        for path in (shutil.which(name), f"/usr/local/cuda/bin/{name}"):
            if path and os.path.exists(path) and (path, args) not in candidates:
                candidates.append((path, args))
    errors = []
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        for path, args in candidates:
            proc = subprocess.run([path, *args, f.name], capture_output=True, text=True)
            if proc.returncode == 0 and count_opcodes(proc.stdout):
                return proc.stdout, f"{os.path.basename(path)} {' '.join(args)}".strip()
            errors.append(f"{path}: exit {proc.returncode} {proc.stderr.strip()[:200]}")
    raise RuntimeError(
        "no disassembler on this machine reads these cubins; install the nvidia-cuda-nvdisasm "
        "wheel (>= 13.3, as pyproject.toml asks). Tried: " + ("; ".join(errors) or "none found")
    )


def count_opcodes(sass: str) -> Counter:
    """Every SASS instruction's full opcode (``STG.E.ENL2.256``, ``UTCHMMA``...) and its count."""
    counts: Counter = Counter()
    for line in sass.splitlines():
        match = _SASS_LINE.match(line)
        if match:
            counts[match.group(1)] += 1
    return counts


def count_families(opcodes: Counter) -> dict[str, int]:
    """Instruction counts grouped into :data:`FAMILIES`."""
    out = {}
    for name, pattern in FAMILIES.items():
        regex = re.compile(pattern)
        out[name] = sum(n for op, n in opcodes.items() if regex.search(op))
    return out


def parse_tmem_columns(ptx: str) -> int:
    """Largest TMEM allocation (columns) among the PTX's ``tcgen05.alloc``; 0 if there is none."""
    best = 0
    for match in re.finditer(r"tcgen05\.alloc\.\S+\s+\[[^\]]+\],\s*(%r\d+|\d+);", ptx):
        operand = match.group(1)
        if operand.isdigit():
            best = max(best, int(operand))
            continue
        # the column count is a constant moved into a register just before the alloc
        head = ptx[: match.start()]
        movs = re.findall(rf"mov\.[bu]32\s+{re.escape(operand)},\s*(\d+);", head)
        if movs:
            best = max(best, int(movs[-1]))
    return best


_LAUNCH_STRUCT = "!llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>"


def parse_launches(host_ir: str) -> list[dict[str, int]]:
    """``{"smem": bytes, "threads": n, "grid": x}`` of every kernel launch in the lowered host IR.

    The launch configuration is a struct ``(grid, block, dynamicSmemBytes, stream, attrs, n)``; the
    compiler stores a constant into field 2 (the sum of the kernel's shared-memory allocations),
    into field ``[1, 0]`` (threads per block) and, for a grid fixed at compile time (the
    persistent kernels' CTAs, the descriptor kernel's experts), into field ``[0, 0]`` (0 where the
    grid depends on a run-time value).
    """
    lines = host_ir.splitlines()
    launches = []

    def constant_before(index: int, name: str) -> int | None:
        pattern = re.compile(rf"^\s*{re.escape(name)} = llvm\.mlir\.constant\((-?\d+) : i\d+\)")
        for j in range(index, -1, -1):
            found = pattern.match(lines[j])
            if found:
                return int(found.group(1))
            if lines[j].lstrip().startswith("llvm.func"):
                return None
        return None

    def stored_constant(index: int, gep_field: str) -> int | None:
        gep = re.compile(rf"^\s*(%\d+) = llvm\.getelementptr (%\d+)\[{re.escape(gep_field)}\]")
        for j in range(min(index, len(lines) - 1), max(index - 60, -1), -1):
            found = gep.match(lines[j])
            if found and _LAUNCH_STRUCT in lines[j]:
                ptr = found.group(1)
                for k in range(j + 1, min(j + 4, len(lines))):
                    store = re.match(rf"^\s*llvm\.store (%\d+), {re.escape(ptr)} ", lines[k])
                    if store:
                        return constant_before(j, store.group(1))
        return None

    for i, line in enumerate(lines):
        if "[0, 2]" in line and _LAUNCH_STRUCT in line and "getelementptr" in line:
            smem = stored_constant(i, "0, 2")
            threads = stored_constant(i + 30, "0, 1, 0") or stored_constant(i, "0, 1, 0")
            grid = stored_constant(i + 30, "0, 0, 0") or stored_constant(i, "0, 0, 0")
            if smem is not None:
                launches.append({"smem": smem, "threads": threads or 0, "grid": grid or 0})
    return launches


# ---------------------------------------------------------------------- stage modules
def stage_module_name(stage: int, arch: str) -> str:
    """``pearl_moe.kernels.<sm100|sm90>.<module>``: the module that holds a stage's kernel
    (:func:`pearl_moe.kernels.ladder.kernel_module_name`; stages 3-7 share the persistent one)."""
    if arch not in _ARCH_DIRS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    from ..kernels.ladder import KERNEL_STAGES, kernel_module_name

    if stage not in KERNEL_STAGES:
        raise ModuleNotFoundError(
            f"no kernel for stage {stage} (stages are {sorted(KERNEL_STAGES)})",
            name=f"pearl_moe.kernels.{_ARCH_DIRS[arch]}.stage{stage}",
        )
    return kernel_module_name(arch, stage)


def default_shape(stage: int) -> tuple[int, int, int, int]:
    """(m, n, k, experts) compiled when none is given: GLM 5.3 gate+up at 64 tokens per GPU.

    Stage 1 is one expert's GEMM (512 rows); grouped stages take 512 rows over 32 experts.
    """
    return (512, 4096, 6144, 1) if stage == 1 else (512, 4096, 6144, 32)


# ---------------------------------------------------------------------- report + cache
@dataclass
class KernelReport:
    stage: int
    arch: str
    config: dict
    effective_config: dict
    label: str
    shape: dict
    compile_seconds: float
    smem_bytes: int
    tmem_columns: int
    launches: list
    families: dict
    opcodes: dict
    files: dict = field(default_factory=dict)
    cached: bool = False
    sass_tool: str = "CuTe DSL (nvdisasm)"

    @property
    def gemm_config(self) -> GemmConfig:
        return GemmConfig(**self.effective_config)

    @property
    def model_smem_bytes(self) -> int:
        return smem_budget(self.gemm_config).total

    @property
    def model_tmem_columns(self) -> int:
        return tmem_columns(self.gemm_config)

    @property
    def ptx(self) -> str:
        return Path(self.files["ptx"]).read_text()

    @property
    def sass(self) -> str:
        return Path(self.files["sass"]).read_text()

    def summary(self) -> str:
        rows = [
            f"stage {self.stage} {self.label}",
            f"  problem   m={self.shape['m']} n={self.shape['n']} k={self.shape['k']} "
            f"experts={self.shape['experts']}",
            f"  compile   {self.compile_seconds:.1f} s" + ("  (cached)" if self.cached else ""),
            f"  SMEM      {self.smem_bytes} B compiled, {self.model_smem_bytes} B budget model",
        ]
        if self.arch == "sm_100a":
            rows.append(
                f"  TMEM      {self.tmem_columns} columns allocated, "
                f"{self.model_tmem_columns} budget model"
            )
        rows.append("  SASS instruction families:")
        rows += [f"    {name:<26} {count:6d}" for name, count in self.families.items() if count]
        rows.append(f"  files     {self.files.get('sass', '')}")
        return "\n".join(rows)


def cache_dir() -> Path:
    """Where compiled artifacts live: ``$PEARL_MOE_CACHE`` or ``~/.cache/pearl-moe``."""
    root = os.environ.get("PEARL_MOE_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "pearl-moe"
    )
    return Path(root) / "inspect"


def _request_key(request: dict, fingerprint: str) -> str:
    blob = json.dumps({**request, "src": fingerprint}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _make_request(stage, config: GemmConfig, m, n, k, experts, sms=None) -> dict:
    dm, dn, dk, de = default_shape(stage)
    request = {
        "stage": int(stage),
        "arch": config.arch,
        "config": asdict(config),
        "m": int(m or dm),
        "n": int(n or dn),
        "k": int(k or dk),
        "experts": int(experts or de),
    }
    if sms is not None:  # only then: the cache keys of requests without a grid stay as they were
        request["sms"] = int(sms)
    return request


def compile_stage(
    stage: int,
    config: GemmConfig,
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    experts: int | None = None,
    *,
    use_cache: bool = True,
) -> KernelReport:
    """Compile one stage for ``config.arch`` with fake tensors (in a worker process); no GPU."""
    return compile_many([(stage, config, m, n, k, experts)], use_cache=use_cache)[0]


def compile_many(requests, *, use_cache: bool = True, timeout: float = 900) -> list[KernelReport]:
    """Compile several ``(stage, config, m, n, k, experts)`` requests; one worker per target.

    A request may carry a seventh item, ``sms``: the persistent grid in CTAs (the kernels'
    ``compile_kernel(..., sms)``, as :func:`pearl_moe.kernels.api.compiled_kernel` compiles for a
    GPU); without it a stage compiles for the target's whole GPU (``compile_fake``).

    Raises ``RuntimeError`` with the worker's message when a compile fails, and
    ``ModuleNotFoundError`` when a stage's module does not exist for that target.
    """
    fingerprint = source_fingerprint()
    reqs = [_make_request(*r) for r in requests]
    results: list[KernelReport | None] = [None] * len(reqs)
    todo: dict[str, list[int]] = {}
    from ..kernels.api import can_implement

    for i, (req, request) in enumerate(zip(reqs, requests, strict=True)):
        stage_module_name(req["stage"], req["arch"])  # fail early, in this process
        problems = can_implement(request[1], req["stage"], req["n"], req["k"])
        if problems:
            raise ValueError(f"{request[1].describe()}: " + "; ".join(problems))
        out = cache_dir() / _request_key(req, fingerprint)
        report_path = out / "report.json"
        if use_cache and report_path.exists():
            data = json.loads(report_path.read_text())
            data["cached"] = True
            results[i] = KernelReport(**data)
        else:
            todo.setdefault(req["arch"], []).append(i)
    for arch, indices in todo.items():
        jobs = [
            {**reqs[i], "out": str(cache_dir() / _request_key(reqs[i], fingerprint))}
            for i in indices
        ]
        for i, data in zip(indices, _run_worker(arch, jobs, timeout), strict=True):
            results[i] = KernelReport(**data)
    return results  # type: ignore[return-value]


def _run_worker(arch: str, jobs: list[dict], timeout: float) -> list[dict]:
    """Compile ``jobs`` for ``arch`` in a fresh process; SASS from the DSL's own dump, or, where
    the DSL refuses this machine's nvdisasm (it wants CUDA >= 13.3, e.g. the pip wheel
    ``nvidia-cuda-nvdisasm``), from whichever disassembler is on the machine."""
    try:
        return _run_worker_once(arch, jobs, timeout, keep="ptx,cubin,sass")
    except RuntimeError as exc:
        if "nvdisasm" not in str(exc):
            raise
        return _run_worker_once(arch, jobs, timeout, keep="ptx,cubin")


def _run_worker_once(arch: str, jobs: list[dict], timeout: float, keep: str) -> list[dict]:
    env = dict(os.environ)
    env["CUTE_DSL_ARCH"] = arch
    env["CUTE_DSL_KEEP"] = keep
    # The DSL writes its kept files into the working directory: give the worker a scratch one, and
    # make sure it still imports this very package (also when it is not installed).
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="pearl-moe-compile-") as scratch:
        env["CUTE_DSL_DUMP_DIR"] = scratch
        proc = subprocess.run(
            [sys.executable, "-c", "from pearl_moe.course.kernel_report import _worker; _worker()"],
            input=json.dumps(jobs),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=scratch,
        )
    marker = "PEARL_MOE_REPORTS="
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(marker):
            payload = json.loads(line[len(marker) :])
            if "error" in payload:
                raise RuntimeError(f"compiling for {arch} failed:\n{payload['error']}")
            return payload["reports"]
    raise RuntimeError(
        f"compile worker for {arch} exited with {proc.returncode}:\n{proc.stderr[-6000:]}"
    )


def _worker() -> None:
    """Worker process body: compile each job on stdin for ``$CUTE_DSL_ARCH``, print reports."""
    import traceback

    jobs = json.loads(sys.stdin.read())
    reports = []
    try:
        for job in jobs:
            reports.append(_compile_job(job))
    except Exception:
        print("PEARL_MOE_REPORTS=" + json.dumps({"error": traceback.format_exc()[-8000:]}))
        return
    print("PEARL_MOE_REPORTS=" + json.dumps({"reports": reports}))


def write_artifacts(compiled, out: Path) -> tuple[str, str, str]:
    """Write a compiled kernel's PTX, SASS and cubin into ``out``; returns ``(ptx, sass, tool)``.

    The SASS is the DSL's own dump, or where it refuses this machine's nvdisasm, the cubin
    disassembled by :func:`disassemble`.
    """
    art = compiled.artifacts
    ptx, sass = art.PTX or "", art.SASS or ""
    sass_tool = "CuTe DSL (nvdisasm)"
    if not sass and art.CUBIN:
        sass, sass_tool = disassemble(art.CUBIN)
    (out / "kernel.ptx").write_text(ptx)
    (out / "kernel.sass").write_text(sass)
    if art.CUBIN:
        (out / "kernel.cubin").write_bytes(art.CUBIN)
    return ptx, sass, sass_tool


def _compile_job(job: dict) -> dict:
    out = Path(job["out"])
    out.mkdir(parents=True, exist_ok=True)
    config = GemmConfig(**job["config"])
    from ..kernels.dispatch import stage_module

    module = stage_module(job["arch"], job["stage"])
    kernel = module.build(config)
    effective = getattr(kernel, "config", None) or config.resolved()
    with tempfile.TemporaryDirectory() as dump:
        os.environ["CUTE_DSL_DUMP_DIR"] = dump
        start = time.perf_counter()
        if "sms" in job:  # a persistent grid of that many CTAs
            compiled = module.compile_kernel(config, job["n"], job["k"], job["experts"], job["sms"])
        else:
            compiled = module.compile_fake(config, job["m"], job["n"], job["k"], job["experts"])
        seconds = time.perf_counter() - start
    ptx, sass, sass_tool = write_artifacts(compiled, out)
    launches = parse_launches(str(compiled.ir_module))
    opcodes = count_opcodes(sass)
    report = KernelReport(
        stage=job["stage"],
        arch=job["arch"],
        config=job["config"],
        effective_config=asdict(effective),
        label=effective.describe(),
        shape={key: job[key] for key in ("m", "n", "k", "experts", "sms") if key in job},
        compile_seconds=round(seconds, 3),
        smem_bytes=max((x["smem"] for x in launches), default=0),
        tmem_columns=parse_tmem_columns(ptx),
        launches=launches,
        families=count_families(opcodes),
        opcodes=dict(opcodes.most_common()),
        sass_tool=sass_tool,
        files={
            "ptx": str(out / "kernel.ptx"),
            "sass": str(out / "kernel.sass"),
            "cubin": str(out / "kernel.cubin"),
        },
    )
    data = asdict(report)
    (out / "report.json").write_text(json.dumps(data, indent=1))
    return data


# ---------------------------------------------------------------------- command line
def _parse_tile(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"--tile wants MxNxK, e.g. 128x128x64; got {text!r}")
    return tuple(int(p) for p in parts)  # type: ignore[return-value]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pearl_moe inspect",
        description=(
            "Compile a kernel stage for sm_100a or sm_90a without a GPU; show SASS facts. "
            "Without options a stage compiles with the course's configuration for it "
            "(pearl_moe.kernels.ladder.stage_config); each option below overrides one field."
        ),
    )
    p.add_argument("--stage", type=int, required=True)
    p.add_argument("--arch", choices=ARCHS, default="sm_100a")
    p.add_argument("--tile", type=_parse_tile, default=None, help="MxNxK, e.g. 128x128x64")
    p.add_argument("--cta-group", type=int, default=None, choices=(1, 2))
    p.add_argument(
        "--ring-depth", type=int, default=None, help="A/B ring entries (default: most that fit)"
    )
    p.add_argument("--epilogue", choices=EPILOGUES, default=None)
    p.add_argument("--store-bits", type=int, default=None, choices=(128, 256))
    p.add_argument("--b-k-tiles", type=int, default=None, help="K tiles per B ring entry")
    p.add_argument(
        "--shift-a-box", action="store_true", default=None, help="keep A boxes inside A (sm_90a)"
    )
    p.add_argument(
        "--walk", choices=WALKS, default=None, help="how the tile scheduler finds a tile's expert"
    )
    p.add_argument("--acc-buffers", type=int, default=None)
    p.add_argument("--acc-slots", type=int, default=None, choices=(1, 2))
    p.add_argument(
        "--cluster-n", type=int, default=None, choices=(1, 2),
        help="sm_90a: clusters of CTAs along N that share A by multicast",
    )  # fmt: skip
    p.add_argument(
        "--cluster-m", type=int, default=None, choices=(1, 2),
        help="sm_90a: clusters of CTAs along M that share B by multicast",
    )  # fmt: skip
    p.add_argument(
        "--gather-a", action="store_true", default=None,
        help="sm_90a: A's rows read through an index by cp.async (grouped_gemm's a_index)",
    )  # fmt: skip
    p.add_argument("--epi-tile-n", type=int, default=None)
    p.add_argument("--epi-buffers", type=int, default=None)
    p.add_argument("--m", type=int, default=None, help="rows (all experts together)")
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--k", type=int, default=None)
    p.add_argument("--experts", type=int, default=None)
    p.add_argument("--no-cache", action="store_true", help="recompile even if cached")
    p.add_argument("--sass", action="store_true", help="print the full SASS")
    p.add_argument("--ptx", action="store_true", help="print the full PTX")
    p.add_argument("--opcodes", action="store_true", help="print every opcode and its count")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def config_from_args(args) -> GemmConfig:
    """The stage's course configuration with the fields the command line names changed."""
    from ..kernels.ladder import stage_config

    changes = {
        field: getattr(args, field)
        for field in (
            "cta_group",
            "ring_depth",
            "epilogue",
            "store_bits",
            "b_k_tiles",
            "shift_a_box",
            "walk",
            "acc_buffers",
            "acc_slots",
            "cluster_n",
            "cluster_m",
            "gather_a",
            "epi_tile_n",
            "epi_buffers",
        )
        if getattr(args, field) is not None
    }
    if args.tile is not None:
        changes.update(zip(("tile_m", "tile_n", "tile_k"), args.tile, strict=True))
    return stage_config(args.arch, args.stage).with_(**changes)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
        report = compile_stage(
            args.stage, config, args.m, args.n, args.k, args.experts, use_cache=not args.no_cache
        )
    except (ValueError, ModuleNotFoundError, RuntimeError) as exc:
        print(f"inspect: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(asdict(report), indent=1))
    elif args.sass:
        print(report.sass)
    elif args.ptx:
        print(report.ptx)
    else:
        print(report.summary())
        if args.opcodes:
            for op, count in report.opcodes.items():
                print(f"    {op:<40} {count:6d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
