"""How a grouped GEMM's output tiles land on the SMs: CTAs, waves, and an SM x time map.

Why this module exists: a decode-sized MoE layer gives each expert only a handful of rows, so one
expert's GEMM has too few output tiles to fill the GPU. Counting tiles and waves makes that visible
before any kernel runs, and shows what one grouped launch (CTA ``(x, y, z)`` computes tile ``(x, y)``
of expert ``z``) buys over a loop of per-expert launches.

The model is deliberately simple, a *wave model*:

* an expert with ``m_e`` rows has ``ceil(m_e / tile_m) * ceil(n / tile_n)`` output tiles;
* with ``cta_group=2`` a tile is computed by a pair of CTAs on two SMs, so it costs two SMs;
* every tile takes the same time (one time slot): ``k`` and ``n`` are shared by all experts and a
  tile of ``tile_m`` rows does the same MMA work however many of its rows are real;
* the GPU runs ``sms // cta_group`` tiles at once; tiles are handed out in launch order
  (expert 0's tiles first), one full wave per time slot;
* the naive loop launches once per expert with rows (an empty expert is skipped) and each launch
  runs alone: its last wave leaves SMs idle until the next launch begins. Launch overhead itself is
  not modelled; it only makes the loop slower still.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..config import GemmConfig
from ..hardware import B200, GpuSpec, get_gpu
from ..workloads import GroupedProblem

__all__ = ["IDLE", "Occupancy", "occupancy", "tiles_per_expert", "ceil_div", "skewed_counts"]

#: Value of an idle SM in an occupancy map.
IDLE = -1

MODES = ("grouped", "naive")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tiles_per_expert(counts: Sequence[int], n: int, tile_m: int, tile_n: int) -> list[int]:
    """Output tiles of each expert: ``ceil(m_e / tile_m) * ceil(n / tile_n)`` (0 for no rows)."""
    return [ceil_div(int(m), tile_m) * ceil_div(n, tile_n) for m in counts]


@dataclass(frozen=True)
class Occupancy:
    """Tiles, CTAs and waves of one grouped problem on one GPU, naive loop versus grouped launch.

    Build it with :func:`occupancy`, which validates the inputs.
    """

    counts: tuple[int, ...]
    n: int
    tile_m: int
    tile_n: int
    cta_group: int
    gpu: GpuSpec

    # ------------------------------------------------------------------ tiles and CTAs
    @cached_property
    def tiles_per_expert(self) -> tuple[int, ...]:
        return tuple(tiles_per_expert(self.counts, self.n, self.tile_m, self.tile_n))

    @property
    def ctas_per_expert(self) -> tuple[int, ...]:
        """CTAs (one per SM) each expert needs; a 2-CTA tile counts twice."""
        return tuple(t * self.cta_group for t in self.tiles_per_expert)

    @property
    def total_tiles(self) -> int:
        return sum(self.tiles_per_expert)

    @property
    def total_ctas(self) -> int:
        return self.total_tiles * self.cta_group

    @property
    def concurrent_tiles(self) -> int:
        """Tiles the GPU runs at once: one per SM, or one per SM pair in 2-CTA mode."""
        return self.gpu.sms // self.cta_group

    @property
    def row_fill(self) -> float:
        """Fraction of the computed tile rows that hold real rows (the rest is padding)."""
        computed = sum(ceil_div(m, self.tile_m) * self.tile_m for m in self.counts)
        return sum(self.counts) / computed if computed else 0.0

    # ------------------------------------------------------------------ launches and waves
    @property
    def naive_launches(self) -> int:
        """Kernel launches of a per-expert loop (experts without rows are skipped)."""
        return sum(1 for t in self.tiles_per_expert if t > 0)

    @property
    def grouped_launches(self) -> int:
        return 1 if self.total_tiles else 0

    def _wave_sizes(self, mode: str) -> list[int]:
        """Tiles in each wave (time slot), in order."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        launches = [self.total_tiles] if mode == "grouped" else list(self.tiles_per_expert)
        sizes = []
        for tiles in launches:
            full, rest = divmod(tiles, self.concurrent_tiles)
            sizes += [self.concurrent_tiles] * full + ([rest] if rest else [])
        return sizes

    def waves(self, mode: str = "grouped") -> int:
        """Time slots the launch(es) take: ``ceil(tiles / concurrent_tiles)`` per launch."""
        return len(self._wave_sizes(mode))

    def wave_fractions(self, mode: str = "grouped") -> list[float]:
        """Fraction of the GPU's SMs busy in each wave."""
        return [size * self.cta_group / self.gpu.sms for size in self._wave_sizes(mode)]

    def utilization(self, mode: str = "grouped") -> float:
        """Busy SM-slots over all SM-slots of the run (1.0 = every SM busy the whole time)."""
        slots = self.waves(mode)
        return self.total_ctas / (slots * self.gpu.sms) if slots else 0.0

    @property
    def wave_speedup(self) -> float:
        """How many times fewer time slots the grouped launch needs than the naive loop."""
        grouped = self.waves("grouped")
        return self.waves("naive") / grouped if grouped else 1.0

    # ------------------------------------------------------------------ map
    def occupancy_map(self, mode: str = "grouped") -> np.ndarray:
        """SM x time map: ``map[sm, slot]`` is the expert an SM works on, or ``IDLE`` (-1).

        Tiles are placed in launch order, expert 0 first; a 2-CTA tile fills two adjacent SMs.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        owners = np.repeat(np.arange(len(self.counts)), self.tiles_per_expert)
        launches = (
            [owners]
            if mode == "grouped"
            else [owners[owners == e] for e in range(len(self.counts)) if self.tiles_per_expert[e]]
        )
        out = np.full((self.gpu.sms, self.waves(mode)), IDLE, dtype=np.int32)
        slot = 0
        per_wave = self.concurrent_tiles
        for tiles in launches:
            for start in range(0, len(tiles), per_wave):
                wave = tiles[start : start + per_wave]
                out[: len(wave) * self.cta_group, slot] = np.repeat(wave, self.cta_group)
                slot += 1
        return out

    # ------------------------------------------------------------------ text
    def summary(self) -> str:
        """A few lines of the numbers above, for notebooks and widgets."""
        tiles = self.tiles_per_expert
        first = next((c for c in self.ctas_per_expert if c), 0)
        lines = [
            f"{len(self.counts)} experts, {sum(self.counts)} rows, n={self.n}, "
            f"tile {self.tile_m}x{self.tile_n} ({self.cta_group}-CTA) on {self.gpu.name} "
            f"({self.gpu.sms} SMs)",
            f"tiles per expert: {min(tiles)}..{max(tiles)}; one expert's launch uses "
            f"{first} CTAs = {first / self.gpu.sms:.0%} of the SMs",
            f"naive loop: {self.naive_launches} launches, {self.waves('naive')} waves, "
            f"{self.utilization('naive'):.0%} of SM-time busy",
            f"grouped:    {self.grouped_launches} launch of {self.total_ctas} CTAs, "
            f"{self.waves('grouped')} waves, {self.utilization('grouped'):.0%} of SM-time busy",
            f"rows of computed tiles that are real (not padding): {self.row_fill:.0%}",
        ]
        return "\n".join(lines)


def skewed_counts(
    tokens: int, experts: int, top_k: int, skew: float, seed: int = 0
) -> tuple[int, ...]:
    """Rows per expert when each of ``tokens`` tokens picks ``top_k`` distinct experts, expert
    popularity falling as ``rank ** -skew`` (0: every expert equally likely; the course's
    ``routing="skewed"`` uses 1.2). Random but reproducible (``seed``)."""
    if skew < 0:
        raise ValueError(f"skew must be >= 0, got {skew}")
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be between 1 and the {experts} experts, got {top_k}")
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(experts) + 1
    logits = -skew * np.log(ranks)
    gumbel = rng.gumbel(size=(tokens, experts))
    chosen = np.argsort(-(logits + gumbel), axis=1)[:, :top_k]
    return tuple(int(c) for c in np.bincount(chosen.ravel(), minlength=experts))


def _positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def occupancy(
    problem: GroupedProblem | Sequence[int],
    tile: tuple[int, int] | GemmConfig = (128, 128),
    cta_group: int | None = None,
    gpu: GpuSpec | str = B200,
    n: int | None = None,
) -> Occupancy:
    """Occupancy of ``problem`` (a :class:`GroupedProblem`, or per-expert row counts plus ``n``).

    ``tile`` is ``(tile_m, tile_n)`` or a :class:`GemmConfig` (whose ``cta_group`` is then used).
    For 2-CTA tiles ``tile_m`` is the pair's tile, e.g. 256 for two CTAs of 128 rows.
    """
    if isinstance(problem, GroupedProblem):
        if n is not None and n != problem.n:
            raise ValueError(f"n={n} contradicts the problem's n={problem.n}")
        counts, n = problem.counts, problem.n
    else:
        if isinstance(problem, (str, bytes)) or not isinstance(problem, Sequence | np.ndarray):
            raise ValueError("problem must be a GroupedProblem or a sequence of row counts")
        if n is None:
            raise ValueError("n is required when the problem is given as row counts")
        counts = tuple(problem)
        for e, c in enumerate(counts):
            if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 0:
                raise ValueError(
                    f"row count of expert {e} must be a non-negative integer, got {c!r}"
                )
        counts = tuple(int(c) for c in counts)
    if not counts:
        raise ValueError("a grouped problem needs at least one expert")
    n = _positive_int(n, "n")

    if isinstance(tile, GemmConfig):
        if cta_group is not None and cta_group != tile.cta_group:
            raise ValueError(f"cta_group={cta_group} contradicts the config's {tile.cta_group}")
        tile_m, tile_n, cta_group = tile.tile_m, tile.tile_n, tile.cta_group
    else:
        try:
            tile_m, tile_n = tile
        except (TypeError, ValueError):
            raise ValueError(
                f"tile must be (tile_m, tile_n) or a GemmConfig, got {tile!r}"
            ) from None
        cta_group = 1 if cta_group is None else cta_group
    tile_m = _positive_int(tile_m, "tile_m")
    tile_n = _positive_int(tile_n, "tile_n")
    if cta_group not in (1, 2):
        raise ValueError(f"cta_group must be 1 or 2, got {cta_group!r}")
    if tile_m % cta_group:
        raise ValueError(f"a {cta_group}-CTA tile splits its rows: tile_m={tile_m} must be even")
    gpu = get_gpu(gpu)
    if gpu.sms < cta_group:
        raise ValueError(f"{gpu.name} has {gpu.sms} SMs, fewer than a {cta_group}-CTA tile needs")
    return Occupancy(tuple(counts), n, tile_m, tile_n, cta_group, gpu)
