"""Compile a small kernel written in a notebook cell for sm_100a and sm_90a, and read the result.

Two facts of CuTe DSL shape this module:

* The DSL reads a kernel's Python source to compile it (``inspect.getsource``). A function defined
  in a notebook cell has a source (IPython keeps every cell in ``linecache``); a function made by
  a plain ``exec`` of a string has none, and compiling it fails with "could not get source code".
* The compile target is fixed per process by ``CUTE_DSL_ARCH``, read when ``cutlass`` is first
  imported. One notebook cannot compile for two targets in its own process.

So :func:`compile_scratch` writes the cell's source text to a file in a scratch folder and
compiles it in one worker process per target (started at the same time), as
:mod:`pearl_moe.course.kernel_report` does for the course's stages. The notebook's own process never compiles
a scratch kernel, so it can import ``cutlass`` for host-side layout algebra without fixing a target.

The source is a small module that defines:

* ``host``: the ``@cute.jit`` host function that builds TMA atoms and launches the kernel;
* ``example_args()``: a plain function returning the arguments ``cute.compile(host, *args)``
  takes (placeholder pointers from :func:`pearl_moe.kernels.host.placeholder_ptr`, sizes, a
  stream); no GPU and no tensor memory are needed.

The source may import the package: an exercise's scaffold
(:mod:`pearl_moe.course.exercises.scaffolds`) holds the part of a kernel the learner does not
write, and the cell passes its own ``@cute.jit`` functions to the scaffold's host function. The
workers import it from this checkout (``PYTHONPATH``), and the cache key holds the scaffolds'
text.

Each target gives a :class:`ScratchReport`: the shared memory every launch requests (read from the
lowered host code), threads per CTA, the ``expect_tx`` byte counts the kernel arms its mbarriers
with (read from the PTX), the TMEM columns it allocates, SASS opcode counts and the files. Reports
are cached on disk by source text, target and DSL version, so a re-run of the notebook is fast.

In a notebook, ``%load_ext pearl_moe.course`` registers the cell magic ``%%cute_compile``::

    %%cute_compile --sass "UTMALDG|SYNCS"
    import cutlass
    ...
    @cute.jit
    def host(...): ...
    def example_args(): ...

which compiles the cell for both targets, prints what each compiler produced and keeps the
reports in the notebook variable ``scratch`` (``--as NAME`` picks another name).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = [
    "ScratchReport",
    "compile_scratch",
    "parse_expect_tx",
    "load_ipython_extension",
]

ARCHS = ("sm_100a", "sm_90a")
_MARKER = "PEARL_MOE_SCRATCH="


@dataclass
class ScratchReport:
    """What the compiler made of a scratch kernel for one target."""

    arch: str
    compile_seconds: float
    launches: list  # [{"smem": bytes, "threads": n}] per kernel launch in the host code
    expect_tx: list  # byte counts of every mbarrier.arrive.expect_tx in the PTX
    tmem_columns: int
    families: dict
    opcodes: dict
    files: dict = field(default_factory=dict)
    sass_tool: str = "CuTe DSL (nvdisasm)"
    cached: bool = False

    @property
    def smem_bytes(self) -> int:
        """Shared memory the (largest) launch requests, in bytes."""
        return max((x["smem"] for x in self.launches), default=0)

    @property
    def threads(self) -> int:
        return max((x["threads"] for x in self.launches), default=0)

    @property
    def sass(self) -> str:
        return Path(self.files["sass"]).read_text()

    @property
    def ptx(self) -> str:
        return Path(self.files["ptx"]).read_text()

    def sass_lines(self, pattern: str) -> list[str]:
        """SASS instructions matching the regex ``pattern`` (:func:`~.sass.sass_lines`)."""
        from .sass import sass_lines

        return sass_lines(self.sass, pattern)

    def summary(self) -> str:
        tx = ", ".join(str(b) for b in self.expect_tx) or "none"
        line = (
            f"{self.arch}: {self.threads} threads per CTA, {self.smem_bytes} B shared memory "
            f"requested, mbarrier expect_tx bytes: {tx}"
        )
        if self.tmem_columns:
            line += f", {self.tmem_columns} TMEM columns"
        seconds = "cached" if self.cached else f"compiled in {self.compile_seconds:.1f} s"
        return f"{line} ({seconds})"


def parse_expect_tx(ptx: str) -> list[int]:
    """Byte counts of the PTX's ``mbarrier.arrive.expect_tx`` / ``mbarrier.expect_tx`` operations
    (constants moved into a register just before, as the DSL emits them)."""
    found = []
    pattern = re.compile(
        r"mbarrier\.(?:arrive\.)?expect_tx\.\S+\s+(?:[^,]+,\s*)?\[[^\]]+\],\s*(%r\d+|\d+)"
    )
    for match in pattern.finditer(ptx):
        operand = match.group(1)
        if operand.isdigit():
            found.append(int(operand))
            continue
        movs = re.findall(rf"mov\.[bu]32\s+{re.escape(operand)},\s*(\d+);", ptx[: match.start()])
        if movs:
            found.append(int(movs[-1]))
    return found


def _cache_root() -> Path:
    from .kernel_report import cache_dir

    return cache_dir().parent / "scratch"


def _key(source: str, arch: str, entry: str, args: str) -> str:
    try:
        from importlib.metadata import version

        dsl = version("nvidia-cutlass-dsl")
    except Exception:  # pragma: no cover - metadata missing in odd installs
        dsl = "?"
    scaffolds = _scaffolds_text(source)
    blob = json.dumps([source, arch, entry, args, dsl] + ([scaffolds] if scaffolds else []))
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _scaffolds_text(source: str) -> str:
    """The text of the exercise scaffolds (``pearl_moe.course.exercises.scaffolds``) when
    ``source`` imports one: the kernel a cell compiles is partly theirs, so a change to a scaffold
    must miss the cache."""
    if "exercises.scaffolds" not in source:
        return ""
    folder = Path(__file__).resolve().parent / "exercises" / "scaffolds"
    return "".join(p.read_text() for p in sorted(folder.glob("*.py")))


def compile_scratch(
    source: str,
    archs=ARCHS,
    *,
    entry: str = "host",
    args: str = "example_args",
    use_cache: bool = True,
    timeout: float = 600,
) -> dict[str, ScratchReport]:
    """Compile the module ``source`` for each target in ``archs``; ``{arch: ScratchReport}``.

    ``entry`` names the ``@cute.jit`` host function and ``args`` the plain function returning its
    compile arguments. One worker process per target, all started at once. Raises
    ``RuntimeError`` with the worker's traceback when a compile fails.
    """
    archs = [archs] if isinstance(archs, str) else list(archs)
    bad = [a for a in archs if a not in ARCHS]
    if bad:
        raise ValueError(f"targets must be among {ARCHS}, got {bad}")
    reports: dict[str, ScratchReport] = {}
    running = {}
    for arch in archs:
        out = _cache_root() / _key(source, arch, entry, args)
        report_path = out / "report.json"
        if use_cache and report_path.exists():
            reports[arch] = ScratchReport(**{**json.loads(report_path.read_text()), "cached": True})
            continue
        running[arch] = _start_worker(arch, source, entry, args, out)
    for arch, started in running.items():
        try:
            reports[arch] = ScratchReport(**_wait_worker(arch, *started, timeout))
        except RuntimeError as exc:
            # The DSL refuses an nvdisasm older than its toolchain (the CUDA 13.0 one on a GPU
            # machine, say): compile again without its SASS dump; write_artifacts then
            # disassembles the cubin with whatever tool the machine has.
            if "nvdisasm" not in str(exc):
                raise
            out = _cache_root() / _key(source, arch, entry, args)
            retry = _start_worker(arch, source, entry, args, out, keep="ptx,cubin")
            reports[arch] = ScratchReport(**_wait_worker(arch, *retry, timeout))
    return {arch: reports[arch] for arch in archs}


def _wait_worker(arch: str, proc, scratch, timeout: float) -> dict:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        scratch.cleanup()
    return _read_worker(arch, proc.returncode, stdout, stderr)


def _start_worker(
    arch: str, source: str, entry: str, args: str, out: Path, keep: str = "ptx,cubin,sass"
):
    env = dict(os.environ)
    env["CUTE_DSL_ARCH"] = arch
    env["CUTE_DSL_KEEP"] = keep
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    scratch = tempfile.TemporaryDirectory(prefix="pearl-moe-scratch-")
    env["CUTE_DSL_DUMP_DIR"] = scratch.name
    job = {"source": source, "entry": entry, "args": args, "arch": arch, "out": str(out)}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from pearl_moe.course.scratch import _worker; _worker()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=scratch.name,
    )
    proc.stdin.write(json.dumps(job))
    proc.stdin.close()
    proc.stdin = None  # communicate() must not flush a closed pipe
    return proc, scratch


def _read_worker(arch: str, returncode: int, stdout: str, stderr: str) -> dict:
    for line in reversed(stdout.splitlines()):
        if line.startswith(_MARKER):
            payload = json.loads(line[len(_MARKER) :])
            if "error" in payload:
                raise RuntimeError(
                    f"compiling the scratch kernel for {arch} failed:\n{payload['error']}"
                )
            return payload["report"]
    raise RuntimeError(
        f"scratch compile worker for {arch} exited with {returncode}:\n{stderr[-6000:]}"
    )


def _worker() -> None:
    """Worker body: import the source as a module from a file, compile it, print a report."""
    import traceback

    job = json.loads(sys.stdin.read())
    try:
        report = _compile(job)
    except Exception:
        print(_MARKER + json.dumps({"error": traceback.format_exc()[-8000:]}))
        return
    print(_MARKER + json.dumps({"report": report}))


def _compile(job: dict) -> dict:
    import importlib.util

    import cutlass.cute as cute

    from .kernel_report import (
        count_families,
        count_opcodes,
        parse_launches,
        parse_tmem_columns,
        write_artifacts,
    )

    out = Path(job["out"])
    out.mkdir(parents=True, exist_ok=True)
    # A real file, so the DSL can read the kernel's source (a string given to exec has none).
    path = out / "scratch_kernel.py"
    path.write_text(job["source"])
    spec = importlib.util.spec_from_file_location("scratch_kernel", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["scratch_kernel"] = module
    spec.loader.exec_module(module)
    for name in (job["entry"], job["args"]):
        if not hasattr(module, name):
            raise NameError(f"the scratch source must define {name!r}")
    args = getattr(module, job["args"])()
    start = time.perf_counter()
    compiled = cute.compile(getattr(module, job["entry"]), *args)
    seconds = time.perf_counter() - start
    ptx, sass, sass_tool = write_artifacts(compiled, out)
    opcodes = count_opcodes(sass)
    report = ScratchReport(
        arch=job["arch"],
        compile_seconds=round(seconds, 3),
        launches=parse_launches(str(compiled.ir_module)),
        expect_tx=parse_expect_tx(ptx),
        tmem_columns=parse_tmem_columns(ptx),
        families=count_families(opcodes),
        opcodes=dict(opcodes.most_common()),
        files={"ptx": str(out / "kernel.ptx"), "sass": str(out / "kernel.sass")},
        sass_tool=sass_tool,
    )
    data = asdict(report)
    (out / "report.json").write_text(json.dumps(data, indent=1))
    return data


# ---------------------------------------------------------------------------- the cell magic
def _magic_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="%%cute_compile", add_help=False)
    p.add_argument("--arch", action="append", choices=ARCHS, help="target (default: both)")
    p.add_argument("--entry", default="host")
    p.add_argument("--args", default="example_args")
    p.add_argument("--sass", default=None, help="regex: print the SASS lines it matches")
    p.add_argument("--as", dest="name", default="scratch", help="notebook variable for reports")
    p.add_argument("--no-cache", action="store_true")
    return p


def cute_compile(line: str, cell: str, user_ns: dict | None = None) -> dict[str, ScratchReport]:
    """Body of the ``%%cute_compile`` magic: compile ``cell``, print each target's report."""
    from .sass import families_table

    opts = _magic_parser().parse_args(shlex.split(line))
    reports = compile_scratch(
        cell, opts.arch or ARCHS, entry=opts.entry, args=opts.args, use_cache=not opts.no_cache
    )
    for rep in reports.values():
        print(rep.summary())
    shown = sorted({f for rep in reports.values() for f, n in rep.families.items() if n})
    print()
    print(families_table(reports, shown) if shown else "(no SASS families of interest)")
    if opts.sass:
        for arch, rep in reports.items():
            print(f"\n{arch}, SASS lines matching {opts.sass!r}:")
            for text in rep.sass_lines(opts.sass):
                print("   ", text)
    if user_ns is not None:
        user_ns[opts.name] = reports
    return reports


def load_ipython_extension(ipython) -> None:
    """``%load_ext pearl_moe.course``: register the ``%%cute_compile`` cell magic."""

    def magic(line, cell):
        cute_compile(line, cell, ipython.user_ns)

    magic.__doc__ = __doc__
    ipython.register_magic_function(magic, magic_kind="cell", magic_name="cute_compile")
