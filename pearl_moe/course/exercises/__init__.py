"""Write-it-yourself exercises: a scratch kernel in a ``%%cute_compile`` cell, a checker, a hidden
solution.

An :class:`Exercise` names its notebook, the task in one sentence, and the :class:`Check`\\ s the
compiled kernel must pass on each target: predicates on what the compiler made of it (a
:class:`~pearl_moe.course.scratch.ScratchReport`: SASS instruction families, shared memory,
``expect_tx`` bytes, TMEM columns, threads) or on a NumPy emulation. A notebook's starter cell is a
scratch module that compiles but leaves the idea out; the learner fills it in, runs the cell
(``%%cute_compile --as attempt``) and then ``check_exercise(key, attempt)``, which prints one line
per check and target and returns an :class:`ExerciseResult` (it never raises on a failed check, so
a notebook runs top to bottom with the starter unsolved). The solution is a module of its own,
``pearl_moe/course/exercises/solutions/<key>.py``, shown only when asked: ``show_solution(key)``.

Each notebook's exercises live in a module of this package (``nb01a.py`` ...) that calls
:func:`register`; importing the package loads them all. ``tests/test_exercises.py`` compiles every
solution (the checker must pass) and every notebook's starter cell (the checker must fail), so an
exercise whose checker cannot fail, or whose solution no longer compiles, fails the suite.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Check",
    "Exercise",
    "ExerciseResult",
    "EXERCISES",
    "register",
    "exercise",
    "solution_path",
    "solution_source",
    "show_solution",
    "compile_solution",
    "check_exercise",
    "family_at_least",
    "family_is",
    "smem_at_most",
    "expect_tx_includes",
    "sass_count_at_least",
    "opcode_count_at_least",
    "scratch_module",
]

ARCHS = ("sm_100a", "sm_90a")
SOLUTIONS = Path(__file__).resolve().parent / "solutions"


@dataclass(frozen=True)
class Check:
    """One requirement: ``test(report) -> bool`` on each target in ``archs``; ``what`` says it."""

    what: str
    test: Callable
    archs: tuple[str, ...] = ARCHS


@dataclass(frozen=True)
class Exercise:
    """A write-it-yourself exercise of one notebook.

    ``key`` (e.g. ``"02-k-loop"``) names its solution file and the notebook's starter cell, whose
    cell id is ``exercise-<key>``; ``archs``: the targets the kernel is compiled for."""

    key: str
    notebook: str
    task: str
    checks: tuple[Check, ...]
    archs: tuple[str, ...] = ARCHS


@dataclass
class ExerciseResult:
    key: str
    lines: list[tuple[bool, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.lines) and all(ok for ok, _ in self.lines)

    def __repr__(self) -> str:
        verdict = "solved" if self.ok else "not yet"
        body = "\n".join(f"  {'ok  ' if ok else 'MISS'} {text}" for ok, text in self.lines)
        return f"exercise {self.key}: {verdict}\n{body}"


EXERCISES: dict[str, Exercise] = {}


def register(ex: Exercise) -> Exercise:
    """Add ``ex`` to :data:`EXERCISES` (each key once)."""
    if ex.key in EXERCISES:
        raise ValueError(f"exercise {ex.key!r} registered twice")
    EXERCISES[ex.key] = ex
    return ex


def exercise(key: str) -> Exercise:
    if key not in EXERCISES:
        raise KeyError(f"no exercise {key!r}; known: {', '.join(sorted(EXERCISES))}")
    return EXERCISES[key]


def solution_path(key: str) -> Path:
    return SOLUTIONS / f"{exercise(key).key.replace('-', '_')}.py"


def solution_source(key: str) -> str:
    return solution_path(key).read_text()


def show_solution(key: str):
    """The solution module, highlighted (a :class:`~pearl_moe.course.sources.SourceView`)."""
    from .._paths import rel
    from ..sources import SourceView

    return SourceView([(f"solution of {key} — {rel(solution_path(key))}", solution_source(key))])


def compile_solution(key: str):
    """``{arch: ScratchReport}`` of the solution (cached on disk like any scratch compile)."""
    from ..scratch import compile_scratch

    return compile_scratch(solution_source(key), exercise(key).archs)


def check_exercise(key: str, reports: Mapping, out=print) -> ExerciseResult:
    """Run the checks of ``key`` on ``reports`` (``{arch: ScratchReport}``, what
    ``%%cute_compile --as NAME`` keeps); print and return the result."""
    ex = exercise(key)
    result = ExerciseResult(key)
    with warnings.catch_warnings():
        # a check that traces the learner's code outside a compile makes the DSL warn about its
        # MLIR context: the DSL's own bookkeeping, nothing the learner wrote
        warnings.filterwarnings(
            "ignore", message="Passing None as MLIR Context", category=RuntimeWarning
        )
        _run_checks(ex, reports, result)
    if out is not None:
        out(repr(result))
    return result


def _run_checks(ex, reports: Mapping, result) -> None:
    for check in ex.checks:
        for arch in check.archs:
            if arch not in ex.archs:
                continue
            report = reports.get(arch)
            if report is None:
                result.lines.append((False, f"{arch}: {check.what} (not compiled for {arch})"))
                continue
            try:
                ok = bool(check.test(report))
            except Exception as exc:  # noqa: BLE001 - a check that cannot read the report fails
                ok = False
                result.lines.append((ok, f"{arch}: {check.what} ({type(exc).__name__}: {exc})"))
                continue
            result.lines.append((ok, f"{arch}: {check.what}"))


# ------------------------------------------------------------------------- ready-made checks
def family_at_least(family: str, n: int = 1, archs=ARCHS) -> Check:
    """At least ``n`` SASS instructions of ``family`` (a name of :data:`~pearl_moe.course.sass`)."""
    return Check(
        f"at least {n} {family} instruction(s)", lambda r: r.families.get(family, 0) >= n, archs
    )


def family_is(family: str, n: int, archs=ARCHS) -> Check:
    return Check(
        f"exactly {n} {family} instruction(s)", lambda r: r.families.get(family, 0) == n, archs
    )


def smem_at_most(limit: int, archs=ARCHS) -> Check:
    return Check(f"at most {limit} B of shared memory", lambda r: 0 < r.smem_bytes <= limit, archs)


def expect_tx_includes(nbytes: int, archs=ARCHS) -> Check:
    return Check(
        f"an mbarrier armed with expect_tx {nbytes} B", lambda r: nbytes in r.expect_tx, archs
    )


def sass_count_at_least(pattern: str, n: int = 1, archs=ARCHS) -> Check:
    """At least ``n`` SASS lines matching the regex ``pattern``."""
    return Check(
        f"at least {n} SASS line(s) matching {pattern!r}",
        lambda r: len(r.sass_lines(pattern)) >= n,
        archs,
    )


def opcode_count_at_least(pattern: str, n: int = 1, archs=ARCHS) -> Check:
    """At least ``n`` SASS instructions whose opcode (modifiers included, predicate left out)
    matches the regex ``pattern``: ``opcode_count_at_least(r"^LDG", 2)``."""
    return Check(
        f"at least {n} SASS instruction(s) with an opcode matching {pattern!r}",
        lambda r: sum(c for op, c in r.opcodes.items() if re.search(pattern, op)) >= n,
        archs,
    )


def scratch_module(report):
    """The learner's scratch module behind ``report``, imported in this process (its source is
    kept beside the report's PTX), so a check can run its host-side functions: a ``@cute.jit``
    helper runs on the CPU, e.g. index math compared with a NumPy results. Importing it compiles
    nothing."""
    import hashlib
    import importlib.util
    import sys

    path = Path(report.files["ptx"]).with_name("scratch_kernel.py")
    name = "pearl_moe_scratch_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def _load_all() -> None:
    for info in pkgutil.iter_modules([str(Path(__file__).resolve().parent)]):
        if info.name.startswith("nb"):
            importlib.import_module(f"{__name__}.{info.name}")


_load_all()
