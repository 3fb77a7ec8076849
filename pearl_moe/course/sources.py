"""Show the code that matters: one method, a Blackwell method beside its Hopper twin, a diff.

:func:`show_source` displays one method of a stage with syntax highlighting, :func:`show_pair` puts
the Blackwell method next to its Hopper counterpart and :func:`show_diff` shows what one stage
changed in a method of the previous one. Stages 4-7 are options of one kernel, switched at compile
time: :func:`show_excerpt` shows the few lines of a long method where an option is dispatched. Targets are ``"module:Qual.name"`` strings, read from the
file with :mod:`ast`, so showing code never imports CuTe DSL (nor picks its compile target) in the
notebook's process.
"""

from __future__ import annotations

import ast
import difflib
import html
import importlib.util
import inspect
import textwrap
from collections.abc import Sequence
from pathlib import Path

from ._paths import rel

__all__ = [
    "SourceView",
    "get_source",
    "show_source",
    "show_pair",
    "source_diff",
    "diff_stats",
    "show_diff",
    "get_excerpt",
    "show_excerpt",
    "side_by_side",
]


def _module_file(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no module {module!r}", name=module)
    return Path(spec.origin)


def _find_node(tree: ast.Module, qualname: str):
    body = tree.body
    node = None
    for part in qualname.split("."):
        node = next(
            (
                n
                for n in body
                if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and n.name == part
            ),
            None,
        )
        if node is None:
            return None
        body = node.body
    return node


def get_source(target, method: str | None = None) -> tuple[str, str]:
    """``(source, where)`` of a class, function or method.

    ``target`` is ``"package.module:Qual.name"`` (read with :mod:`ast`, nothing is imported), or a
    Python object (class, function, module) read with :mod:`inspect`. ``method`` names a method of
    the target class. ``where`` is ``"path/relative/to/repo.py:line"``.
    """
    if isinstance(target, str):
        module, _, qualname = target.partition(":")
        if method:
            qualname = f"{qualname}.{method}" if qualname else method
        path = _module_file(module)
        text = path.read_text()
        if not qualname:
            return text, _where(path, 1)
        node = _find_node(ast.parse(text), qualname)
        if node is None:
            raise LookupError(
                f"{module} has no {qualname!r} (it may be inherited: name the class that defines it)"
            )
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        lines = text.splitlines()[first - 1 : node.end_lineno]
        return textwrap.dedent("\n".join(lines)), _where(path, first)
    obj = getattr(target, method) if method else target
    obj = inspect.unwrap(getattr(obj, "__func__", obj))
    lines, first = inspect.getsourcelines(obj)
    return textwrap.dedent("".join(lines)).rstrip("\n"), _where(
        Path(inspect.getsourcefile(obj)), max(first, 1)
    )


def _where(path: Path, line: int) -> str:
    return f"{rel(path)}:{line}"


def _highlight(code: str, lexer: str = "python") -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import get_lexer_by_name
    except ImportError:  # pragma: no cover - pygments comes with Jupyter
        return f"<pre>{html.escape(code)}</pre>"
    formatter = HtmlFormatter(noclasses=True, style="default", nowrap=False)
    return highlight(code, get_lexer_by_name(lexer), formatter)


_BOX = (
    "<div style='flex:1; min-width:0; overflow-x:auto; font-size:85%; border:1px solid #ddd;"
    " padding:0 0.5em'>"
)


class SourceView:
    """Code shown in a notebook: highlighted HTML in Jupyter, plain text everywhere else."""

    def __init__(self, panels: Sequence[tuple[str, str]], lexer: str = "python"):
        self.panels = list(panels)  # (title, code)
        self.lexer = lexer

    @property
    def code(self) -> str:
        return "\n\n".join(code for _, code in self.panels)

    def _repr_html_(self) -> str:
        boxes = [
            f"{_BOX}<p style='margin:0.3em 0'><b>{html.escape(title)}</b></p>"
            f"{_highlight(code, self.lexer)}</div>"
            for title, code in self.panels
        ]
        return (
            f"<div style='display:flex; gap:0.8em; align-items:flex-start'>{''.join(boxes)}</div>"
        )

    def __repr__(self) -> str:
        return "\n\n".join(f"# --- {title}\n{code}" for title, code in self.panels)


def show_source(target, method: str | None = None, title: str | None = None) -> SourceView:
    """One method (or class, function) with syntax highlighting, titled with its file and line."""
    code, where = get_source(target, method)
    return SourceView([(f"{title} — {where}" if title else where, code)])


def show_pair(
    left, right, titles: Sequence[str] = ("Blackwell (sm_100a)", "Hopper (sm_90a)")
) -> SourceView:
    """Two pieces of code side by side: by default the Blackwell method, then its Hopper twin.

    ``left`` and ``right`` are targets as for :func:`get_source` (or ``(target, method)`` pairs).
    """
    panels = []
    for title, item in zip(titles, (left, right), strict=True):
        target, method = item if isinstance(item, tuple) else (item, None)
        code, where = get_source(target, method)
        panels.append((f"{title} — {where}", code))
    return SourceView(panels)


def source_diff(old, new, context: int = 3) -> str:
    """Unified diff from ``old`` to ``new`` (targets as for :func:`get_source`)."""
    panels = []
    for item in (old, new):
        target, method = item if isinstance(item, tuple) else (item, None)
        panels.append(get_source(target, method))
    (a, where_a), (b, where_b) = panels
    # every line ends in a newline, the last one too: a source without it would glue its last
    # removed line to the next added one ("-    return x+    if ...")
    a, b = (text if text.endswith("\n") else text + "\n" for text in (a, b))
    return "".join(
        difflib.unified_diff(
            a.splitlines(keepends=True),
            b.splitlines(keepends=True),
            fromfile=where_a,
            tofile=where_b,
            n=context,
        )
    )


def diff_stats(diff: str) -> tuple[int, int]:
    """``(added, removed)`` lines of a unified diff (headers not counted)."""
    added = sum(1 for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---"))
    return added, removed


def show_diff(old, new, context: int = 3, title: str | None = None) -> SourceView:
    """What changed between two stages' versions of a method, as a highlighted unified diff."""
    diff = source_diff(old, new, context)
    added, removed = diff_stats(diff)
    head = title or "diff"
    return SourceView([(f"{head}: +{added} / -{removed} lines", diff or "(identical)\n")], "diff")


def get_excerpt(
    target,
    start: str,
    end: str | None = None,
    method: str | None = None,
    occurrence: int = 1,
    extra: int = 0,
):
    """``(excerpt, where)``: the lines of a method from the ``occurrence``-th line containing
    ``start`` to the first line after it containing ``end`` (just the ``start`` line without
    ``end``), plus ``extra`` lines after that (e.g. a call's closing parenthesis), dedented.

    Raises ``LookupError`` when a marker is not in the source, so a notebook that shows an excerpt
    fails loudly when the code moves on. ``where`` is ``"path.py:first-last"``.
    """
    code, where = get_source(target, method)
    path, _, line = where.rpartition(":")
    lines = code.splitlines()
    hits = [i for i, ln in enumerate(lines) if start in ln]
    if len(hits) < occurrence:
        raise LookupError(f"{where}: fewer than {occurrence} lines contain {start!r}")
    first = hits[occurrence - 1]
    last = first
    if end is not None:
        last = next((i for i in range(first + 1, len(lines)) if end in lines[i]), None)
        if last is None:
            raise LookupError(f"{where}: no line after {start!r} contains {end!r}")
    last = min(last + extra, len(lines) - 1)
    base = int(line)
    text = textwrap.dedent("\n".join(lines[first : last + 1]))
    return text, f"{path}:{base + first}-{base + last}"


def show_excerpt(
    target,
    start: str,
    end: str | None = None,
    title: str | None = None,
    method: str | None = None,
    occurrence: int = 1,
    extra: int = 0,
) -> SourceView:
    """A few lines of a long method (:func:`get_excerpt`), titled with file and line range."""
    code, where = get_excerpt(target, start, end, method, occurrence, extra)
    return SourceView([(f"{title} — {where}" if title else where, code)])


def side_by_side(*views: SourceView, titles: Sequence[str] | None = None) -> SourceView:
    """Several views as one, their panels side by side (e.g. a Blackwell excerpt beside its Hopper
    twin). ``titles`` prefixes each view's panel titles (default: Blackwell, then Hopper)."""
    if titles is None:
        titles = (
            ("Blackwell (sm_100a)", "Hopper (sm_90a)")[: len(views)] if len(views) <= 2 else None
        )
    panels = []
    for i, view in enumerate(views):
        for title, code in view.panels:
            head = f"{titles[i]} — {title}" if titles else title
            panels.append((head, code))
    return SourceView(panels, views[0].lexer if views else "python")
