"""The disk cache of compiled kernels, proven on a CPU: a second process finds the object the first
one stored and does not call ``cute.compile`` (sm_90a stage 3 compiles here with placeholder
pointers, as on the GPU machine). What only a GPU can show (the loaded kernel's output, inside a
CUDA graph, and the first-call time) is in ``tests/test_compile_cache_gpu.py`` and
``scripts/first_call.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pearl_moe.config import GemmConfig
from pearl_moe.kernels import compile_cache

ROOT = Path(__file__).resolve().parent.parent

_CALL = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    import cutlass.cute as cute
    if sys.argv[1] == "forbid":
        def no_compile(*a, **k):
            raise AssertionError("cute.compile called although the kernel is cached")
        cute.compile = no_compile
    from pearl_moe.config import GemmConfig
    from pearl_moe.kernels import api, compile_cache
    t1 = time.perf_counter()
    cfg = GemmConfig(arch="sm_90a", tile_m=64, tile_n=128, tile_k=64).resolved()
    fn = api.compiled_kernel("sm_90a", 3, cfg, 4096, 6144, 32, 132)
    t2 = time.perf_counter()
    sig = list(fn.execution_args.signature.parameters) if hasattr(fn, "execution_args") else []
    print("RESULT=" + json.dumps({"stats": compile_cache.STATS, "import_s": t1 - t0,
        "kernel_s": t2 - t1, "type": type(fn).__name__, "params": sig}))
    """
)


def _run(tmp_path, mode: str, cache: Path) -> dict:
    script = tmp_path / "call.py"
    script.write_text(_CALL)
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", PEARL_MOE_KERNEL_CACHE=str(cache))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("CUTE_DSL_KEEP", None)
    res = subprocess.run(
        [sys.executable, str(script), mode],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    line = [x for x in res.stdout.splitlines() if x.startswith("RESULT=")][-1]
    return json.loads(line[len("RESULT=") :])


def test_key_names_everything_that_changes_the_object():
    cfg = GemmConfig(arch="sm_90a", tile_m=64, tile_n=128, tile_k=64).resolved()
    base = compile_cache.kernel_key("sm_90a", 3, cfg, 4096, 6144, 32, 132)
    assert base == compile_cache.kernel_key("sm_90a", 3, cfg, 4096, 6144, 32, 132)
    others = [
        compile_cache.kernel_key("sm_90a", 4, cfg, 4096, 6144, 32, 132),
        compile_cache.kernel_key("sm_90a", 3, cfg.with_(ring_depth=5), 4096, 6144, 32, 132),
        compile_cache.kernel_key("sm_90a", 3, cfg, 4096, 6144, 32, 148),
        compile_cache.kernel_key("sm_90a", 3, cfg, 6144, 6144, 32, 132),
        compile_cache.kernel_key("sm_90a", 3, cfg, 4096, 6144, 48, 132),
    ]
    assert len({base, *others}) == 6


def test_cache_off_compiles_every_time(monkeypatch):
    monkeypatch.setenv(compile_cache.ENV_DIR, "off")
    calls = []
    cfg = GemmConfig(arch="sm_90a").resolved()
    fn = compile_cache.get_or_compile(
        "sm_90a", 3, cfg, 64, 64, 1, 132, lambda: calls.append(1) or "fn"
    )
    assert fn == "fn" and calls == [1] and compile_cache.cache_root() is None


@pytest.mark.slow
def test_second_process_loads_instead_of_compiling(tmp_path):
    cache = tmp_path / "kernels"
    first = _run(tmp_path, "compile", cache)
    assert first["stats"]["misses"] == 1 and first["stats"]["stores"] == 1
    assert first["stats"]["hits"] == 0
    entries = list(cache.iterdir())
    assert len(entries) == 1
    objects = sorted(p.name for p in entries[0].iterdir())
    assert any(name.startswith("native-") and name.endswith(".o") for name in objects)
    meta = json.loads((entries[0] / "meta.json").read_text())
    assert meta["label"].startswith("sm_90a 64x128x64") and meta["sms"] == 132

    second = _run(tmp_path, "forbid", cache)  # cute.compile raises in this process
    assert second["stats"]["hits"] == 1 and second["stats"]["misses"] == 0
    assert second["type"] == "CudaDialectJitCompiledFunction"
    assert second["params"] == [
        "a_ptr", "w_ptr", "offs_ptr", "c_ptr", "idx_ptr", "rows", "stream"
    ]  # fmt: skip
    assert second["kernel_s"] < first["kernel_s"]
    print(
        f"\nfirst process: compile+store {first['kernel_s']:.2f} s; "
        f"second process: load {second['kernel_s'] * 1e3:.0f} ms"
    )

    # a damaged object is dropped and compiled again, never loaded
    for obj in entries[0].glob("*.o"):
        obj.write_bytes(b"\x7fELF garbage")
    third = _run(tmp_path, "compile", cache)
    assert third["stats"]["errors"] >= 1 and third["stats"]["misses"] == 1


@pytest.mark.slow
def test_precompile_workers_store_portable_objects(tmp_path, monkeypatch):
    cache = tmp_path / "kernels"
    monkeypatch.setenv(compile_cache.ENV_DIR, str(cache))
    cfg = GemmConfig(arch="sm_90a", tile_m=64, tile_n=256, tile_k=64)
    bad = GemmConfig(arch="sm_90a", tile_m=128, tile_n=256, tile_k=64, ring_depth=9)  # no fit
    seen = []
    results = compile_cache.precompile(
        [
            ("sm_90a", 3, cfg, 4096, 6144, 32, 132),
            ("sm_90a", 3, cfg, 4096, 6144, 32, 132),  # a duplicate: compiled once
            ("sm_90a", 3, bad, 4096, 6144, 32, 132),
        ],
        jobs=2,
        progress=seen.append,
    )
    assert results[0]["ok"] and results[1]["key"] == results[0]["key"]
    assert not results[2]["ok"] and results[2]["error"]
    assert len(seen) == 2
    folder = cache / results[0]["key"]
    assert (folder / f"{compile_cache.PORTABLE_LABEL}.o").is_file()
    again = compile_cache.precompile([("sm_90a", 3, cfg, 4096, 6144, 32, 132)], jobs=1)
    assert again[0]["cached"]
    # and a process of the API loads the portable object without compiling
    script = tmp_path / "load.py"
    script.write_text(
        textwrap.dedent(
            """
            import cutlass.cute as cute
            cute.compile = None  # any compile would fail
            from pearl_moe.config import GemmConfig
            from pearl_moe.kernels import api, compile_cache
            cfg = GemmConfig(arch="sm_90a", tile_m=64, tile_n=256, tile_k=64).resolved()
            api.compiled_kernel("sm_90a", 3, cfg, 4096, 6144, 32, 132)
            assert compile_cache.STATS["hits"] == 1, compile_cache.STATS
            print("ok")
            """
        )
    )
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    res = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600
    )
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]
