"""The package's imports run one way: no circles, and the kernels import nothing of the layers
built on them (course helpers, the bench, the inspection tool, plots, models). Each concept has one
home: the reader of ``results/`` (:mod:`pearl_moe.replay`) reaches nothing that reads runs, the
plots module is the only one that imports matplotlib and reaches no module that gathers data, and
the course and the bench take a step's geomeans with one function.

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


def _import_nodes(path: Path):
    """The ``import`` / ``from ... import`` statements of ``path`` (anywhere in its source), those
    inside ``if TYPE_CHECKING:`` blocks left out."""
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    for node in ast.walk(tree):
        if id(node) not in skip and isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its source)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        deps = set()
        for node in _import_nodes(path):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = (
                    ".".join(package[: len(package) - node.level + 1] + [node.module or ""])
                    if node.level
                    else node.module or ""
                ).rstrip(".")
                # "from x import y" imports x.y when y is a module, else x
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]  # fmt: skip
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


# ---------------------------------------------------------------------------- one home per concept
#: The reader of ``results/`` sits below everything that reads runs: it reaches none of these.
ABOVE_READER = (
    "pearl_moe.bench",
    "pearl_moe.course",
    "pearl_moe.plots",
    "pearl_moe.figures",
    "pearl_moe.widgets",
    "pearl_moe.calibrate",
    "pearl_moe.stages",
    "pearl_moe.perfmodel",
    "pearl_moe.kernels",
)
#: The plots draw what they are given: they reach none of the modules that gather the data.
ABOVE_PLOTS = ("pearl_moe.bench", "pearl_moe.course", "pearl_moe.figures", "pearl_moe.widgets")


def _reach(graph, name) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def _external_imports(path: Path) -> set[str]:
    """Top-level names of the absolute imports in ``path`` (``if TYPE_CHECKING:`` left out)."""
    names = set()
    for node in _import_nodes(path):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return names


def _top_level_functions() -> dict[str, list[str]]:
    """Function name -> the modules that define it at top level."""
    homes: dict[str, list[str]] = {}
    for name, path in _modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                homes.setdefault(node.name, []).append(name)
    return homes


def test_the_reader_of_results_reaches_nothing_that_reads_runs():
    graph = import_graph()
    assert "pearl_moe.replay" in graph["pearl_moe.bench.records"]  # the bench reads through it
    assert sorted(d for d in _reach(graph, "pearl_moe.replay") if d.startswith(ABOVE_READER)) == []


def test_plots_reach_no_data_gathering_module():
    graph = import_graph()
    assert sorted(d for d in _reach(graph, "pearl_moe.plots") if d.startswith(ABOVE_PLOTS)) == []


def test_the_bench_imports_no_course_plots_or_figures():
    bad = [
        (name, dep)
        for name, deps in import_graph().items()
        if name.startswith("pearl_moe.bench")
        for dep in deps
        if dep.startswith(("pearl_moe.course", *ABOVE_PLOTS[2:], "pearl_moe.plots"))
    ]
    assert bad == []


def test_only_the_plots_module_imports_matplotlib():
    """Drawing lives in pearl_moe.plots: no other module imports matplotlib, at module level or
    inside a function; and nothing uses pyplot (figures are built without global state)."""
    imports = {name: _external_imports(path) for name, path in _modules().items()}
    users = {
        name for name, mods in imports.items() if any(m.startswith("matplotlib") for m in mods)
    }
    assert users == {"pearl_moe.plots"}
    assert not any("matplotlib.pyplot" in mods for mods in imports.values())


def test_each_concept_is_defined_once():
    """Every plot function in the plots module; reading and validating a run and printing its
    table in the reader; the stage-against-previous geomean in one function."""
    homes = _top_level_functions()
    plots_elsewhere = {
        f: m for f, m in homes.items() if f.startswith("plot_") and m != ["pearl_moe.plots"]
    }
    assert plots_elsewhere == {}
    for name in ("read_run", "validate_run", "run_files", "runs"):
        assert homes[name] == ["pearl_moe.replay"], name
    from pearl_moe import replay
    from pearl_moe.bench import cli

    assert cli.format_table is replay.format_table  # the run's table (tune's is another table)
    assert homes["step_geomeans"] == ["pearl_moe.bench.compare"]
    assert "_step_geomeans" not in homes


def test_course_and_bench_take_the_same_step_geomeans():
    """The notebooks' step (course.ablation_step) and the README's (bench step_summary) agree on
    every step of the committed ablation run."""
    from pearl_moe import replay
    from pearl_moe.bench.compare import ablation_summary, step_summary
    from pearl_moe.course import ablation_step

    run = replay.load_run("H200", "ablation")
    bench = {int(s["to"].removeprefix("pearl-s")): s for s in step_summary(ablation_summary(run))}
    assert set(bench) == {4, 5, 6, 7}
    for stage, entry in bench.items():
        course = ablation_step(run, stage)["geomean"]
        for part in ("all", "decode", "prefill"):
            for key in ("shapes", "geomean", "lo", "hi", "rounds_lo", "rounds_hi", "tokens"):
                assert course[part][key] == entry[part][key], (stage, part, key)
