"""The benchmark's modules depend on each other one way, and the registry resolves every name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pearl_moe.bench import registry

BENCH = Path(__file__).resolve().parent.parent / "pearl_moe" / "bench"


def _imports(path: Path) -> set[str]:
    """Modules of pearl_moe.bench that ``path`` imports, at any level (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:  # from .harness import x
                found.add(node.module.split(".")[0])
            elif node.level == 1:  # from . import harness
                found.update(a.name for a in node.names)
            elif node.module and node.module.startswith("pearl_moe.bench."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("pearl_moe.bench."):
                    found.add(a.name.split(".")[2])
    return found & {p.stem for p in BENCH.glob("*.py")}


def test_bench_imports_form_no_cycle():
    graph = {p.stem: _imports(p) - {p.stem} for p in BENCH.glob("*.py")}
    assert "baselines" not in graph["harness"], "harness must not import baselines"
    assert "harness" not in graph["baselines"], "baselines register into the registry only"
    assert graph["registry"] == set(), "the registry imports nothing of the benchmark"
    state: dict = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in graph.get(node, ()):
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join([*path, node, nxt]))
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = "done"

    for node in graph:
        if node not in state:
            visit(node, [])


def test_harness_reexports_the_registry():
    from pearl_moe.bench import harness

    assert harness.get_impl is registry.get_impl
    assert harness.Implementation is registry.Implementation
    assert harness.REGISTRY is registry.REGISTRY


def test_families_resolve_parametric_names():
    impl = registry.get_impl("pearl-s3:tile_m=64+ring_depth=5")
    assert impl.name == "pearl-s3:tile_m=64+ring_depth=5"
    assert impl.config == {"stage": 3, "overrides": {"tile_m": 64, "ring_depth": 5}}
    with pytest.raises(registry.ImplementationUnavailable, match="no stage 9"):
        registry.get_impl("pearl-s9")
    with pytest.raises(KeyError):
        registry.get_impl("pearl-sx")
    with pytest.raises(KeyError):
        registry.get_impl("nothing-like-it")


def test_cli_still_lists_builtin_impls():
    names = registry.impl_names()
    assert {"loop", "grouped_mm", "triton", "quack-tuned", "pearl", "pearl-s7"} <= set(names)


def test_flashinfer_says_why_it_is_not_measured():
    try:
        import flashinfer  # noqa: F401
    except Exception:
        with pytest.raises(registry.ImplementationUnavailable, match="could not be installed"):
            registry.get_impl("flashinfer")
    else:
        pytest.skip("flashinfer is installed here")
