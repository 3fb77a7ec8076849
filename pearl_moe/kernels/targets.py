"""Which GPUs the kernels run on, the exact target each is compiled for, and its persistent grid.

Two names per GPU, on purpose:

* the **kernel family** (``"sm_90a"``, ``"sm_100a"``): which kernels run, which configuration
  space and budgets apply (``GemmConfig.arch``, ``pearl_moe.kernels.sm90`` / ``sm100``);
* the **compile target** (``"sm_90a"``, ``"sm_100a"``, ``"sm_103a"``): what the cubin is built for.
  An ``a`` target's cubin loads only on that exact compute capability: a kernel built for
  ``sm_100a`` fails on a B300 (compute capability 10.3) with "no kernel image". So a B300 runs the
  sm_100a family's kernels compiled for ``sm_103a`` (same tcgen05 instructions, 512 TMEM columns
  and 228 KB of shared memory per SM as the B200), and the disk cache keys entries by the target.

GPUs of any other capability are refused with a ``ValueError`` before anything is compiled.

The persistent kernels size their grid from the GPU: one CTA per SM, or in 2-CTA mode (sm_100a,
``cta_group=2``) one cluster of two per pair of SMs that can hold one at once. That count comes
from the driver (``cuOccupancyMaxActiveClusters``, as CUTLASS's examples ask for it): on a GPU whose
floor-sweeping leaves some TPCs with one usable SM, ``sms // 2`` clusters would not all fit and the
static schedule would run a second wave of whole clusters.
"""

from __future__ import annotations

import functools
import os

__all__ = [
    "SUPPORTED",
    "compile_target",
    "gpu_target",
    "max_active_clusters",
    "persistent_ctas",
]

#: Compute capability -> (kernel family, compile target).
SUPPORTED = {
    (9, 0): ("sm_90a", "sm_90a"),
    (10, 0): ("sm_100a", "sm_100a"),
    (10, 3): ("sm_100a", "sm_103a"),
}

#: Compile target -> the kernel family it builds.
FAMILY_OF_TARGET = {target: family for family, target in SUPPORTED.values()}

#: The environment variable CuTe DSL reads its compile target from (else it asks the GPU). The DSL
#: reads it when ``cutlass`` is first imported: set it before, not during, a process.
DSL_ARCH_ENV = "CUTE_DSL_ARCH"


def target_for_capability(major: int, minor: int) -> tuple[str, str]:
    """``(family, target)`` for a compute capability, or a ``ValueError`` that says why not."""
    if (major, minor) in SUPPORTED:
        return SUPPORTED[(major, minor)]
    known = ", ".join(f"{a}.{b} ({t})" for (a, b), (_, t) in SUPPORTED.items())
    raise ValueError(
        f"grouped_gemm has kernels for compute capabilities {known}; this GPU is "
        f"{major}.{minor} (sm_{major}{minor}). Its cubins would need a target of their own: the "
        "sm_90a kernels need wgmma (Hopper only) and the sm_100a kernels tcgen05 and tensor "
        "memory (datacenter Blackwell only)."
    )


@functools.lru_cache(maxsize=8)
def _capability(index: int) -> tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability(index))


def gpu_target(device) -> tuple[str, str]:
    """``(family, target)`` of a CUDA device, checked against ``$CUTE_DSL_ARCH``.

    Raises ``ValueError`` for an unsupported GPU, and when ``CUTE_DSL_ARCH`` asks the DSL for
    another target than this GPU's (its kernels would fail to load at the first launch).
    """
    import torch

    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    family, target = target_for_capability(*_capability(index))
    forced = os.environ.get(DSL_ARCH_ENV, "").strip()
    if forced and forced != target:
        raise ValueError(
            f"{DSL_ARCH_ENV}={forced} makes CuTe DSL compile for {forced}, but this GPU needs "
            f"{target} (an 'a' cubin loads only on its own compute capability): unset "
            f"{DSL_ARCH_ENV} or set it to {target}"
        )
    return family, target


def _local_target(family: str) -> str | None:
    """This machine's first GPU's target if it runs ``family``, else None (no GPU or another)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        fam, target = target_for_capability(*_capability(0))
    except Exception:
        return None
    return target if fam == family else None


def compile_target(family: str) -> str:
    """The target a compile of ``family``'s kernels builds for in this process.

    ``$CUTE_DSL_ARCH`` if it names a target of that family (CPU inspection sets it per family; a
    B300 user may set ``sm_103a``); else the local GPU's exact target when the GPU runs that family
    (a B300 gives ``sm_103a``); else the family's own (``sm_90a``, ``sm_100a``), which is what CuTe
    DSL builds on a machine without a GPU. A forced target of another family is not used for this
    one: compile workers for the sm_90a kernels on a B300 still build for ``sm_90a``.
    """
    forced = os.environ.get(DSL_ARCH_ENV, "").strip()
    if forced and FAMILY_OF_TARGET.get(forced) == family:
        return forced
    return _local_target(family) or family


@functools.lru_cache(maxsize=16)
def max_active_clusters(device_index: int, cluster_size: int) -> int:
    """Clusters of ``cluster_size`` CTAs (one CTA per SM) that the GPU can hold at once."""
    import torch
    from cutlass.utils import HardwareInfo

    # the driver query needs a current context: make torch's primary context of that device
    # current for the query only (the caller's current device is left as it was)
    with torch.cuda.device(device_index):
        torch.empty(1, device=f"cuda:{device_index}")
        return int(HardwareInfo(device_index).get_max_active_clusters(cluster_size))


def persistent_ctas(family: str, config, sms: int, device=None) -> int:
    """CTAs of a persistent launch of ``config`` on a GPU with ``sms`` SMs.

    One per SM, except kernels launched in clusters (2-CTA kernels on sm_100a, ``cluster_n=2`` or
    ``cluster_m=2`` on sm_90a): two per cluster the driver says fit at once (:func:`max_active_clusters`), at most
    ``sms // 2`` clusters. Without a device (a CPU compile), ``sms // 2`` clusters. The result is
    a compile-time constant of the kernel (its grid and the scheduler's stride) and part of its
    cache key.
    """
    cta_group = getattr(config, "cta_group", 1) if family == "sm_100a" else 1
    if family == "sm_90a":
        cta_group = getattr(config, "cluster_n", 1) * getattr(config, "cluster_m", 1)
    if cta_group == 1:
        return sms
    clusters = sms // cta_group
    if device is not None and str(device).startswith("cuda"):
        import torch

        device = torch.device(device)
        index = device.index if device.index is not None else torch.cuda.current_device()
        clusters = min(clusters, max_active_clusters(index, cta_group))
        if clusters < 1:
            raise ValueError(
                f"the GPU reports room for no cluster of {cta_group} CTAs at once (an MPS or "
                "green-context limit?): the clustered kernels cannot run here; use a "
                "configuration without clusters (cta_group=1, cluster_n=cluster_m=1)"
            )
    return cta_group * clusters
