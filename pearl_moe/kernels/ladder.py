"""The course's kernel stages as a ladder of configurations: each stage is the previous one plus one idea.

Stages 1-3 are three kernels (plain GEMM, grouped GEMM, persistent warp-specialized grouped GEMM).
Stages 4-7 add no new kernel: they are options of the stage-3 kernel of each architecture, switched
on by :class:`~pearl_moe.config.GemmConfig` fields, and each option lives in its own small module
(``kernels/<arch>/direct_store.py``, ``wide_b.py``, ...). So the course's ablation is a list of
configurations, :func:`stage_config` ``(arch, 1..7)``, and a stage number also says which options a
configuration may use (:func:`stage_problems`)::

    stage  idea                                  GemmConfig field(s)
    1      plain GEMM, one launch per expert     -
    2      grouped GEMM, one launch              -
    3      persistent, warp-specialized          -
    4      direct register -> global store       epilogue="direct_store" (store_bits)
    5      64-row tiles in 1-CTA mode            tile_m=64 (cta_group=1)
    6      one B ring entry spans two K tiles    b_k_tiles=2
    7      split accumulator slots               acc_slots=2 (Blackwell: 2-CTA 256 x 512 tile;
                                                 Hopper: two consumer warpgroups in ping-pong)

On Hopper, 64-row tiles need no new code (a wgmma is 64 rows per warpgroup, so the stage-3 kernel
already runs one consumer warpgroup at ``tile_m=64``); stage 5 there is a configuration step only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import GemmConfig

__all__ = [
    "KernelStage",
    "KERNEL_STAGES",
    "LAST_STAGE",
    "stage_config",
    "stage_problems",
    "ladder",
]


@dataclass(frozen=True)
class KernelStage:
    number: int
    module: str  # pearl_moe.kernels.<sm90|sm100>.<module>
    title: str
    idea: str


KERNEL_STAGES: dict[int, KernelStage] = {
    s.number: s
    for s in (
        KernelStage(1, "stage1_gemm", "plain GEMM", "one dense GEMM per expert (the naive loop)"),
        KernelStage(2, "stage2_grouped", "grouped GEMM", "CTA (x, y, z) computes tile (x, y) of expert z"),
        KernelStage(3, "stage3_persistent", "persistent, warp-specialized", "one CTA per SM walks the tile list"),
        KernelStage(4, "stage4_direct_store", "direct store", "registers -> global memory; the epilogue buffer becomes a ring entry"),
        KernelStage(5, "stage5_64_row_tiles", "64-row tiles", "1-CTA tile_m = 64: half the A bytes per ring entry"),
        KernelStage(6, "stage6_wide_b", "wide B entries", "one B ring entry spans two K tiles: 256 B per weight row"),
        KernelStage(7, "stage7_split_accumulator", "split accumulator", "the epilogue of one tile overlaps the next tile's MMA"),
    )
}  # fmt: skip
LAST_STAGE = max(KERNEL_STAGES)


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
    if config.tile_m < 64:
        later(5, f"a {config.tile_m}-row tile (smaller than the 64-row MMA)")
    if config.swap_ab:
        later(5, "swapped operands (tokens as the MMA's N)")
    if config.arch == "sm_100a" and config.cta_group == 1 and config.tile_m == 64:
        later(5, "the 1-CTA 64-row tile")
    if config.b_k_tiles > 1:
        later(6, "a B ring entry spanning several K tiles")
    if config.acc_slots == 2:
        later(7, "the split accumulator (two slots)")
    if config.arch == "sm_100a" and config.tile_n > 256:
        later(7, "a tile of two MMA atoms along N (tile_n > 256)")
    if config.schedule != "static":
        later(3, f"the {config.schedule} tile schedule of persistent CTAs")
    return problems
