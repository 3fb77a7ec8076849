"""Shared-memory and tensor-memory budgets of a :class:`~pearl_moe.config.GemmConfig`.

Per CTA, shared memory holds::

    A ring      ring_depth x (tile_m / cta_group) x tile_k x 2 B
    B ring      b_ring_depth x (tile_n / cta_group) x tile_k x b_k_tiles x 2 B
    epilogue    (tile_m / cta_group) x epi_tile_n x 2 B x epi_buffers   (0 for direct stores)
    barriers    one 8-byte mbarrier per full/empty signal of every ring entry, plus 64 B of
                bookkeeping (sm_100a: the 2-CTA TMEM-release mbarrier, the TMEM base address and
                padding; sm_90a: 16 reserved words). The tile scheduler keeps its state in
                registers, not here.

Worked numbers from the blog (tile 128 x 128 x 64, bf16, 1-CTA): an A ring entry is 128 x 64 x 2 = 16 KB
and a B entry 16 KB, so one ring entry is 32 KB. With the 24 KB epilogue buffer six entries fit in
227 KB (6 x 32 + 24 = 216 KB); dropping the buffer makes room for a seventh (7 x 32 = 224 KB).
With 64-row tiles an A entry is 8 KB. A B entry spanning two K tiles is 32 KB and each TMA copy
reads 256 contiguous bytes per weight row instead of 128.

Tensor memory (sm_100a) holds the fp32 accumulators: 128 lanes x 512 columns of 32 bits per SM.
A 128 x 256 accumulator takes 256 columns, so two fit (the epilogue drains one while the MMA fills
the other); a 128 x 512 accumulator takes all 512, leaving one buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .hardware import B200, H200, GpuSpec, get_gpu

if TYPE_CHECKING:  # the model reads a config's fields; it needs no code of config.py
    from .config import GemmConfig

__all__ = [
    "MBARRIER_BYTES",
    "BOOKKEEPING_BYTES",
    "SmemBudget",
    "default_gpu",
    "smem_budget",
    "max_ring_depth",
    "max_acc_buffers",
    "resolve",
    "tmem_columns",
]

MBARRIER_BYTES = 8
#: Bytes after the mbarriers in every kernel: on sm_100a the 2-CTA TMEM-release mbarrier (8 B), the
#: TMEM base address (4 B) and padding (``sm100.common.BOOKKEEPING_WORDS``); on sm_90a 16
#: reserved 32-bit words (``sm90.common._BOOKKEEPING_WORDS``).
BOOKKEEPING_BYTES = 64


def default_gpu(arch: str) -> GpuSpec:
    """The GPU the course pairs with each target: B200 for sm_100a, H200 for sm_90a."""
    return B200 if arch == "sm_100a" else H200


@dataclass(frozen=True)
class SmemBudget:
    """Itemized shared memory of one CTA, in bytes."""

    config: GemmConfig
    gpu: GpuSpec
    items: tuple[tuple[str, int], ...]

    @property
    def total(self) -> int:
        return sum(size for _, size in self.items)

    @property
    def limit(self) -> int:
        return self.gpu.smem_per_block

    @property
    def free(self) -> int:
        return self.limit - self.total

    @property
    def fits(self) -> bool:
        return self.total <= self.limit

    def as_dict(self) -> dict[str, int]:
        return dict(self.items)

    def __str__(self) -> str:
        rows = [f"{name:<12} {size / 1024:8.1f} KB" for name, size in self.items]
        rows.append(f"{'total':<12} {self.total / 1024:8.1f} KB of {self.limit / 1024:.0f} KB")
        return "\n".join(rows)


def _barrier_count(config: GemmConfig, ring_depth: int) -> int:
    b_ring_depth = -(-ring_depth // config.b_k_tiles)
    count = 2 * ring_depth  # A/B ring: full + empty per entry
    if config.b_k_tiles > 1:
        count += 2 * b_ring_depth  # the B ring is released on its own pipeline
    if config.arch == "sm_100a":
        acc = config.acc_buffers or 1
        count += 2 * acc * config.acc_slots  # accumulator full + empty per stage and slot
    return count


def _items(config: GemmConfig, ring_depth: int) -> tuple[tuple[str, int], ...]:
    b_ring_depth = -(-ring_depth // config.b_k_tiles)
    a_ring = ring_depth * config.a_entry_bytes
    if config.arch == "sm_90a" and config.tile_m < 64:
        # the last entry is followed by the rest of a 64-row wgmma operand (read, then dropped)
        a_ring += (64 - config.tile_m) * config.tile_k * config.dtype_bytes
    items = [
        ("A ring", a_ring),
        ("B ring", b_ring_depth * config.b_entry_bytes),
        ("epilogue", config.epilogue_bytes),
        ("barriers", _barrier_count(config, ring_depth) * MBARRIER_BYTES + BOOKKEEPING_BYTES),
    ]
    return tuple(items)


def smem_budget(config: GemmConfig, gpu: GpuSpec | str | None = None) -> SmemBudget:
    """Itemized shared memory of ``config`` (its ``ring_depth`` resolved to the most that fit if None).

    Raises ``ValueError`` when the configuration does not fit the GPU's per-block limit.
    """
    gpu = get_gpu(gpu) if gpu is not None else default_gpu(config.arch)
    depth = config.ring_depth if config.ring_depth is not None else max_ring_depth(config, gpu)
    budget = SmemBudget(config, gpu, _items(config, depth))
    if not budget.fits:
        raise ValueError(
            f"{config.describe()} needs {budget.total} B of shared memory with {depth} ring entries; "
            f"{gpu.name} allows {budget.limit} B per block"
        )
    return budget


def max_ring_depth(config: GemmConfig, gpu: GpuSpec | str | None = None) -> int:
    """The deepest A/B ring that fits the GPU's per-block shared memory (at least 2)."""
    gpu = get_gpu(gpu) if gpu is not None else default_gpu(config.arch)
    best = 0
    depth = 1
    while sum(size for _, size in _items(config, depth + 1)) <= gpu.smem_per_block:
        depth += 1
        best = depth
    if best < 2:
        raise ValueError(
            f"{config.describe()}: not even two ring entries fit in {gpu.name}'s "
            f"{gpu.smem_per_block} B of shared memory per block"
        )
    return best


def max_acc_buffers(config: GemmConfig) -> int:
    """How many fp32 accumulators of ``tile_n`` columns to keep in 512 TMEM columns (sm_100a).

    As many as fit, capped at 2: double buffering already lets the MMA fill one accumulator while
    the epilogue drains the other (1 on sm_90a, whose accumulator lives in registers).
    """
    if config.arch != "sm_100a":
        return 1
    return max(1, min(2, 512 // config.tile_n))


def tmem_columns(config: GemmConfig) -> int:
    """TMEM columns the kernel allocates (0 on sm_90a, which has no tensor memory)."""
    if config.arch != "sm_100a":
        return 0
    acc = config.acc_buffers if config.acc_buffers is not None else max_acc_buffers(config)
    cols = config.tmem_columns_for(acc)
    if cols > 512:
        raise ValueError(f"{config.describe()} needs {cols} TMEM columns; an SM has 512")
    return cols


def resolve(config: GemmConfig, gpu: GpuSpec | str | None = None) -> GemmConfig:
    """Fill ``ring_depth`` (deepest that fits) and ``acc_buffers`` (most that fit TMEM)."""
    gpu = get_gpu(gpu) if gpu is not None else default_gpu(config.arch)
    changes = {}
    if config.arch == "sm_100a" and config.acc_buffers is None:
        changes["acc_buffers"] = max_acc_buffers(config)
    if config.ring_depth is None:
        changes["ring_depth"] = max_ring_depth(config.with_(**changes) if changes else config, gpu)
    resolved = config.with_(**changes) if changes else config
    smem_budget(resolved, gpu)  # raises if it does not fit
    return resolved
