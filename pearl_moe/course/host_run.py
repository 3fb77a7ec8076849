"""Run CuTe DSL host code on the CPU and read what it printed.

A ``@cute.jit`` function that launches no kernel runs on the CPU: layouts, TMA atoms and
pipeline states are built there, no GPU needed. Values known while tracing print with Python's
``print``; values the JIT-compiled host code computes (a pipeline state after ``advance()``, say)
print with ``cute.printf``, which writes to the process's C-level standard output, not to
``sys.stdout``, so a notebook may show it late or not at all. :func:`run_printing` calls such a
function with the process's file descriptor 1 redirected to a file and returns the text.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile

__all__ = ["run_printing"]


def _flush_c_stdout() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # pragma: no cover - no C runtime to flush
        pass


def run_printing(fn, *args, **kwargs) -> str:
    """Call ``fn(*args, **kwargs)`` (e.g. a ``@cute.jit`` host function) and return what it wrote
    to the C-level standard output (``cute.printf``), blank lines dropped. Python's ``print``
    output is not captured: it goes to ``sys.stdout`` as usual (in a notebook, the cell)."""
    sys.stdout.flush()
    _flush_c_stdout()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        try:
            fn(*args, **kwargs)
            sys.stdout.flush()
            _flush_c_stdout()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        sink.seek(0)
        text = sink.read().decode(errors="replace")
    return "\n".join(line for line in text.splitlines() if line.strip())
