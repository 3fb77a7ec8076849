"""The package's imports run one way: no circles, and the kernels import nothing of the layers
built on them (course helpers, the bench, the inspection tool, plots, models).

Read from the source (AST), every import counts, also those inside functions (a lazy import is
still a dependency); only ``if TYPE_CHECKING:`` blocks are left out, since they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pearl_moe"

#: Modules the kernels must not import: they are built on the kernels.
ABOVE_KERNELS = (
    "pearl_moe.course",
    "pearl_moe.bench",
    "pearl_moe.inspect",
    "pearl_moe.plots",
    "pearl_moe.figures",
    "pearl_moe.widgets",
    "pearl_moe.perfmodel",
    "pearl_moe.occupancy",
    "pearl_moe.roofline",
    "pearl_moe.calibrate",
    "pearl_moe.replay",
    "pearl_moe.selftest",
)


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _type_checking_nodes(tree) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    return skip


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its source)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        tree = ast.parse(path.read_text())
        skip = _type_checking_nodes(tree)
        deps = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (
                    ".".join(package[: len(package) - node.level + 1] + [node.module or ""])
                    if node.level
                    else node.module or ""
                ).rstrip(".")
                # "from x import y" imports x.y when y is a module, else x
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]  # fmt: skip
            else:
                continue
            deps.update(t for t in targets if t in mods and t != name)
        graph[name] = deps
    return graph


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert "pearl_moe.kernels.api" in graph
    assert "pearl_moe.kernels.targets" in graph["pearl_moe.kernels.api"]
    assert "pearl_moe.config" in graph["pearl_moe.kernels.compile_cache"]


def test_no_import_circles():
    assert _cycles(import_graph()) == []


def test_a_circle_is_found():
    """The check can fail: a two-module circle and a three-module one are reported."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


def test_kernels_import_nothing_built_on_them():
    bad = [
        (name, dep)
        for name, deps in import_graph().items()
        if name.startswith("pearl_moe.kernels")
        for dep in deps
        if dep.startswith(ABOVE_KERNELS)
    ]
    assert bad == []
