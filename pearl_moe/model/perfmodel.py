"""A latency model of the course's grouped-GEMM kernels: what a configuration *should* take, modeled.

We have no B200, so every Blackwell latency in the course comes from here, never from a
measurement. The model is built from mechanisms a kernel engineer can check one by one, calibrated
on the H200 measurements committed in ``results/H200/`` (``python -m pearl_moe calibrate`` prints
measured against modeled for every one of them), and then run with B200 parameters.

What one kernel launch costs
----------------------------
Output tiles are handed to SMs in **rounds** (a wave: as many tiles as there are SMs, or SM pairs
for 2-CTA tiles); the last round of a launch is usually partial (wave quantization, the tail). Each
round takes the *larger* of two times, joined smoothly:

* **Latency (Little's law per SM).** A CTA keeps ``ring_depth`` A/B entries in flight. An entry
  goes round trip: TMA load (the memory latency ``L``) and then the MMA that reads it, after which
  it is refilled. So one SM streams at most ``ring_depth / (L + t_mma)`` K tiles per second, and a
  tile of ``K`` K tiles takes ``K (L + t_mma) / ring_depth`` plus the per-tile work that is not
  hidden (prologue, epilogue). With B entries spanning ``b_k_tiles`` K tiles, the B ring gives its
  own bound (an entry is held for all its K tiles).
* **Throughput (shared resources).** HBM and the L2 in series (a byte from HBM passes both, so
  when both are nearly full their queues add: ``(T_hbm^p + T_l2^p)^(1/p)``), then the largest of
  that, the MMA at the per-SM peak (max clock) and at the whole-GPU dense ceiling (power), and the
  serialization of one out-of-bounds A box read by many CTAs at once.

``T = (T_lat^p + T_bw^p)^(1/p)``: far from saturation the latency term wins; near it the time
approaches the bandwidth term smoothly. The same law read the other way is a **loaded latency**:
the round trip an entry sees grows from ``L`` as the shared resources fill,
``L_loaded + t_mma = (L + t_mma) (1 - (X / X_max)^p)^(-1/p)`` (``X``: the throughput reached).

Bytes, counted where they come from
-----------------------------------
* **HBM**: each active expert's weights once (the first m tile of an n tile reads its slab; other
  m tiles of the same n tile run at the same time in the tile order of every kernel here, so they
  hit L2), the real rows of A once, and the output once.
* **L2 work**: every TMA box the SMs read (A boxes of ``tile_m`` rows, real or padding, and B
  boxes). The L2 pays per **row segment** of a box as well as per byte: each contiguous run of a
  row inside one ring entry costs ``row_request_bytes`` of work on top of its bytes (the fit puts
  it at several times the 128 bytes of a row: the L2 is limited by requests more than by bytes).
  A ring entry of A holds 128 bytes of each row (``tile_k = 64``); a B entry spanning two K tiles
  holds 256 contiguous bytes of each weight row, one segment for two K tiles (stage 6's "wide B").
  The term is a fitted cost, not a count of L2 requests: under Nsight Compute both stages issue
  one L2 request per 128 bytes (``results/H200/profiles/ncu_pairs.json``, notebook 06), and much
  of wide B's measured gain at 4096 tokens is fewer HBM re-reads, which the model does not count
  (see below). A box's padding rows are the
  *next experts'* rows (L2 hits) or, past the end of A, zero-filled rows that cost the L2
  ``oob_l2_weight`` times an in-bounds row (TMA boxes crossing the tensor's end are slow). So at
  16 rows per expert a 16 KB A entry of a 128-row tile holds 2 KB of real rows and 14 KB served
  from L2: HBM sees only the weights in flight.
* 128-bit direct stores write each 32-byte sector in two halves: twice the L2 work of the output.
* **Neighbouring CTAs share requests.** Neighbouring CTAs of a launch run side by side, and when
  they read the same weight box at about the same time the L2 counts about one request for them.
  In the static schedule (CTA ``c`` takes tiles ``c, c + C, ...``) neighbouring CTAs get the
  same n tile's next m tiles, which read one B box (1-CTA tiles; a 2-CTA pair already splits its
  B). The model finds the B boxes shared within groups of four CTAs (:func:`_neighbour_merges`),
  which is what Nsight Compute's request counts fit (``experiments/README.md``, the schedule
  study). Neighbours stay in step only for a while: CTAs drift apart over a launch, so the L2
  term charges a shared box of round ``r`` (rounds of as many tiles as CTAs)
  ``1 - neighbour_merge * exp(-r / drift_rounds)`` of its work. The fit puts ``neighbour_merge``
  at 0.86 and ``drift_rounds`` at about 111: stage 5 at GLM 5.3 / 1024 tokens (32 rounds) keeps
  87% of its merging on average, at Kimi K3 / 4096 tokens (408 rounds) 27%. A boxes are not
  shared (at 1 and 64 tokens, where neighbouring tiles read one A box, the requests do not drop).

Kernel structure (stages)
-------------------------
* stage 1: one launch per expert with rows (a launch gap each); one CTA per tile; every CTA fills
  its ring (one latency) and stores its tile before the next CTA can use the SM.
* stage 2: one launch of ``(m slots, n tiles, experts)`` CTAs, dispatched in grid order (m slot
  fastest). Empty CTAs (m slots past their expert's rows) start, read the offsets and exit:
  ``cta_overhead_s`` of SM time each. Those interleaved with real tiles share every round; those
  after the last real CTA (whole experts without rows at the end, as at 1 token per GPU) first
  fill the SMs that the last, partial round leaves idle.
* stages 3-7: persistent (one CTA per SM, or SM pair): one prologue, the ring stays full across
  tiles. The epilogue of a tile stalls the MMA unless it overlaps the next tile: Blackwell's
  double-buffered TMEM accumulator (or the split accumulator, half of it), Hopper's split
  accumulator (two consumer warpgroups taking turns).
  On sm_90a each consumer warpgroup stores its own (at most 64) rows; ``epilogue_s`` is fitted on
  the H200 and is large (about 1.75 us per 64 x 128 tile, 3.5 us per 128 x 128 outputs), so it
  holds whatever a lone consumer warpgroup loses between two tiles, not only the store; Blackwell's
  epilogue warps keep an assumed ``epilogue_sm100_s``.
* **The tile scheduler's walk** (stages 3-7, :meth:`pearl_moe.kernels.scheduler.TileScheduler.seek`):
  each persistent CTA walks the experts' offsets to find its tiles, one dependent load per step,
  and its consumer computes the next tile before multiplying the current one, so over a launch it
  pays ``walk_steps(E)`` loads it cannot hide: E with the serial walk (one expert per step; the
  H200 runs before 2026-11-30 11:46 UTC), ``ceil(E / 32)`` with the warp-parallel walk (32
  experts per step, the default since). :func:`predict` takes ``scheduler=`` ("serial" or
  "warp-parallel", the default); the calibration passes each record's: its configuration's
  ``walk`` where recorded, else its run's (:func:`pearl_moe.results.run_scheduler`). The
  model counts the walk's loads only, not the L2 reuse a walk's timing wins or loses between CTAs
  (``results/H200/walk.json.gz`` has the serial walk faster at prefill with 64 x 128 tiles).

What the model leaves out
-------------------------
* **The power cap.** The model has one clock per GPU and no power term, so the measured dense
  ceiling it is given stands for a clock a kernel under back-to-back replays may not reach (the
  H200 runs the prefill shapes at its power cap, with the SM clock below its maximum).
* **Shared-memory bandwidth** is not a term (a shared-memory term was tried and the fit turned it
  off: the prefill kernels' 128-row tiles are bound by the tensor pipe).
* **HBM re-reads.** Every HBM byte is counted once. Static CTAs that share an expert's rows or a
  weight slab drift apart over a long launch, L2 loses the data between them, and some tile shapes
  at 4096 tokens read several times the counted bytes; how far CTAs drift depends on timing the
  model does not see, so no count of tiles predicts it. The merging of neighbours' requests fades
  at one rate for every kernel (``drift_rounds``), though kernels drift at different rates.
* **The split accumulator's loss.** Stage 7 on sm_90a takes somewhat longer than stage 6 at 1024
  tokens with the same HBM bytes and L2 requests; the model has no term for it.

The measurements behind each point (Nsight Compute counts, clocks under the cap, the schedule
variants that told drift from the tiles) are studies: ``experiments/README.md``.

Parameters
----------
:data:`CALIBRATED` holds the values fitted on the H200 (``python -m pearl_moe calibrate --fit``
refits them from whatever runs are committed). Hardware rates come from :mod:`pearl_moe.hardware`;
for the H200 the calibration passes each run's own measured ceilings. For the B200, where nothing
can be measured, the model assumes the H200's measured fractions of its datasheet rates (HBM,
dense MMA) and its ratio of L2 throughput to HBM bandwidth. Every number from here is "modeled".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from ..config import GemmConfig, default_gpu, resolve
from ..hardware import GpuSpec, get_gpu
from ..workloads import GroupedProblem

__all__ = [
    "ModelParams",
    "CALIBRATED",
    "CALIBRATED_ON",
    "Prediction",
    "BytesInFlight",
    "predict",
    "bytes_in_flight",
    "kernel_stage",
    "hbm_ceiling",
    "mma_ceiling",
    "l2_throughput",
    "STAGE_KINDS",
    "stage_projection",
]

#: How each course stage launches its work (stages 4-7 are options of the stage-3 kernel).
STAGE_KINDS = {1: "per-expert loop", 2: "grouped grid", 3: "persistent"}

#: A TMEM/register accumulator tile of 128 x 128 bf16 outputs: the unit of ``epilogue_s``.
_EPI_UNIT_BYTES = 128 * 128 * 2


@dataclass(frozen=True)
class ModelParams:
    """The model's constants. Calibrated ones are fitted on the H200 (see :data:`CALIBRATED`);
    the others are assumptions, each stated with its reason."""

    # -- calibrated on the H200 (python -m pearl_moe calibrate --fit; see CALIBRATED)
    memory_latency_s: float = 1.647e-6  # unloaded round trip of a TMA ring entry (load + signal)
    knee: float = 4.515  # sharpness p of the latency / throughput transition
    l2_per_hbm: float = 13.95  # L2 work per second / datasheet HBM bandwidth (work: bytes + rows)
    row_request_bytes: float = 895.2  # L2 work of one row segment of a TMA box, beyond its bytes
    oob_l2_weight: float = 2.050  # L2 cost of a zero-filled A-box row (past A's end) vs a real one
    shared_box_s: float = 0.01001e-6  # per K tile, per CTA sharing one partly out-of-bounds A box
    cta_overhead_s: float = 0.3957e-6  # start, barrier init and exit of one CTA (empty CTAs: all)
    launch_overhead_s: float = 0.005605e-6  # one kernel launch replayed from a CUDA graph
    epilogue_s: float = 3.508e-6  # sm_90a: a consumer warpgroup's exposed epilogue per 128 x 128
    walk_step_s: float = 0.3596e-6  # one dependent step of the tile scheduler's walk
    neighbour_merge: float = 0.8626  # L2 work saved on a box neighbours read in step (round 0)
    drift_rounds: float = 111.3  # rounds over which that saving decays (neighbours drift apart)
    # -- assumed (not identifiable from the committed runs)
    fill_l2_weight: float = 0.0  # L2 cost of a byte to or from HBM vs a hit (HBM and L2 in series)
    epilogue_sm100_s: float = 0.5e-6  # sm_100a epilogue warps: TMEM -> registers -> 128 x 128 out
    hbm_efficiency: float = 0.88  # measured H200 read ceiling / datasheet (4.24 / 4.8 TB/s)
    mma_efficiency: float = 0.81  # measured H200 dense bf16 ceiling / datasheet (801 / 989)
    narrow_store_l2_factor: float = 2.0  # L2 work of output written with 128-bit direct stores

    # Names used before the model was rebuilt (notebooks and older code read them).
    @property
    def bandwidth_efficiency(self) -> float:
        return self.hbm_efficiency

    @property
    def math_efficiency(self) -> float:
        return self.mma_efficiency

    def with_(self, **changes) -> ModelParams:
        return replace(self, **changes)


#: Fitted by ``python -m pearl_moe calibrate --fit --hold launch_overhead_s,walk_step_s
#: --restarts 2 --fit-on ablation,probe,stage_sweep,stages,walk`` on the 314 H200 records of those
#: kinds, with ``launch_overhead_s`` and ``walk_step_s`` held at an earlier fit's values (refitted,
#: they fall to zero without a better largest error). Two starts reached the same merge
#: (0.86-0.88) and drift (109-111 rounds). Objective (8-norm of the log errors, see
#: ``calibrate.py``) 0.1477: largest error 26.6%, median 5.4%, within ``calibrate.GATE``. Of those
#: records 30 timed the hybrid walk, a study variant since retired; ``calibrate`` leaves them out
#: (284 records: largest error 26.6%, median 5.3%). The
#: assumed fields keep their defaults. The one-call run of the whole ladder (``ladder.json.gz``,
#: ``ladder_depth.json.gz``) is not in the fit; ``calibrate`` prints it apart.
CALIBRATED = ModelParams()

#: The result kinds ``CALIBRATED`` was fitted on; ``calibrate`` reports the records of any other
#: kind as measured after the fit (refit with ``--fit`` and update both when runs land).
CALIBRATED_ON = ("stages", "stage_sweep", "ablation", "walk", "probe")

# Which parameters the calibration may move, and a sentence on each (printed by calibrate).
FITTED = {
    "memory_latency_s": "unloaded round trip of a ring entry (TMA load + barrier hand-over)",
    "knee": "how sharply latency gives way to throughput (p of the smooth maximum)",
    "l2_per_hbm": "L2 work per second (bytes and row segments of the boxes SMs read) / datasheet HBM",
    "row_request_bytes": "L2 cost of one row segment of a TMA box beyond its bytes (wide B: 1 per 2 K tiles)",
    "oob_l2_weight": "L2 cost of an A-box row past the end of A (zero-filled) / a real row",
    "shared_box_s": "serialization of one partly out-of-bounds A box, per K tile per sharing CTA",
    "cta_overhead_s": "one CTA's start, barrier init and exit (what an empty CTA of stage 2 costs)",
    "launch_overhead_s": "gap between two kernel launches replayed from a CUDA graph",
    "epilogue_s": "sm_90a: what a consumer warpgroup spends per 128 x 128 outputs between tiles",
    "walk_step_s": "one dependent step of the tile scheduler's walk over the experts (offsets load)",
    "neighbour_merge": "share of a B box's L2 work saved when neighbouring CTAs read it together",
    "drift_rounds": "rounds of a launch over which neighbouring CTAs fall out of step (1/e)",
}
ASSUMED = {
    "epilogue_sm100_s": "B200 only: TMEM drain + store of 128 x 128 outputs, 32 KB at ~64 B/clk",
    "fill_l2_weight": "HBM and L2 are combined in series instead (the fit drove a fill cost to 0)",
    "hbm_efficiency": "B200 only: H200 measured read ceiling / datasheet, assumed to carry over",
    "mma_efficiency": "B200 only: H200 measured dense bf16 / datasheet, assumed to carry over",
    "narrow_store_l2_factor": "blog: 16-byte stores 'generated too much L2 traffic' (two per sector)",
}


# ---------------------------------------------------------------------------- hardware rates
def hbm_ceiling(gpu: GpuSpec, params: ModelParams) -> float:
    """Reachable HBM bandwidth (B/s): datasheet x the H200's measured fraction."""
    return gpu.hbm_bytes_per_s * params.hbm_efficiency


def mma_ceiling(gpu: GpuSpec, params: ModelParams) -> float:
    """Whole-GPU dense bf16 rate (FLOP/s) under full load: datasheet x the H200's fraction."""
    return gpu.bf16_dense_flops * params.mma_efficiency


def l2_throughput(gpu: GpuSpec, params: ModelParams) -> float:
    """L2 work per second (B/s): the calibrated ratio to the datasheet HBM bandwidth."""
    return gpu.hbm_bytes_per_s * params.l2_per_hbm


def kernel_stage(stage: int | None, per_expert_launches: bool = False) -> int:
    """The course stage a prediction models: 1 loop, 2 grouped grid, 3+ persistent (default 3)."""
    if stage is None:
        return 1 if per_expert_launches else 3
    if stage not in range(1, 8):
        raise ValueError(f"stage must be 1..7, got {stage!r}")
    return stage


# ---------------------------------------------------------------------------- result
@dataclass(frozen=True)
class Prediction:
    """Modeled time of one grouped GEMM and how it splits. Nothing here is a measurement."""

    seconds: float
    floor_seconds: float
    waves: int
    launches: int
    reachable_bandwidth: float  # HBM bytes/s reached in the fullest round
    bound: str  # what limits most of the time: latency, memory, l2, math, oob or launch
    label: str = "modeled"
    stage: int = 3
    loaded_latency_s: float = 0.0  # round trip an entry sees in the fullest round, minus its MMA
    hbm_bytes: float = 0.0
    l2_bytes: float = 0.0
    time_by_bound: dict = field(default_factory=dict, compare=False)

    @property
    def fraction_of_floor(self) -> float:
        return self.floor_seconds / self.seconds if self.seconds else 0.0


# ---------------------------------------------------------------------------- work structure
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class _Round:
    tiles: int  # tiles running at once (a tile is one SM, or two for 2-CTA)
    oob: float  # mean fraction of A-box rows past the end of A (zero-filled)
    hbm_bytes: float
    out_bytes: float  # output bytes written (part of hbm_bytes)
    b_merged: float = 0.0  # tiles whose B box the L2 serves with a neighbour's, times the share of
    # the launch's step left in this round (exp(-round / drift_rounds))


def _expert_tiles(m: int, start: int, rows: int, cfg: GemmConfig, k: int, n: int, stage: int):
    """Per tile of one expert, in kernel order (m tile fastest): OOB fraction, HBM and out bytes."""
    tm, nt = cfg.tile_m, _cdiv(n, cfg.tile_n)
    mt = _cdiv(m, tm)
    first = start + tm * np.arange(mt)
    valid = np.minimum(tm, start + m - first)
    if cfg.shift_a_box:
        oob = np.zeros(mt)  # the box is moved up so that it ends inside A
    elif stage == 1:
        oob = (tm - valid) / tm  # A is the expert's own slice: every padding row is past its end
    else:
        oob = np.maximum(0, first + tm - rows) / tm
    slab = _cdiv(k, cfg.tile_k) * cfg.tile_n * cfg.tile_k * cfg.dtype_bytes
    out = valid * cfg.tile_n * cfg.dtype_bytes
    hbm = slab / mt + valid * k * cfg.dtype_bytes / nt + out
    m_idx, n_idx = np.tile(np.arange(mt), nt), np.repeat(np.arange(nt), mt)
    return np.tile(oob, nt), np.tile(hbm, nt), np.tile(out.astype(float), nt), m_idx, n_idx


#: Neighbouring CTAs that share the L2 requests of a B box they read at once (see
#: :func:`_neighbour_merges`).
B_MERGE_GROUP = 4


def _neighbour_merges(expert, m_idx, n_idx, linear):
    """Per tile (in launch order): does the L2 serve its B box with a neighbour's?

    Neighbouring CTAs of a launch run side by side, and when they read the same weight box at about
    the same time the L2 counts one request for them. Nsight Compute's request counts
    fit B boxes shared within groups of four CTAs (stage 5 at 1024 tokens: 38 M requests at GLM
    5.3, four m tiles per n tile, where pairs alone would give 50 M). A boxes are not shared.
    A tile's B box is marked merged (1.0) when an earlier tile of its group reads the same
    expert's n tile."""
    b = np.ones(len(linear))
    keys = np.stack((linear // B_MERGE_GROUP, expert, n_idx), axis=1)
    _, first = np.unique(keys, axis=0, return_index=True)
    b[first] = 0.0
    return b


def _rounds(oob, hbm, out, b_merged, slots: int, drift: float = 0.0) -> Counter:
    """Tiles in launch order, cut into rounds of ``slots``; identical rounds are counted once. A
    round's merged B boxes fade with its index (``drift``: rounds per 1/e, 0: never)."""
    rounds: Counter = Counter()
    for s in range(0, len(oob), slots):
        sl = slice(s, s + slots)
        keep = np.exp(-(s // slots) / drift) if drift > 0 else 1.0
        key = _Round(
            int(len(oob[sl])),
            round(float(oob[sl].mean()), 5),
            round(float(hbm[sl].sum()), -2),
            round(float(out[sl].sum()), -2),
            round(float(b_merged[sl].mean() * keep), 3),
        )
        rounds[key] += 1
    return rounds


@lru_cache(maxsize=2048)
def _structure(
    counts: tuple, k: int, n: int, cfg: GemmConfig, stage: int, slots: int, drift: float = 0.0
):
    """Launches (each a Counter of rounds), empty CTAs of stage 2 as ``(interleaved, trailing)``,
    and real tiles of one problem. ``drift`` is :attr:`ModelParams.drift_rounds` (each
    launch starts in step).

    Stage 2's grid is ``(m slots, n tiles, experts)``, dispatched in linear order (m slot
    fastest). Empty CTAs that come before the last real one are interleaved with real tiles;
    the ones after it (experts without rows at the end, as at 1 token per GPU) are *trailing*:
    they run on the SMs the last, partial round leaves idle."""
    rows = sum(counts)
    per_expert = []
    start = 0
    for e, m in enumerate(counts):
        if m:
            arrs = _expert_tiles(m, start, rows, cfg, k, n, stage)
            per_expert.append((*arrs, np.full(len(arrs[0]), e)))
        start += m
    if not per_expert:
        return (), (0, 0), 0
    empties = (0, 0)
    m_slots, nt = max(1, _cdiv(rows, cfg.tile_m)), _cdiv(n, cfg.tile_n)
    # neighbouring CTAs share L2 requests: only where the launch order puts tiles that
    # read the same B box next to each other (1-CTA tiles of the static schedule)
    shares = cfg.cta_group == 1

    def merges(e, m_idx, n_idx, linear):
        if not shares:
            return np.zeros(len(linear))
        return _neighbour_merges(e, m_idx, n_idx, linear)

    if stage == 1:
        launches = tuple(
            _rounds(o, h, w, merges(e, mi, ni, np.arange(len(o))), slots, drift)
            for o, h, w, mi, ni, e in per_expert
        )
    else:
        joined = [np.concatenate([arrs[i] for arrs in per_expert]) for i in range(6)]
        oob, hbm, out, m_idx, n_idx, expert = joined
        if stage == 2:  # the grid's linear index: (m slot, n tile, expert), m slot fastest
            linear = m_idx + m_slots * (n_idx + nt * expert)
        else:  # the tile index (CTA c takes c, c + C, ...: C is a multiple of 4 on the H200 and B200)
            linear = np.arange(len(oob))
        launches = (_rounds(oob, hbm, out, merges(expert, m_idx, n_idx, linear), slots, drift),)
        if stage == 2:
            grid = m_slots * nt * len(counts)
            last = max(e for e, m in enumerate(counts) if m)
            last_real = (nt - 1 + nt * last) * m_slots + _cdiv(counts[last], cfg.tile_m) - 1
            trailing = grid - 1 - last_real
            empties = (grid - len(joined[0]) - trailing, trailing)
    tiles = sum(len(a[0]) for a in per_expert)
    return launches, empties, tiles


# ---------------------------------------------------------------------------- one round
@dataclass(frozen=True)
class _Rates:
    hbm: float  # B/s
    l2: float  # B/s of L2 work
    mma_gpu: float  # FLOP/s, whole GPU under full load
    mma_sm: float  # FLOP/s, one SM at max clock


def _mma_rows(cfg: GemmConfig) -> int:
    """Accumulator rows one SM's MMA computes per K tile (a wgmma is at least 64 rows; with
    ``swap_ab`` the tokens are the wgmma's N, so it computes exactly the tile's rows)."""
    rows = cfg.cta_tile_m
    if cfg.arch == "sm_90a" and not cfg.swap_ab:
        return max(rows, 64)
    return rows


def _epilogue(cfg: GemmConfig, stage: int, params: ModelParams) -> tuple[float, float]:
    """(time to store one tile, the part of it the MMA waits for) on one SM.

    ``epilogue_s`` is one store group storing 128 x 128 outputs. On sm_90a each consumer
    warpgroup stores its own (at most 64) accumulator rows, the two warpgroups of a 128-row tile at
    the same time; on sm_100a the epilogue warps drain the whole CTA tile."""
    if cfg.arch == "sm_90a":
        # one warpgroup stores a whole tile with the split accumulator and with swapped operands
        whole = cfg.acc_slots == 2 or cfg.swap_ab
        unit, rows = params.epilogue_s, cfg.cta_tile_m if whole else min(cfg.cta_tile_m, 64)
    else:
        unit, rows = params.epilogue_sm100_s, cfg.cta_tile_m
    store = unit * rows * cfg.tile_n * cfg.dtype_bytes / _EPI_UNIT_BYTES
    if stage <= 2:
        return store, store
    if cfg.arch == "sm_90a":
        return store, 0.0 if cfg.acc_slots == 2 else store  # the split accumulator hides it
    acc = cfg.acc_buffers or 1
    return store, 0.0 if acc >= 2 else store / cfg.acc_slots  # TMEM double buffer / split


def _round_terms(rnd: _Round, cfg, k, n, rates: _Rates, params: ModelParams, overhead, exposed):
    K = _cdiv(k, cfg.tile_k)
    flops = 2 * _mma_rows(cfg) * cfg.tile_n * cfg.tile_k  # per SM per K tile
    t_mma = flops / rates.mma_sm
    L = params.memory_latency_s
    depth = cfg.ring_depth
    rate = depth / (L + t_mma)  # K tiles per second per SM, A ring (and B, b_k_tiles = 1)
    if cfg.b_k_tiles > 1:
        bk = cfg.b_k_tiles
        rate = min(rate, cfg.b_ring_depth * bk / (L + bk * t_mma))
    sms = rnd.tiles * cfg.cta_group
    # L2 work of a box: its bytes plus row_request_bytes per row segment (one contiguous run of a
    # row inside one ring entry: tile_k x 2 = 128 B for A; B entries of b_k_tiles K tiles hold
    # b_k_tiles x 128 B of each weight row, so a K tile of B carries 1 / b_k_tiles of a segment).
    row = cfg.tile_k * cfg.dtype_bytes
    r = params.row_request_bytes
    a_box = cfg.cta_tile_m * (row + r)
    b_box = cfg.cta_tile_n * (row + r / cfg.b_k_tiles)
    # a B box that neighbouring CTAs read with an earlier one costs (1 - neighbour_merge) of its work
    b_box *= 1 - min(params.neighbour_merge, 1.0) * rnd.b_merged
    reads = sms * K * (a_box * (1 + (params.oob_l2_weight - 1) * rnd.oob) + b_box)
    narrow = cfg.epilogue == "direct_store" and cfg.direct_store_bits < 256
    writes_extra = (params.narrow_store_l2_factor - 1) * rnd.out_bytes if narrow else 0.0
    sharers = min(rnd.tiles, _cdiv(n, cfg.tile_n))
    t_k = max(t_mma, sms * flops / rates.mma_gpu)  # one K tile, sharing the GPU's MMA rate
    terms = {
        "latency": K / rate + overhead,
        "math": K * t_k + exposed,
        "memory": rnd.hbm_bytes / rates.hbm,
        "l2": (reads + params.fill_l2_weight * rnd.hbm_bytes + writes_extra) / rates.l2,
        "oob": K * sharers * rnd.oob * params.shared_box_s,
    }
    return terms, t_mma, K, reads + params.fill_l2_weight * rnd.hbm_bytes + writes_extra


def _combine(terms: dict, p: float) -> float:
    """One round's time from its terms: HBM and L2 in series (a byte from HBM passes both, and
    two nearly full queues add), the largest throughput term, then latency against it."""
    m, l2 = terms["memory"], terms["l2"]
    h = max(m, l2)
    path = h * ((m / h) ** p + (l2 / h) ** p) ** (1 / p) if h > 0 else 0.0
    others = [v for key, v in terms.items() if key not in ("latency", "memory", "l2")]
    bw = max([path, *others])
    lat = terms["latency"]
    hi = max(lat, bw)
    if hi <= 0:
        return 0.0
    return hi * ((lat / hi) ** p + (bw / hi) ** p) ** (1 / p)


# ---------------------------------------------------------------------------- public API
#: How the device tile scheduler walks the experts (:meth:`pearl_moe.kernels.scheduler.TileScheduler.seek`).
#: The same names as :data:`pearl_moe.config.WALKS` (``GemmConfig.walk``).
SCHEDULERS = ("serial", "warp-parallel")


def walk_steps(experts: int, scheduler: str = "warp-parallel") -> int:
    """Dependent offset loads a persistent CTA's consumer makes walking all ``experts``.

    ``serial``: one expert per step (the course's first persistent kernel), ``experts`` steps;
    ``warp-parallel``: the 32 lanes of a warp load 32 experts' offsets at once, ``ceil(E / 32)``.
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler must be one of {SCHEDULERS}, got {scheduler!r}")
    if scheduler == "serial":
        return experts
    return _cdiv(experts, 32)


def predict(
    problem: GroupedProblem,
    config: GemmConfig,
    gpu: GpuSpec | str | None = None,
    *,
    per_expert_launches: bool = False,
    stage: int | None = None,
    params: ModelParams | None = None,
    hbm_bytes_per_s: float | None = None,
    mma_flops_per_s: float | None = None,
    scheduler: str = "warp-parallel",
) -> Prediction:
    """Modeled latency of ``problem`` under ``config`` on ``gpu`` (default: the arch's GPU).

    ``stage`` picks the kernel structure (1 per-expert loop, 2 grouped grid, 3-7 persistent; the
    default is 3, or 1 with ``per_expert_launches=True``). ``hbm_bytes_per_s`` and
    ``mma_flops_per_s`` replace the modeled ceilings with measured ones (the calibration passes
    each H200 run's own); the floor is then computed from them too.
    """
    gpu = get_gpu(gpu) if gpu is not None else default_gpu(config.arch)
    params = params or CALIBRATED
    stage = kernel_stage(stage, per_expert_launches)
    cfg = resolve(config, gpu)
    hbm = hbm_bytes_per_s or hbm_ceiling(gpu, params)
    mma = mma_flops_per_s or mma_ceiling(gpu, params)
    rates = _Rates(
        hbm=hbm,
        l2=l2_throughput(gpu, params),
        mma_gpu=mma,
        mma_sm=gpu.bf16_flop_per_clk_per_sm * gpu.max_clock_hz,
    )
    if hbm_bytes_per_s or mma_flops_per_s:
        floor = problem.floor_seconds(hbm, mma)
    else:
        floor = problem.floor_seconds(gpu.hbm_bytes_per_s, gpu.bf16_dense_flops)
    slots = gpu.sms // cfg.cta_group
    launches, empties, tiles = _structure(
        tuple(problem.counts),
        problem.k,
        problem.n,
        cfg,
        stage,
        slots,
        round(params.drift_rounds, 1),
    )
    if not tiles:
        return Prediction(params.launch_overhead_s, floor, 0, 1, 0.0, "latency", stage=stage)

    store, exposed = _epilogue(cfg, stage, params)
    L = params.memory_latency_s
    if stage == 1:
        overhead = params.cta_overhead_s + L + store
    elif stage == 2:
        overhead = params.cta_overhead_s * (1 + empties[0] / tiles) + L + store
    else:
        overhead = exposed
    by_bound: dict[str, float] = Counter()
    seconds = len(launches) * params.launch_overhead_s
    by_bound["launch"] += seconds
    if stage >= 3:
        seconds += params.cta_overhead_s + L  # one prologue per persistent CTA
        by_bound["latency"] += params.cta_overhead_s + L
        walk = walk_steps(problem.experts, scheduler) * params.walk_step_s
        seconds += walk
        by_bound["walk"] += walk
    waves = 0
    hbm_total = l2_total = 0.0
    fullest = None
    for rounds in launches:
        for rnd, count in rounds.items():
            terms, t_mma, K, l2 = _round_terms(
                rnd, cfg, problem.k, problem.n, rates, params, overhead, exposed
            )
            t = _combine(terms, params.knee)
            seconds += count * t
            waves += count
            hbm_total += count * rnd.hbm_bytes
            l2_total += count * l2
            by_bound[max(terms, key=terms.get)] += count * t
            if fullest is None or rnd.tiles > fullest[0].tiles:
                fullest = (rnd, t, t_mma, K)
    rnd, t, t_mma, K = fullest
    if empties[1]:
        # trailing empty CTAs take the SMs the last round leaves idle, then share all of them
        last = launches[-1]
        tail = min(last, key=lambda r: r.tiles)
        idle = (slots - tail.tiles) * _combine(
            _round_terms(tail, cfg, problem.k, problem.n, rates, params, overhead, exposed)[0],
            params.knee,
        )
        extra = max(0.0, empties[1] * params.cta_overhead_s - idle) / slots
        seconds += extra
        by_bound["launch"] += extra
    stream = max(t - overhead, 0.0)
    loaded = stream * cfg.ring_depth / K - t_mma
    return Prediction(
        seconds=seconds,
        floor_seconds=floor,
        waves=waves,
        launches=len(launches),
        reachable_bandwidth=rnd.hbm_bytes / t if t else 0.0,
        bound=max(by_bound, key=by_bound.get),
        stage=stage,
        loaded_latency_s=max(loaded, L),
        hbm_bytes=hbm_total,
        l2_bytes=l2_total,
        time_by_bound=dict(by_bound),
    )


@dataclass(frozen=True)
class BytesInFlight:
    """What one SM's ring holds while it streams a typical tile, split by where it comes from."""

    ring_depth: int
    a_entry: int  # bytes of one A entry
    b_entry: int  # bytes of B per K tile
    a_real: float  # of an A entry: rows that belong to the tile's expert (HBM once, then L2)
    a_padding_l2: float  # rows of the next experts, read from L2
    a_zero_fill: float  # rows past the end of A, zero-filled by the TMA unit

    @property
    def hbm_per_entry(self) -> float:
        """Bytes of an entry that must come from HBM: the weights (and the real A rows)."""
        return self.b_entry + self.a_real

    @property
    def hbm_in_flight(self) -> float:
        return self.ring_depth * self.hbm_per_entry

    @property
    def total_in_flight(self) -> float:
        return self.ring_depth * (self.a_entry + self.b_entry)

    def describe(self) -> str:
        kb = 1024
        return (
            f"A entry {self.a_entry / kb:.1f} KB = {self.a_real / kb:.1f} KB of the expert's rows + "
            f"{self.a_padding_l2 / kb:.1f} KB of other experts' rows (L2) + "
            f"{self.a_zero_fill / kb:.1f} KB zero-filled; B {self.b_entry / kb:.1f} KB per K tile.\n"
            f"{self.ring_depth} entries: {self.total_in_flight / kb:.0f} KB in flight per SM, of which "
            f"{self.hbm_in_flight / kb:.0f} KB from HBM"
        )


def bytes_in_flight(
    problem: GroupedProblem, config: GemmConfig, gpu: GpuSpec | str | None = None, stage: int = 3
) -> BytesInFlight:
    """Split one SM's ring into HBM bytes and L2 bytes for ``problem`` (average over its tiles).

    At decode most of an A entry is padding: GLM 5.3 at 64 tokens has 16 rows per expert, so a
    128-row A entry (16 KB) holds 2 KB of the expert's rows and 14 KB of other rows served from L2.
    """
    gpu = get_gpu(gpu) if gpu is not None else default_gpu(config.arch)
    cfg = resolve(config, gpu)
    rows = problem.rows
    real = pad = zero = 0.0
    count = 0
    start = 0
    for m in problem.counts:
        for first in range(start, start + m, cfg.tile_m):
            valid = min(cfg.tile_m, start + m - first)
            if cfg.shift_a_box:
                oob = 0
            elif stage == 1:
                oob = cfg.tile_m - valid
            else:
                oob = max(0, first + cfg.tile_m - rows)
            real += valid
            zero += oob
            pad += cfg.tile_m - valid - oob
            count += 1
        start += m
    row_bytes = cfg.tile_k * cfg.dtype_bytes
    scale = row_bytes / cfg.cta_group / max(count, 1)
    return BytesInFlight(
        ring_depth=cfg.ring_depth,
        a_entry=cfg.a_entry_bytes,
        b_entry=cfg.cta_tile_n * cfg.tile_k * cfg.dtype_bytes,
        a_real=real * scale,
        a_padding_l2=pad * scale,
        a_zero_fill=zero * scale,
    )


def stage_projection(
    models=("GLM 5.3", "DeepSeek V4 Pro", "Kimi K3"),
    tokens=(16, 64, 256, 4096),
    gpu: GpuSpec | str = "B200",
    stages=range(3, 8),
    params: ModelParams | None = None,
    ep: int = 8,
) -> dict[tuple[str, int], dict[int, Prediction]]:
    """Modeled latency of each course stage (its ladder configuration) per ``(model, tokens)``."""
    from ..kernels.ladder import stage_config
    from ..workloads import get_model, make_problem

    gpu = get_gpu(gpu)
    out: dict[tuple[str, int], dict[int, Prediction]] = {}
    for model in models:
        name = get_model(model).name
        for t in tokens:
            problem = make_problem(name, t, ep=ep)
            out[(name, t)] = {
                s: predict(problem, stage_config(gpu.arch, s), gpu, stage=s, params=params)
                for s in stages
            }
    return out
