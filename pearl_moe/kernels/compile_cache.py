"""Compiled kernels on disk, so a new process loads a kernel instead of compiling it again.

CuTe DSL 4.8.1 keeps no compiled kernel between processes for ``cute.compile`` (it sets
``no_cache``; its own file cache under ``CUTE_DSL_CACHE_DIR`` serves ``@cute.jit`` calls, keyed by a
hash of the traced IR, so even a hit pays for tracing). What it offers is ahead-of-time export:

* ``compiled.dump_to_object(prefix)`` returns an ELF object holding the host launch function and
  the cubin (``export_to_c`` writes the same object plus a C header);
* ``cutlass.cute.runtime.load_module(path)`` loads such an object into a JIT engine, and
  ``module[prefix]`` returns a ``JitCompiledFunction`` with the same run-time signature
  (pointers, ``rows``, stream) as the one ``cute.compile`` returned. Loading takes milliseconds and
  needs no tracing, no MLIR passes and no ptxas.

The object's host code is compiled for a CPU. In this process a kernel is compiled for the native
CPU and stored under a label naming it (``native-<hash of the CPU model and flags>``); compile workers
(:func:`precompile`) build for a portable x86-64-v2 host instead (``--host-target``) so a cache built
on one machine (e.g. the CPU machine, before a GPU session) is valid on another. The GPU code is the
same either way (the cubin is byte-identical).

The key of an entry (:func:`kernel_key`) is the architecture (the kernel family and the exact
compile target, :mod:`pearl_moe.kernels.targets`: a B300 builds the sm_100a kernels for
sm_103a), stage, full configuration, ``n``, ``k``, experts, SM count (the persistent grid), the
DSL version with the CUDA flavour of its libraries (cu12 / cu13: their
compilers differ) and a hash of the package's kernel sources (the one ``pearl_moe.course.kernel_report`` keys its
cache with, :func:`source_fingerprint`), so an edited kernel or another DSL never loads a stale object. Entries live under ``$PEARL_MOE_KERNEL_CACHE`` (``off`` disables the cache), else
``$PEARL_MOE_CACHE/kernels``, else ``~/.cache/pearl-moe/kernels``; each is a folder with the object
and a ``meta.json`` saying what it is.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from ..config import GemmConfig
from .targets import compile_target

__all__ = [
    "ENV_DIR",
    "PORTABLE_HOST",
    "PORTABLE_LABEL",
    "STATS",
    "cache_root",
    "enabled",
    "kernel_key",
    "host_label",
    "load",
    "store",
    "get_or_compile",
    "precompile",
    "source_fingerprint",
]

ENV_DIR = "PEARL_MOE_KERNEL_CACHE"
#: Entry format: bump when what is stored changes.
FORMAT = 1
#: ``cute.compile`` option that makes the host side of an object portable across x86-64 machines.
PORTABLE_HOST = "--host-target 'llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=x86-64-v2'"
PORTABLE_LABEL = "x86-64-v2"
#: Counters of this process: disk hits, misses (compiled here), stores, load errors.
STATS = {"hits": 0, "misses": 0, "stores": 0, "errors": 0, "load_seconds": 0.0}


def cache_root() -> Path | None:
    """The cache folder, or None when ``$PEARL_MOE_KERNEL_CACHE`` is ``off``."""
    env = os.environ.get(ENV_DIR, "").strip()
    if env.lower() in ("off", "0", "none", "false"):
        return None
    if env:
        return Path(env)
    base = os.environ.get("PEARL_MOE_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "pearl-moe"
    )
    return Path(base) / "kernels"


def enabled() -> bool:
    return cache_root() is not None


def source_fingerprint() -> str:
    """Hash of every file a compile depends on in this package (``kernels/``, ``config.py``) and
    the DSL's version: part of every cache key here and in
    :mod:`pearl_moe.course.kernel_report`, so an edited kernel never loads a stale object."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    paths = sorted((root / "kernels").rglob("*.py")) + [root / "config.py"]
    for path in paths:
        if path.exists():
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    try:
        from importlib.metadata import version

        digest.update(version("nvidia-cutlass-dsl").encode())
    except Exception:  # pragma: no cover - metadata missing in odd installs
        pass
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def _fingerprint() -> str:
    return source_fingerprint()


@functools.lru_cache(maxsize=1)
def _dsl_version() -> str:
    """``4.8.1+cu13``: the DSL version and the CUDA flavour of its libraries (the cu12 and cu13
    builds bundle different compilers, so their cubins may differ)."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        text = version("nvidia-cutlass-dsl")
        for flavour in ("cu13", "cu12"):
            try:
                version(f"nvidia-cutlass-dsl-libs-{flavour}")
            except PackageNotFoundError:
                continue
            return f"{text}+{flavour}"
        return text
    except Exception:  # pragma: no cover
        return "unknown"


def kernel_key(
    arch: str, stage: int, config: GemmConfig, n: int, k: int, experts: int, sms: int
) -> str:
    """Hex key of one compiled kernel: everything that changes the object."""
    blob = json.dumps(
        {
            "format": FORMAT,
            "arch": arch,
            "target": compile_target(arch),
            "stage": int(stage),
            "config": asdict(config),
            "n": int(n),
            "k": int(k),
            "experts": int(experts),
            "sms": int(sms),
            "dsl": _dsl_version(),
            "src": _fingerprint(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=1)
def _native_label() -> str:
    text = platform.machine()
    try:
        info = Path("/proc/cpuinfo").read_text()
        for line in info.splitlines():
            if line.startswith(("model name", "flags")):
                text += "|" + line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    break
    except OSError:
        text += "|" + platform.processor()
    return "native-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def host_label(portable: bool) -> str:
    """Label of an object's host code: portable x86-64-v2, or this machine's CPU."""
    return PORTABLE_LABEL if portable else _native_label()


def _prefix(key: str) -> str:
    return f"pearl_{key[:24]}"


def _labels_here() -> list[str]:
    labels = [_native_label()]
    if platform.machine() in ("x86_64", "AMD64"):
        labels.insert(0, PORTABLE_LABEL)
    return labels


def load(key: str):
    """The compiled kernel stored under ``key`` (a ``JitCompiledFunction``), or None."""
    root = cache_root()
    if root is None:
        return None
    for label in _labels_here():
        path = root / key / f"{label}.o"
        if not path.is_file():
            continue
        t0 = time.perf_counter()
        try:
            import cutlass.cute as cute

            fn = cute.runtime.load_module(str(path))[_prefix(key)]
        except Exception:  # a truncated or foreign object: forget it and compile
            STATS["errors"] += 1
            try:
                path.unlink()
            except OSError:
                pass
            continue
        STATS["hits"] += 1
        STATS["load_seconds"] += time.perf_counter() - t0
        return fn
    return None


def store(key: str, compiled, meta: dict, portable: bool = False) -> Path | None:
    """Write ``compiled`` (from ``cute.compile``) under ``key``; atomic, so concurrent writers of
    one key are harmless. Returns the object's path (None if the cache is off or writing failed)."""
    root = cache_root()
    if root is None:
        return None
    folder = root / key
    path = folder / f"{host_label(portable)}.o"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        data = compiled.dump_to_object(_prefix(key))
        tmp = folder / f".{path.name}.{os.getpid()}.part"
        tmp.write_bytes(data)
        os.replace(tmp, path)
        meta_path = folder / "meta.json"
        if not meta_path.exists():
            tmp = folder / f".meta.{os.getpid()}.part"
            tmp.write_text(json.dumps(meta, indent=1, default=str))
            os.replace(tmp, meta_path)
    except Exception:
        STATS["errors"] += 1
        return None
    STATS["stores"] += 1
    return path


def _meta(arch, stage, config, n, k, experts, sms, seconds) -> dict:
    return {
        "arch": arch,
        "stage": stage,
        "config": asdict(config),
        "label": config.describe(),
        "n": n,
        "k": k,
        "experts": experts,
        "sms": sms,
        "dsl": _dsl_version(),
        "compile_seconds": round(seconds, 3),
        "host": platform.node(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def get_or_compile(
    arch: str,
    stage: int,
    config: GemmConfig,
    n: int,
    k: int,
    experts: int,
    sms: int,
    compile_fn,
    portable: bool = False,
):
    """The kernel from disk if it is there, else ``compile_fn()`` (stored for the next process)."""
    if not enabled():
        return compile_fn()
    key = kernel_key(arch, stage, config, n, k, experts, sms)
    fn = load(key)
    if fn is not None:
        return fn
    STATS["misses"] += 1
    t0 = time.perf_counter()
    fn = compile_fn()
    seconds = time.perf_counter() - t0
    store(key, fn, _meta(arch, stage, config, n, k, experts, sms, seconds), portable)
    return fn


# ------------------------------------------------------------------------------ precompile
def _portable_compile():
    """In a compile worker: make every ``cute.compile`` emit portable x86-64-v2 host code.
    Returns a function that restores the DSL's own ``cute.compile``."""
    import cutlass.cute as cute

    original = cute.compile

    def compile_portable(*args, **kwargs):
        kwargs["options"] = f"{kwargs.get('options') or ''} {PORTABLE_HOST}".strip()
        return original(*args, **kwargs)

    cute.compile = compile_portable

    def restore():
        cute.compile = original

    return restore


def _worker() -> None:
    """Compile worker: jobs (JSON on stdin) -> cache entries; one JSON line per job on stdout."""
    import traceback

    jobs = json.loads(sys.stdin.read())
    portable = platform.machine() in ("x86_64", "AMD64")
    restore = _portable_compile() if portable else None
    from .dispatch import stage_module

    root = cache_root()
    for job in jobs:
        config = GemmConfig.from_dict(job["config"])
        result = {"key": job["key"], "ok": False}
        t0 = time.perf_counter()
        try:
            if root is not None and any(
                (root / job["key"] / f"{label}.o").is_file() for label in _labels_here()
            ):
                result.update(ok=True, cached=True)
            else:
                module = stage_module(job["arch"], job["stage"])
                args = (config, job["n"], job["k"], job["experts"], job["sms"])
                try:
                    fn = module.compile_kernel(*args)
                except Exception:
                    if not portable:
                        raise
                    # a DSL build that refuses the portable host target: native host code
                    restore()
                    portable = False
                    fn = module.compile_kernel(*args)
                seconds = time.perf_counter() - t0
                meta = _meta(
                    job["arch"], job["stage"], config, job["n"], job["k"], job["experts"],
                    job["sms"], seconds,
                )  # fmt: skip
                path = store(job["key"], fn, meta, portable)
                result.update(ok=path is not None, cached=False, path=str(path))
        except Exception as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            result["traceback"] = traceback.format_exc()[-3000:]
        result["seconds"] = round(time.perf_counter() - t0, 3)
        print("PEARL_MOE_COMPILED=" + json.dumps(result), flush=True)


def precompile(
    requests, jobs: int | None = None, timeout: float = 1200, progress=None
) -> list[dict]:
    """Compile ``requests`` — ``(arch, stage, config, n, k, experts, sms)`` tuples — into the disk
    cache in ``jobs`` worker processes (no GPU needed: ``CUTE_DSL_ARCH`` is set per arch). Entries
    already cached are skipped. Returns one dict per request: ``key``, ``ok``, ``cached``,
    ``seconds``, ``error``. ``progress(result)`` is called as each finishes."""
    root = cache_root()
    if root is None:
        raise RuntimeError(f"the kernel cache is off (${ENV_DIR}=off): nothing to precompile into")
    keyed = []
    results: dict = {}
    for arch, stage, config, n, k, experts, sms in requests:
        try:
            config = config.resolved()
        except ValueError as exc:  # does not fit: reported, not compiled
            key = kernel_key(arch, stage, config, n, k, experts, sms)
            keyed.append({"key": key})
            results[key] = {"key": key, "ok": False, "seconds": 0.0, "error": str(exc)}
            if progress:
                progress(results[key])
            continue
        key = kernel_key(arch, stage, config, n, k, experts, sms)
        keyed.append(
            {
                "key": key,
                "arch": arch,
                "stage": stage,
                "config": asdict(config),
                "n": n,
                "k": k,
                "experts": experts,
                "sms": sms,
            }
        )
    todo = []
    for job in keyed:
        if job["key"] in results or any(job["key"] == t["key"] for t in todo):
            continue
        if any((root / job["key"] / f"{label}.o").is_file() for label in _labels_here()):
            results[job["key"]] = {"key": job["key"], "ok": True, "cached": True, "seconds": 0.0}
            if progress:
                progress(results[job["key"]])
        else:
            todo.append(job)
    if todo:
        _run_workers(todo, jobs, timeout, results, progress)
    return [results[job["key"]] for job in keyed]


def _run_workers(todo: list, jobs: int | None, timeout: float, results: dict, progress) -> None:
    import threading

    jobs = max(1, min(jobs or (os.cpu_count() or 2), len(todo)))
    package_root = str(Path(__file__).resolve().parent.parent.parent)
    lock = threading.Lock()
    workers = []
    for w in range(jobs):
        by_arch: dict = {}
        for job in todo[w::jobs]:
            by_arch.setdefault(job["arch"], []).append(job)
        for arch, arch_jobs in by_arch.items():
            env = dict(os.environ)
            env["CUTE_DSL_ARCH"] = compile_target(arch)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
            env.pop("CUTE_DSL_KEEP", None)  # keeping PTX/SASS would slow every compile
            scratch = tempfile.mkdtemp(prefix="pearl-moe-precompile-")
            err = open(os.path.join(scratch, "stderr.txt"), "w+")  # noqa: SIM115
            proc = subprocess.Popen(
                [sys.executable, "-c", "from pearl_moe.kernels.compile_cache import _worker; _worker()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                cwd=scratch,
            )  # fmt: skip
            proc.stdin.write(json.dumps(arch_jobs))
            proc.stdin.close()
            workers.append((proc, arch_jobs, err, scratch))

    def read(proc):
        for line in proc.stdout:
            if line.startswith("PEARL_MOE_COMPILED="):
                res = json.loads(line[len("PEARL_MOE_COMPILED=") :])
                with lock:
                    results[res["key"]] = res
                    if progress:
                        progress(res)

    threads = [threading.Thread(target=read, args=(p,), daemon=True) for p, _, _, _ in workers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for (proc, arch_jobs, err, scratch), thread in zip(workers, threads, strict=True):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        thread.join(timeout=5)
        err.seek(0)
        tail = err.read()[-1500:]
        err.close()
        shutil.rmtree(scratch, ignore_errors=True)
        for job in arch_jobs:
            if job["key"] not in results:
                results[job["key"]] = {
                    "key": job["key"],
                    "ok": False,
                    "seconds": 0.0,
                    "error": f"compile worker exited with {proc.returncode}: {tail}",
                }
