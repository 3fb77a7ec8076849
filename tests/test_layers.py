"""The package is a library with a lab and a course beside it, and its imports run one way.

The library (what a model imports: ``grouped_gemm``, ``GemmConfig``, ``MoE``) is ``config``,
``hardware``, ``workloads``, ``kernels/`` and ``moe/``; it imports nothing of the lab (``bench/``,
``model/``, ``results``, ``diagnostics/``) or the course (``course/``). Inside it there are no
circles, and the kernels import nothing of the layer built on them. Each concept has one home:
the run files are read and written by :mod:`pearl_moe.results`, which reaches nothing that reads
runs; the plots module is the only one that imports matplotlib and reaches no module that gathers
data; the course and the bench take a step's geomeans with one function. No module reaches into
another's private names.

Read from the source (AST), every import counts, also those inside functions (a lazy import is
still a dependency); only ``if TYPE_CHECKING:`` blocks are left out, since they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pearl_moe"

#: The library: what ``grouped_gemm`` and ``MoE`` may load.
LIBRARY = (
    "pearl_moe.config",
    "pearl_moe.hardware",
    "pearl_moe.workloads",
    "pearl_moe.kernels",
    "pearl_moe.moe",
)
#: The lab and the course: built on the library, never imported by it.
LAB = (
    "pearl_moe.bench",
    "pearl_moe.model",
    "pearl_moe.results",
    "pearl_moe.diagnostics",
    "pearl_moe.course",
    "pearl_moe.__main__",
)
#: The most lines the library's import closure may hold (the issue's "about 10k").
LIBRARY_LINES = 10_500


def _is_library(name: str) -> bool:
    return (
        name == "pearl_moe"
        or name.startswith(tuple(m for m in LIBRARY))
        and not any(name == m or name.startswith(m + ".") for m in LAB)
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


def test_the_library_imports_nothing_of_the_lab_or_the_course():
    graph = import_graph()
    library = [name for name in graph if _is_library(name)]
    assert {"pearl_moe.kernels.api", "pearl_moe.moe.layer", "pearl_moe.config"} <= set(library)
    bad = [(name, dep) for name in library for dep in graph[name] if not _is_library(dep)]
    assert bad == []


def test_the_library_check_can_fail():
    assert not _is_library("pearl_moe.bench.harness")
    assert not _is_library("pearl_moe.results")
    assert not _is_library("pearl_moe.course.plots")
    assert _is_library("pearl_moe.kernels.sm90.common") and _is_library("pearl_moe")


def _closure(graph, roots) -> set[str]:
    """What importing ``roots`` loads: their imports, and the packages above every module."""
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in graph]
        todo += graph.get(name, ())
    return seen


def test_the_library_closure_is_small_and_holds_no_lab_module():
    """``grouped_gemm`` and ``MoE`` load only the library: at most about 10k lines."""
    graph, mods = import_graph(), _modules()
    # the package faces load these on first use (``__getattr__``): count them as imported
    roots = ["pearl_moe", "pearl_moe.kernels", "pearl_moe.kernels.api", "pearl_moe.moe"]
    closure = _closure(graph, roots)
    assert {"pearl_moe.kernels.autotune", "pearl_moe.kernels.sm90.stage3_persistent"} <= closure
    assert sorted(m for m in closure if not _is_library(m)) == []
    # the tuner's search space and the tables' studies are the lab's: the runtime pick only reads
    assert not closure & {"pearl_moe.bench.candidates", "pearl_moe.bench.table_studies"}
    lines = sum(len(mods[m].read_text().splitlines()) for m in closure)
    assert lines <= LIBRARY_LINES, lines


def test_one_can_implement_per_architecture_and_one_that_dispatches():
    """Can this run? One answer per architecture (``sm90.common``, ``sm100.common``) and one
    function that asks the configuration's architecture (``dispatch``, which ``api`` exports):
    no other module or class defines a ``can_implement``."""
    homes = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "can_implement":
                homes.append(name)
    assert sorted(homes) == [
        "pearl_moe.kernels.dispatch",
        "pearl_moe.kernels.sm100.common",
        "pearl_moe.kernels.sm90.common",
    ]
    from pearl_moe.kernels import api, dispatch

    assert api.can_implement is dispatch.can_implement


def test_the_kernels_import_nothing_of_the_layer():
    bad = [
        (name, dep)
        for name, deps in import_graph().items()
        if name.startswith("pearl_moe.kernels")
        for dep in deps
        if dep.startswith("pearl_moe.moe")
    ]
    assert bad == []


def _private_reaches(path: Path, name: str, mods: dict) -> list[str]:
    """``from x import _y`` of a package module, and ``m._y`` where ``m`` is a package module
    bound by an import: another module's private names used here."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found, bound = [], {}
    for node in _import_nodes(path):
        if isinstance(node, ast.ImportFrom):
            base = (
                ".".join(package[: len(package) - node.level + 1] + [node.module or ""])
                if node.level
                else node.module or ""
            ).rstrip(".")
            if not base.startswith("pearl_moe"):
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in mods:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
                elif alias.name.startswith("_") and base != name:
                    found.append(f"{name}: from {base} import {alias.name}")
        else:
            for alias in node.names:
                if alias.name.startswith("pearl_moe") and alias.asname:
                    bound[alias.asname] = alias.name
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and bound[node.value.id] != name
        ):
            found.append(f"{name}: {bound[node.value.id]}.{node.attr}")
    return found


def test_no_module_reaches_into_another_modules_private_names():
    mods = _modules()
    found = [hit for name, path in mods.items() for hit in _private_reaches(path, name, mods)]
    assert found == []


def test_the_private_name_check_can_fail(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(
        "from pearl_moe.kernels.api import _arch_of\n"
        "from pearl_moe.bench import harness\n"
        "def f():\n    return harness._sync\n"
    )
    mods = _modules()
    assert _private_reaches(path, "pearl_moe.probe", mods) == [
        "pearl_moe.probe: from pearl_moe.kernels.api import _arch_of",
        "pearl_moe.probe: pearl_moe.bench.harness._sync",
    ]


def test_a_kernel_module_loads_no_dispatch_or_tuning_code():
    """A compile worker imports one kernel module: the package faces stay light, so it loads
    neither the public call's validation and dispatch nor the tuning tables' reader."""
    import subprocess
    import sys

    code = (
        "import sys, pearl_moe.kernels.scheduler, pearl_moe.kernels.host\n"
        "print(sorted(m for m in sys.modules if m.startswith('pearl_moe')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(out.stdout.strip()))
    assert "pearl_moe.kernels.scheduler" in loaded
    assert not loaded & {"pearl_moe.kernels.api", "pearl_moe.kernels.autotune", "pearl_moe.moe"}


def test_the_package_face_serves_the_library():
    import pearl_moe as pm

    assert pm.grouped_gemm is __import__("pearl_moe.kernels", fromlist=["x"]).grouped_gemm
    assert pm.MoE.__module__ == "pearl_moe.moe.layer"
    assert pm.GemmConfig.__module__ == "pearl_moe.config"
    assert callable(pm.moe_forward) and callable(pm.interleave_gate_up)


def test_the_base_install_needs_no_course_or_bench_package():
    """``pip install pearl-moe`` brings torch, numpy and the DSL; the course's and the bench's
    packages are extras."""
    from importlib.metadata import requires

    base = [r.split(";")[0] for r in requires("pearl-moe") if "extra ==" not in r]
    names = sorted(r.split(">")[0].split("=")[0].split("<")[0].strip() for r in base)
    assert names == ["numpy", "nvidia-cutlass-dsl", "torch"]
    extras = [r for r in requires("pearl-moe") if "extra ==" in r]
    for package in ("jupyterlab", "ipywidgets", "matplotlib"):
        assert any(r.startswith(package) and 'extra == "course"' in r for r in extras), package


# ---------------------------------------------------------------------------- one home per concept
#: The reader of ``results/`` sits below everything that reads runs: it reaches none of these.
ABOVE_READER = (
    "pearl_moe.bench",
    "pearl_moe.course",
    "pearl_moe.course.plots",
    "pearl_moe.course.figures",
    "pearl_moe.course.widgets",
    "pearl_moe.model.calibrate",
    "pearl_moe.course.doc_tables",
    "pearl_moe.model.perfmodel",
    "pearl_moe.kernels",
)
#: The plots draw what they are given: they reach none of the modules that gather the data.
ABOVE_PLOTS = (
    "pearl_moe.bench",
    "pearl_moe.course",
    "pearl_moe.course.figures",
    "pearl_moe.course.widgets",
)


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
    assert "pearl_moe.results" in graph["pearl_moe.bench.cli"]  # the bench reads through it
    assert sorted(d for d in _reach(graph, "pearl_moe.results") if d.startswith(ABOVE_READER)) == []


def test_plots_reach_no_data_gathering_module():
    graph = import_graph()
    assert (
        sorted(d for d in _reach(graph, "pearl_moe.course.plots") if d.startswith(ABOVE_PLOTS))
        == []
    )


def test_the_lab_imports_no_course():
    """The bench, the models, the run files and the diagnostics are below the course."""
    bad = [
        (name, dep)
        for name, deps in import_graph().items()
        if name.startswith(("pearl_moe.bench", "pearl_moe.model", "pearl_moe.results"))
        or name.startswith("pearl_moe.diagnostics")
        for dep in deps
        if dep.startswith("pearl_moe.course")
    ]
    assert bad == []


def test_only_the_plots_module_imports_matplotlib():
    """Drawing lives in pearl_moe.course.plots: no other module imports matplotlib, at module level or
    inside a function; and nothing uses pyplot (figures are built without global state)."""
    imports = {name: _external_imports(path) for name, path in _modules().items()}
    users = {
        name for name, mods in imports.items() if any(m.startswith("matplotlib") for m in mods)
    }
    assert users == {"pearl_moe.course.plots"}
    assert not any("matplotlib.pyplot" in mods for mods in imports.values())


def test_each_concept_is_defined_once():
    """Every plot function in the plots module; reading and validating a run and printing its
    table in the reader; the stage-against-previous geomean in one function."""
    homes = _top_level_functions()
    plots_elsewhere = {
        f: m for f, m in homes.items() if f.startswith("plot_") and m != ["pearl_moe.course.plots"]
    }
    assert plots_elsewhere == {}
    for name in ("read_run", "validate_run", "run_files", "runs"):
        assert homes[name] == ["pearl_moe.results"], name
    from pearl_moe import results
    from pearl_moe.bench import cli

    assert cli.format_table is results.format_table  # the run's table (tune's is another table)
    assert homes["step_geomeans"] == ["pearl_moe.bench.compare"]
    assert "_step_geomeans" not in homes


def test_course_and_bench_take_the_same_step_geomeans():
    """The notebooks' step (course.ablation_step) and the README's (bench step_summary) agree on
    every step of the committed ablation run."""
    from pearl_moe import results
    from pearl_moe.bench.compare import ablation_summary, step_summary
    from pearl_moe.course import ablation_step

    run = results.load_run("H200", "ablation")
    bench = {int(s["to"].removeprefix("pearl-s")): s for s in step_summary(ablation_summary(run))}
    assert set(bench) == {4, 5, 6, 7}
    for stage, entry in bench.items():
        course = ablation_step(run, stage)["geomean"]
        for part in ("all", "decode", "prefill"):
            for key in ("shapes", "geomean", "lo", "hi", "rounds_lo", "rounds_hi", "tokens"):
                assert course[part][key] == entry[part][key], (stage, part, key)
