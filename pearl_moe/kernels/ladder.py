"""The course's kernel stages as a ladder of configurations: each stage is the previous one plus one idea.

Stages 1-3 are three kernels (plain GEMM, grouped GEMM, persistent warp-specialized grouped GEMM),
one module each per architecture (``kernels/<sm90|sm100>/stage1_gemm.py``, ``stage2_grouped.py``,
``stage3_persistent.py``). Stages 4-7 add no new kernel: they are options of the stage-3 kernel,
switched on by :class:`~pearl_moe.config.GemmConfig` fields, and each option's device code lives in
a module named for it (``direct_store.py``, ``wide_b.py``, ...). So this table is the whole map
from a stage to its code: :data:`KERNEL_STAGES` gives each stage's kernel module and options,
:func:`stage_config` ``(arch, 1..7)`` its configuration, and :func:`stage_problems` which options a
configuration may use at a stage::

    stage  kernel module        idea                                  GemmConfig field(s)
    1      stage1_gemm          plain GEMM, one launch per expert     -
    2      stage2_grouped       grouped GEMM, one launch              -
    3      stage3_persistent    persistent, warp-specialized          -
    4      stage3_persistent    direct register -> global store       epilogue="direct_store"
    5      stage3_persistent    64-row tiles in 1-CTA mode            tile_m=64 (cta_group=1)
    6      stage3_persistent    one B ring entry spans two K tiles    b_k_tiles=2
    7      stage3_persistent    split accumulator slots               acc_slots=2 (Blackwell: 2-CTA
                                                                      256 x 512 tile; Hopper: two
                                                                      consumer warpgroups taking
                                                                      alternate tiles)

On Hopper, 64-row tiles need no new code (a wgmma is 64 rows per warpgroup, so the stage-3 kernel
already runs one consumer warpgroup at ``tile_m=64``); stage 5 there is a configuration step only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import GemmConfig

__all__ = [
    "KernelStage",
    "KERNEL_STAGES",
    "KERNEL_PACKAGES",
    "LAST_STAGE",
    "kernel_module_name",
    "stage_config",
    "stage_problems",
    "ladder",
]


@dataclass(frozen=True)
class KernelStage:
    number: int
    module: str  # the kernel's module in pearl_moe.kernels.<sm90|sm100> (KERNEL_PACKAGES)
    title: str
    idea: str
    options: str = ""  # the GemmConfig fields the stage switches on ("" for stages 1-3)


KERNEL_STAGES: dict[int, KernelStage] = {
    s.number: s
    for s in (
        KernelStage(1, "stage1_gemm", "plain GEMM", "one dense GEMM per expert (the naive loop)"),
        KernelStage(2, "stage2_grouped", "grouped GEMM", "CTA (x, y, z) computes tile (x, y) of expert z"),
        KernelStage(3, "stage3_persistent", "persistent, warp-specialized", "one CTA per SM walks the tile list"),
        KernelStage(4, "stage3_persistent", "direct store", "registers -> global memory; the epilogue buffer becomes a ring entry", 'epilogue="direct_store"'),
        KernelStage(5, "stage3_persistent", "64-row tiles", "1-CTA tile_m = 64: half the A bytes per ring entry", "tile_m=64"),
        KernelStage(6, "stage3_persistent", "wide B entries", "one B ring entry spans two K tiles: 256 B per weight row", "b_k_tiles=2"),
        KernelStage(7, "stage3_persistent", "split accumulator", "the epilogue of one tile overlaps the next tile's MMA", "acc_slots=2"),
    )
}  # fmt: skip
LAST_STAGE = max(KERNEL_STAGES)

#: The package of each architecture's kernels.
KERNEL_PACKAGES = {"sm_90a": "pearl_moe.kernels.sm90", "sm_100a": "pearl_moe.kernels.sm100"}


def kernel_module_name(arch: str, stage: int) -> str:
    """``pearl_moe.kernels.<sm90|sm100>.<module>``: the module that holds stage ``stage``'s kernel
    (the same module for stages 3-7). Naming it imports nothing."""
    if arch not in KERNEL_PACKAGES:
        raise ValueError(f"arch must be one of {sorted(KERNEL_PACKAGES)}, got {arch!r}")
    if stage not in KERNEL_STAGES:
        raise ValueError(f"stage must be one of {sorted(KERNEL_STAGES)}, got {stage!r}")
    return f"{KERNEL_PACKAGES[arch]}.{KERNEL_STAGES[stage].module}"


def _base(arch: str) -> GemmConfig:
    return GemmConfig(arch=arch, tile_m=128, tile_n=128, tile_k=64)


def stage_config(arch: str, stage: int) -> GemmConfig:
    """The configuration the course runs stage ``stage`` with on ``arch`` (ring depth unresolved).

    Each stage is the previous stage's configuration plus its idea, except stage 7 on Blackwell,
    whose idea only exists for a 512-column accumulator: the post's 2-CTA 256 x 512 prefill tile.
    """
    if stage not in KERNEL_STAGES:
        raise ValueError(f"stage must be one of {sorted(KERNEL_STAGES)}, got {stage!r}")
    if arch not in ("sm_90a", "sm_100a"):
        raise ValueError(f"arch must be sm_90a or sm_100a, got {arch!r}")
    config = _base(arch)
    if stage >= 4:
        config = config.with_(epilogue="direct_store")
    if stage >= 5:
        config = config.with_(tile_m=64)
    if stage >= 6:
        config = config.with_(b_k_tiles=2)
    if stage >= 7:
        if arch == "sm_100a":
            config = config.with_(
                tile_m=256, tile_n=512, cta_group=2, b_k_tiles=1, acc_buffers=1, acc_slots=2
            )
        else:
            config = config.with_(acc_slots=2)
    return config


def ladder(arch: str) -> list[tuple[int, GemmConfig]]:
    """``[(stage, resolved config), ...]`` for stages 3..7: the course's ablation on ``arch``."""
    return [(s, stage_config(arch, s).resolved()) for s in range(3, LAST_STAGE + 1)]


def stage_problems(config: GemmConfig, stage: int) -> list[str]:
    """Options ``config`` uses that arrive after ``stage`` (empty: the stage may run it)."""
    if stage not in KERNEL_STAGES:
        return [f"stage must be one of {sorted(KERNEL_STAGES)}, got {stage!r}"]
    problems = []

    def later(first: int, what: str):
        if stage < first:
            problems.append(f"{what} arrives in stage {first} (asked for stage {stage})")

    if config.epilogue == "direct_store":
        later(4, "the direct register-to-global store")
    if config.shift_a_box:
        later(4, "shifting A boxes inside A (with the direct store)")
    if config.activation is not None:
        later(4, "the fused gated activation (in the direct store)")
    if config.tile_m < 64:
        later(5, f"a {config.tile_m}-row tile (smaller than the 64-row MMA)")
    if config.swap_ab:
        later(5, "swapped operands (tokens as the MMA's N)")
    if config.arch == "sm_100a" and config.cta_group == 1 and config.tile_m == 64:
        later(5, "the 1-CTA 64-row tile")
    if config.arch == "sm_90a" and config.tile_m == 256:
        later(3, "the 256-row tile (two warpgroups of 128 rows, in the persistent kernel)")
    if config.cta_group == 2:
        later(3, "the 2-CTA MMA (cta_group=2)")
    if config.cluster_n > 1 or config.cluster_m > 1:
        later(3, "clusters of CTAs that share A or B by multicast (in the persistent kernel)")
    if config.gather_a:
        later(3, "the gather of A's rows through an index (cp.async, in the persistent kernel)")
    if config.n_group:
        later(3, "grouped tile orders (n_group, in the persistent kernel's scheduler)")
    if config.pdl:
        later(3, "the programmatic dependent launch (pdl, in the persistent kernel)")
    if config.b_k_tiles > 1:
        later(6, "a B ring entry spanning several K tiles")
    if config.acc_slots == 2:
        later(7, "the split accumulator (two slots)")
    if config.arch == "sm_100a" and config.tile_n > 256:
        later(7, "a tile of two MMA atoms along N (tile_n > 256)")
    return problems
