"""The registry of grouped-GEMM implementations: names -> factories, and the types they return.

Dependencies run one way. This module imports nothing of the benchmark; the modules that define
implementations (:mod:`pearl_moe.bench.baselines`) import it and register into it; the harness and
the command line import it to look names up. The built-in providers are named here as strings
(:data:`PROVIDERS`) and imported by name the first time a name is asked for, so optional packages
(quack, triton, our kernels) load only then and no module imports its importer.

Two kinds of names:

* plain names (``loop``, ``triton``, ``pearl-s3``) registered with :func:`register`;
* parametric names handled by a *family*: ``pearl-s3:tile_m=64+ring_depth=5`` is resolved by the
  factory registered with :func:`register_family` for the prefix ``pearl-s`` and the separator ``:``.

Two benches draw on it, each on a registry of its own (``kind``): ``"gemm"`` (the default), the
grouped GEMMs ``python -m pearl_moe bench`` times (``prepare(A, W, offsets, counts)``), and
``"layer"``, the whole MoE layers ``python -m pearl_moe layer`` times (``prepare(inputs)`` on the
dict of :func:`pearl_moe.bench.layer.make_layer_inputs`, registered by
:mod:`pearl_moe.bench.layer_impls`). Both return a
:class:`Prepared`; an implementation whose package is missing raises
:class:`ImplementationUnavailable` (a grouped GEMM's when it is asked for, a layer's when it is
prepared, which its check records as ``unavailable``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Implementation",
    "ImplementationUnavailable",
    "Prepared",
    "REGISTRY",
    "FAMILIES",
    "PROVIDERS",
    "LAYER_REGISTRY",
    "LAYER_PROVIDERS",
    "KINDS",
    "register",
    "register_family",
    "get_impl",
    "impl_names",
    "load_providers",
]


class ImplementationUnavailable(RuntimeError):
    """The implementation's package is missing here (quack, triton, our kernels) or cannot run."""


@dataclass
class Prepared:
    """An implementation bound to one set of inputs: ``run(out)`` does one forward call.

    ``writes_out`` is False for implementations that cannot write into a given buffer and return a
    fresh tensor instead (torch ``grouped_mm``); ``config`` is what was actually chosen (autotuners
    fill it in during ``prepare``).
    """

    run: Callable[[Any], Any]
    config: dict
    writes_out: bool = True


@dataclass
class Implementation:
    """A named grouped GEMM: ``prepare(A, W, offsets, counts) -> Prepared``.

    ``counts`` is the list of per-expert row counts on the host. Only the per-expert loop uses it: a
    loop of launches needs the sizes on the host, which in a real MoE layer costs a device-to-host
    copy; here it is given, so the timed region holds no synchronization.
    """

    name: str
    prepare: Callable[..., Prepared]
    config: dict = field(default_factory=dict)
    description: str = ""

    def __call__(self, A, W, offsets, out=None, counts=None):
        """One checked-free call: prepare, run, return the output."""
        if counts is None:
            from ..workloads import offsets_to_counts

            counts = offsets_to_counts(offsets)
        prepared = self.prepare(A, W, offsets, counts)
        if out is None and prepared.writes_out:
            import torch

            out = torch.empty((A.shape[0], W.shape[1]), dtype=A.dtype, device=A.device)
        result = prepared.run(out)
        return result if result is not None else out


#: name -> factory returning an Implementation. Factories run when a name is asked for.
REGISTRY: dict[str, Callable[[], Implementation]] = {}
#: (prefix, separator) -> factory(name) for parametric names such as ``pearl-s3:tile_m=64``.
FAMILIES: dict[tuple[str, str], Callable[[str], Implementation]] = {}
#: Modules that register the built-in implementations, imported by name on first use.
PROVIDERS: tuple[str, ...] = ("pearl_moe.bench.baselines",)
#: The whole MoE layer's implementations (``kind="layer"``), and the module that registers them.
LAYER_REGISTRY: dict[str, Callable[[], Implementation]] = {}
LAYER_PROVIDERS: tuple[str, ...] = ("pearl_moe.bench.layer_impls",)
#: kind -> (its registry, its families, the name of its providers' tuple in this module).
KINDS = {
    "gemm": (REGISTRY, FAMILIES, "PROVIDERS"),
    "layer": (LAYER_REGISTRY, {}, "LAYER_PROVIDERS"),
}
_loaded: set[str] = set()


def _kind(kind: str) -> tuple:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return KINDS[kind]


def register(name: str, factory: Callable[[], Implementation], kind: str = "gemm") -> None:
    _kind(kind)[0][name] = factory


def register_family(prefix: str, factory: Callable[[str], Implementation], sep: str = ":") -> None:
    """Names ``<prefix>...<sep>...`` not registered as such are built by ``factory(name)``."""
    FAMILIES[(prefix, sep)] = factory


def load_providers(kind: str = "gemm") -> None:
    """Import the provider modules of ``kind`` once (each registers its implementations)."""
    for module in globals()[_kind(kind)[2]]:
        if module not in _loaded:
            importlib.import_module(module)
            _loaded.add(module)


def impl_names(kind: str = "gemm") -> list[str]:
    load_providers(kind)
    return list(_kind(kind)[0])


def get_impl(name: str, kind: str = "gemm") -> Implementation:
    """The implementation of ``kind`` registered as ``name``; ImplementationUnavailable if it
    cannot load, KeyError if no such name is registered."""
    registry, families, _ = _kind(kind)
    load_providers(kind)
    if name in registry:
        return registry[name]()
    for (prefix, sep), factory in families.items():
        if name.startswith(prefix) and sep in name:
            return factory(name)
    what = "implementation" if kind == "gemm" else f"{kind} implementation"
    raise KeyError(f"unknown {what} {name!r}; known: {', '.join(registry)}")
