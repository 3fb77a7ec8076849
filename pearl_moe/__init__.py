"""pearl-moe: a bf16 grouped GEMM for Mixture-of-Experts in CuTe DSL, and the MoE layer built on it.

The library is what a model imports::

    import pearl_moe as pm

    out = pm.grouped_gemm(A, W, offsets)            # A (rows, k), W (experts, n, k), bf16
    layer = pm.MoE(hidden, intermediate, experts, top_k)
    y = pm.moe_forward(x, w_gate_up, w_down, router_logits=logits, top_k=8)

It is ``config`` (:class:`GemmConfig` and its shared-memory / TMEM budget), ``hardware``,
``workloads``, ``kernels`` (validation, dispatch, the compile cache, the runtime pick from
``tuning/``, the tile scheduler, the ``sm90`` and ``sm100`` kernels), ``moe`` and ``tuning``. It
imports nothing of the lab and the course beside it: ``bench`` (harness, baselines, tuner, layer
bench), ``model`` (occupancy, latency model, roofline, calibration), ``results`` (the run files of
``results/``), ``course`` (what the notebooks call: plots, widgets, figures, sources, SASS) and
``diagnostics`` (selftest, descriptor probe, TMEM lanes). ``ARCHITECTURE.md`` draws the layers.

Importing the package is cheap: the call's modules load on first use of ``grouped_gemm`` (so a
compile worker that imports one kernel module loads no dispatch or tuning code), torch with the
layer (``MoE``, ``moe_forward``), CuTe DSL with the first kernel compiled.
"""

from .config import GemmConfig, max_ring_depth, smem_budget, tmem_columns
from .hardware import B200, GPUS, H100, H200, GpuSpec, detect_gpu, get_gpu
from .workloads import MODELS, GroupedProblem, get_model, make_problem, route

__version__ = "0.1.0"

#: Loaded on first use.
_LAZY = {
    "grouped_gemm": "pearl_moe.kernels.api",
    "interleave_gate_up": "pearl_moe.kernels.gated_layout",
    "deinterleave_gate_up": "pearl_moe.kernels.gated_layout",
    "MoE": "pearl_moe.moe",
    "moe_forward": "pearl_moe.moe",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pearl_moe' has no attribute {name!r}")


__all__ = [
    "B200",
    "GPUS",
    "H100",
    "H200",
    "GemmConfig",
    "GpuSpec",
    "GroupedProblem",
    "MODELS",
    "MoE",
    "deinterleave_gate_up",
    "detect_gpu",
    "get_gpu",
    "get_model",
    "grouped_gemm",
    "interleave_gate_up",
    "make_problem",
    "max_ring_depth",
    "moe_forward",
    "route",
    "smem_budget",
    "tmem_columns",
]
