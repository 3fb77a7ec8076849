"""A small performance model: the latency a configuration *should* reach, labeled as modeled.

We have no B200, so any Blackwell latency in the course comes from here, never from a measurement.
The model is a roofline with two corrections that the course's lessons are about:

1. **Bytes in flight (Little's law).** A CTA keeps at most ``stages`` ring entries of A and B in
   flight. With memory latency ``L``, the SMs that have work can pull at most
   ``busy_sms * stages * stage_bytes / L`` bytes per second; HBM gives at most ``bandwidth``. The
   smaller of the two is the bandwidth a configuration can reach. Deeper rings (more stages, smaller
   A stages, no epilogue buffer) raise the first term until HBM is the limit.
2. **Waves.** Output tiles are handed to SMs in waves (``pearl_moe.occupancy``); a partial last wave
   leaves SMs idle, so both the math rate and the bytes in flight shrink with the busy fraction.

Each wave costs ``max(its bytes / reachable bandwidth, its FLOPs / busy SMs' math rate)`` plus one
memory latency to fill the pipeline; a launch adds a fixed overhead. The constants are assumptions,
stated in :class:`ModelParams`, and the notebooks compare the model with H200 measurements so a
reader can see how far to trust it. Nothing here is a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from .budget import default_gpu, resolve
from .config import GemmConfig
from .hardware import GpuSpec, get_gpu
from .occupancy import tiles_per_expert
from .workloads import GroupedProblem

__all__ = ["ModelParams", "Prediction", "predict"]


@dataclass(frozen=True)
class ModelParams:
    """Assumed constants of the model (not measurements)."""

    memory_latency_s: float = 1.0e-6  # loaded HBM latency seen by a TMA load
    bandwidth_efficiency: float = 0.88  # share of datasheet HBM bandwidth a stream reaches
    math_efficiency: float = 0.80  # share of datasheet bf16 peak a well-fed tensor core reaches
    launch_overhead_s: float = 3.0e-6  # one kernel launch replayed from a CUDA graph


@dataclass(frozen=True)
class Prediction:
    """Modeled time of one grouped GEMM and how it splits."""

    seconds: float
    floor_seconds: float
    waves: int
    launches: int
    reachable_bandwidth: float  # bytes/s in the first (fullest) wave
    bound: str  # "memory", "latency" (too few bytes in flight) or "math"
    label: str = "modeled"

    @property
    def fraction_of_floor(self) -> float:
        return self.floor_seconds / self.seconds


def _wave_time(tiles_in_wave, cfg, gpu, params, bytes_per_tile, flops_per_tile):
    busy_sms = tiles_in_wave * cfg.cta_group
    stage_bytes = cfg.a_entry_bytes + cfg.b_entry_bytes / cfg.b_k_tiles
    in_flight = busy_sms * cfg.ring_depth * stage_bytes
    latency_bw = in_flight / params.memory_latency_s
    hbm_bw = gpu.hbm_bytes_per_s * params.bandwidth_efficiency
    reachable = min(latency_bw, hbm_bw)
    mem = tiles_in_wave * bytes_per_tile / reachable
    per_sm_flops = gpu.bf16_dense_flops * params.math_efficiency / gpu.sms
    math = tiles_in_wave * flops_per_tile / (busy_sms * per_sm_flops)
    bound = "math" if math > mem else ("latency" if latency_bw < hbm_bw else "memory")
    return max(mem, math) + params.memory_latency_s, reachable, bound


def predict(
    problem: GroupedProblem,
    config: GemmConfig,
    gpu: GpuSpec | str | None = None,
    *,
    per_expert_launches: bool = False,
    params: ModelParams | None = None,
) -> Prediction:
    """Modeled latency of ``problem`` under ``config`` on ``gpu`` (default: the arch's GPU).

    ``per_expert_launches=True`` models the naive loop: one launch per expert with rows, each
    running alone. Otherwise one grouped launch covers every tile.
    """
    gpu = get_gpu(gpu) if gpu is not None else default_gpu(config.arch)
    params = params or ModelParams()
    cfg = resolve(config, gpu)
    tiles = tiles_per_expert(problem.counts, problem.n, cfg.tile_m, cfg.tile_n)
    total_tiles = sum(tiles)
    if total_tiles == 0:
        return Prediction(params.launch_overhead_s, 0.0, 0, 1, 0.0, "latency")
    # Spread the bytes that must move and the FLOPs evenly over the (equal-sized) tiles.
    bytes_per_tile = problem.bytes_moved() / total_tiles
    flops_per_tile = 2 * cfg.tile_m * cfg.tile_n * problem.k
    slots = gpu.sms // cfg.cta_group
    groups = [t for t in tiles if t] if per_expert_launches else [total_tiles]
    seconds, waves, first_bw, first_bound = 0.0, 0, None, None
    for group in groups:
        seconds += params.launch_overhead_s
        remaining = group
        while remaining:
            in_wave = min(slots, remaining)
            t, bw, bound = _wave_time(in_wave, cfg, gpu, params, bytes_per_tile, flops_per_tile)
            seconds += t
            waves += 1
            remaining -= in_wave
            if first_bw is None:
                first_bw, first_bound = bw, bound
    floor = problem.floor_seconds(gpu.hbm_bytes_per_s, gpu.bf16_dense_flops)
    return Prediction(seconds, floor, waves, len(groups), first_bw, first_bound)
