"""Run notebooks' code cells top to bottom as plain Python, for machines without Jupyter.

The lent GPU machine has no Jupyter kernel, so this is how the notebooks' live-GPU branches are
exercised there: every code cell of each notebook runs in one namespace, in order, with the working
directory set to ``notebooks/`` and matplotlib off-screen. ``display`` prints a one-line summary of
what a notebook would have shown. Where IPython or ipywidgets are missing, a minimal stand-in is
installed so that imports succeed; widgets are not exercised this way (the CPU test suite does that
through nbclient). A ``%%cute_compile`` cell is compiled as the magic would
(:func:`pearl_moe.course.scratch.cute_compile`); other ``%`` and ``!`` lines are skipped. Exits
non-zero on the first failing cell, naming the notebook and the cell.

    python scripts/exec_notebooks.py notebooks/01a_stage1_kernel.ipynb notebooks/02_grouped_gemm.ipynb
"""

from __future__ import annotations

import json
import linecache
import os
import sys
import time
import traceback
import types
from pathlib import Path


def _display(*objs, **_):
    for obj in objs:
        text = repr(obj)
        print(f"[display] {type(obj).__name__}: {text[:200]}")


def _stub_module(name: str, **attrs) -> None:
    if name in sys.modules:
        return
    try:
        __import__(name)
        return
    except ImportError:
        pass
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


class _Shown:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __repr__(self) -> str:
        return f"{type(self).__name__}(...)"


class _Widget:
    """Stand-in for any ipywidgets class: keeps its keyword arguments (``value`` ...), accepts
    observers and context-manager use, and shows nothing."""

    def __init__(self, *args, **kwargs):
        self.__dict__.update(kwargs)
        self.children = list(args[0]) if args and isinstance(args[0], list | tuple) else []
        self.outputs = ()

    def observe(self, *args, **kwargs) -> None:
        pass

    def clear_output(self, *args, **kwargs) -> None:
        pass

    def append_display_data(self, *args, **kwargs) -> None:
        pass

    def append_stdout(self, *args, **kwargs) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


def _install_stubs() -> None:
    display_attrs = {
        "display": _display,
        "Image": type("Image", (_Shown,), {}),
        "HTML": type("HTML", (_Shown,), {}),
        "Markdown": type("Markdown", (_Shown,), {}),
        "SVG": type("SVG", (_Shown,), {}),
    }
    try:
        import ipywidgets  # noqa: F401
    except ImportError:  # widgets are built but not shown; the CPU test suite drives them for real
        widgets = types.ModuleType("ipywidgets")

        def widget_class(name):  # every public name is a widget class
            if name.startswith("_"):
                raise AttributeError(name)
            return _Widget

        widgets.__getattr__ = widget_class
        sys.modules["ipywidgets"] = widgets
    try:
        import IPython.display  # noqa: F401
    except ImportError:
        # matplotlib asks IPython for its version when a figure is made; claim a recent one.
        stub = types.SimpleNamespace(**display_attrs)
        _stub_module("IPython", display=stub, version_info=(9, 0, 0), get_ipython=lambda: None)
        _stub_module("IPython.display", **display_attrs)


def run(path: Path) -> float:
    nb = json.loads(path.read_text())
    namespace = {"__name__": "__main__", "display": _display}
    start = time.perf_counter()
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for i, cell in enumerate(cells, 1):
        lines = "".join(cell["source"]).splitlines()
        try:
            if lines and lines[0].startswith("%%cute_compile"):
                # the course's cell magic: compile the cell's kernel for both targets, as
                # IPython would (pearl_moe.course.scratch), and keep its reports in the namespace
                from pearl_moe.course.scratch import cute_compile

                cute_compile(lines[0][len("%%cute_compile") :], "\n".join(lines[1:]), namespace)
                continue
            source = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
            filename = f"{path.name}[cell {i}]"
            # CuTe DSL reads a @cute.jit function's source (inspect.getsource), as IPython
            # allows by keeping every cell in linecache: do the same for each cell here.
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            exec(compile(source, filename, "exec"), namespace)
        except Exception:
            traceback.print_exc()
            raise SystemExit(f"FAILED {path.name}: code cell {i} of {len(cells)}") from None
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    os.environ.setdefault("MPLBACKEND", "Agg")
    _install_stubs()
    paths = [Path(p).resolve() for p in argv]
    for path in paths:
        os.chdir(path.parent)
        seconds = run(path)
        print(f"OK {path.name} ({seconds:.1f} s)", flush=True)
    print(f"{len(paths)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
