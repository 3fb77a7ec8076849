"""pearl-moe: a course and package building a bf16 grouped GEMM for MoE in CuTe DSL, stage by stage.

The package is the single home of the code; the notebooks in ``notebooks/`` narrate and call into it.
Importing it is cheap: CuTe DSL, torch's CUDA side and the kernels load only when first used.
"""

from .budget import max_ring_depth, smem_budget, tmem_columns
from .config import GemmConfig
from .hardware import B200, GPUS, H100, H200, GpuSpec, detect_gpu, get_gpu
from .workloads import MODELS, GroupedProblem, get_model, make_problem, route

__version__ = "0.1.0"

#: Loaded on first use (they import torch): ``pearl_moe.MoE``, ``pearl_moe.moe_forward``.
_LAZY = {"MoE": "pearl_moe.moe", "moe_forward": "pearl_moe.moe"}


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
    "detect_gpu",
    "get_gpu",
    "get_model",
    "make_problem",
    "max_ring_depth",
    "moe_forward",
    "route",
    "smem_budget",
    "tmem_columns",
]
