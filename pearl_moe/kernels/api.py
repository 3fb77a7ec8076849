"""The public grouped GEMM: validation, dispatch by GPU architecture and stage, compile cache."""

from __future__ import annotations

import importlib

from ..config import GemmConfig
from ..workloads import check_dims, check_offsets

__all__ = ["grouped_gemm", "validate", "default_config", "stage_module", "STAGE_NAMES"]

#: Stage number -> module name inside ``pearl_moe.kernels.<arch>`` (same names for both archs).
STAGE_NAMES = {1: "stage1_gemm", 2: "stage2_grouped", 3: "stage3_persistent"}

_COMPILED: dict = {}


def default_config(arch: str) -> GemmConfig:
    """The configuration a stage runs with when the caller gives none (stages: as many as fit)."""
    if arch == "sm_90a":
        return GemmConfig(arch="sm_90a", tile_m=128, tile_n=128, tile_k=64).resolved()
    return GemmConfig(arch="sm_100a").resolved()


def stage_module(arch: str, stage: int):
    """Import ``pearl_moe.kernels.sm90.stage{N}_*`` or ``...sm100.stage{N}_*`` lazily."""
    if stage not in STAGE_NAMES:
        raise ValueError(f"stage must be one of {sorted(STAGE_NAMES)}, got {stage!r}")
    package = {"sm_90a": "sm90", "sm_100a": "sm100"}[arch]
    return importlib.import_module(f"pearl_moe.kernels.{package}.{STAGE_NAMES[stage]}")


def _arch_of(device) -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    if major == 9:
        return "sm_90a"
    if major == 10:
        return "sm_100a"
    raise ValueError(
        f"grouped_gemm runs on Hopper (sm_90) or Blackwell (sm_100) GPUs; this one is "
        f"sm_{major}{minor}"
    )


def validate(A, W, offsets, out=None, check: bool = True, device_type: str = "cuda"):
    """Raise ``ValueError`` for anything the kernels cannot run; returns (rows, n, k, experts).

    With ``check=False`` the offsets' *values* are not inspected (that needs a device-to-host
    copy, which a CUDA graph cannot capture); their dtype, device and length still are.
    """
    import torch

    for name, t in (("A", A), ("W", W)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.bfloat16:
            raise ValueError(f"{name} must be bfloat16, got {t.dtype}")
        if t.device.type != device_type:
            raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
    if A.dim() != 2:
        raise ValueError(f"A must be 2-D (rows, k), got shape {tuple(A.shape)}")
    if W.dim() != 3:
        raise ValueError(f"W must be 3-D (experts, n, k), got shape {tuple(W.shape)}")
    rows, k = A.shape
    experts, n, wk = W.shape
    if wk != k:
        raise ValueError(f"W's k ({wk}) differs from A's k ({k})")
    if experts < 1:
        raise ValueError("W has no experts")
    check_dims(k, n)
    if W.device != A.device:
        raise ValueError(f"A is on {A.device} but W on {W.device}")
    for name, t in (("A", A), ("W", W)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (row-major, k innermost)")
        if t.data_ptr() % 16:
            raise ValueError(f"{name}'s data pointer is not 16-byte aligned (TMA needs it)")
    if not isinstance(offsets, torch.Tensor):
        raise ValueError("offsets must be a torch.Tensor of int32 on A's device")
    if offsets.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"offsets must be int32 (or int64), got {offsets.dtype}")
    if offsets.device != A.device:
        raise ValueError(f"offsets are on {offsets.device} but A on {A.device}")
    if offsets.dim() != 1 or offsets.numel() not in (experts, experts + 1):
        raise ValueError(
            f"expected {experts} end offsets or {experts + 1} cu_seqlens for W's {experts} "
            f"experts, got shape {tuple(offsets.shape)}"
        )
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.dtype != torch.bfloat16:
            raise ValueError("out must be a bfloat16 torch.Tensor")
        if tuple(out.shape) != (rows, n):
            raise ValueError(f"out must have shape {(rows, n)}, got {tuple(out.shape)}")
        if out.device != A.device:
            raise ValueError(f"out is on {out.device} but A on {A.device}")
        if not out.is_contiguous() or out.data_ptr() % 16:
            raise ValueError("out must be contiguous with a 16-byte aligned data pointer")
    host_offsets = None
    if check:
        host_offsets = check_offsets(offsets.detach().cpu(), rows, experts)
    return rows, n, k, experts, host_offsets


def _compiled(arch: str, stage: int, config: GemmConfig, n: int, k: int, experts: int, sms: int):
    key = (arch, stage, config, n, k, experts, sms, "bf16")
    fn = _COMPILED.get(key)
    if fn is None:
        fn = stage_module(arch, stage).compile_kernel(config, n, k, experts, sms)
        _COMPILED[key] = fn
    return fn


def grouped_gemm(
    A,
    W,
    offsets,
    config=None,
    out=None,
    stage: int = 3,
    check: bool = True,
    host_offsets=None,
):
    """``out[rows_e] = A[rows_e] @ W[e]^T`` for every expert ``e``.

    A (rows, k) bf16, W (E, n, k) bf16, offsets: E int32 end offsets (torch ``grouped_mm``) or
    E + 1 ``cu_seqlens`` with a leading 0. Returns ``out`` (rows, n) bf16. Every problem is a
    ``ValueError`` raised before anything is launched. ``check=False`` skips the offsets' value
    check (no device-to-host copy: the call can be captured in a CUDA graph). Stage 1, the
    per-expert loop, needs the offsets on the host: pass them as ``host_offsets`` (a list, e.g.
    from the router; validated on the host, no device copy) or let the call copy them.
    """
    import torch

    if stage not in STAGE_NAMES:
        raise ValueError(f"stage must be one of {sorted(STAGE_NAMES)}, got {stage!r}")
    if config is not None and not isinstance(config, GemmConfig):
        raise ValueError(f"config must be a GemmConfig, got {type(config).__name__}")
    rows, n, k, experts, checked_host = validate(A, W, offsets, out, check)
    if host_offsets is not None:
        host_offsets = check_offsets(host_offsets, rows, experts)
        if checked_host is not None and checked_host != host_offsets:
            raise ValueError("host_offsets differ from the offsets tensor")
    arch = _arch_of(A.device)
    config = (config or default_config(arch)).resolved()
    if config.arch != arch:
        raise ValueError(f"config is for {config.arch} but the GPU is {arch}")
    if arch == "sm_90a":
        from .sm90.common import can_implement

        problems = can_implement(config, n, k)
        if problems:
            raise ValueError("; ".join(problems))
    if stage == 1 and host_offsets is None:
        host_offsets = checked_host or check_offsets(offsets.detach().cpu(), rows, experts)
    from .host import cuda_stream, device_end_offsets

    if out is None:
        out = torch.empty(rows, n, dtype=torch.bfloat16, device=A.device)
    if rows == 0:
        return out
    end_offsets = device_end_offsets(offsets, experts)
    sms = torch.cuda.get_device_properties(A.device).multi_processor_count
    fn = _compiled(arch, stage, config, n, k, experts, sms)
    stage_module(arch, stage).launch(
        fn, A, W, end_offsets, out, host_offsets, cuda_stream(A.device)
    )
    return out
