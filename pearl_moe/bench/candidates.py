"""The configurations the tuner times for a shape: the pruned search space of
``python -m pearl_moe tune`` (:mod:`pearl_moe.bench.tune`), whose winners the runtime pick reads
back from ``pearl_moe/tuning/<GPU>.json`` (:mod:`pearl_moe.kernels.autotune`).

:func:`candidates` gives ``[(stage, config)]`` for one shape, in the order the tuner tries them;
its docstring says what prunes the space and why. The pieces: :func:`_tile_shapes` (tile heights
and widths by rows per expert), :data:`OPTIONS` (the persistent kernel's options in the course's
order), :func:`_small_tile_candidates` (sm_90a decode tiles below the 64-row wgmma, swapped
operands, A boxes inside A), :func:`_cluster_candidates` (2-CTA clusters at prefill),
:func:`_rows192_candidates` (the 192 x 128 split-accumulator tile where it pads less) and
:func:`_group_twins` (the grouped tile order, on request). Every candidate is one the kernels
accept (:func:`pearl_moe.kernels.api.can_implement`, through
:func:`pearl_moe.kernels.autotune.stage_for`).
"""

from __future__ import annotations

import math
from dataclasses import asdict

from ..config import GemmConfig
from ..kernels.autotune import active_experts, heuristic, m_tiles, stage_for, wave_width
from ..kernels.ladder import LAST_STAGE, stage_config

__all__ = ["CLUSTER_ROWS", "OPTIONS", "PREFILL_ROWS", "SERIAL_WALK_ROWS", "candidates"]


#: Options of the stage-3 kernel, in the order the tuner tries them: (label, fields, only on
#: :func:`_split_tile` tiles).
OPTIONS = (
    ("tma", {}, False),
    ("direct", {"epilogue": "direct_store"}, False),
    ("direct+B2", {"epilogue": "direct_store", "b_k_tiles": 2}, False),
    ("direct+split", {"epilogue": "direct_store", "acc_slots": 2}, True),
    ("direct+B2+split", {"epilogue": "direct_store", "b_k_tiles": 2, "acc_slots": 2}, True),
    ("tma+B2", {"b_k_tiles": 2}, False),
)


#: Rows per expert above which the candidate space counts as prefill.
PREFILL_ROWS = 256
#: Rows per expert above which the tuner also times the 128 x 192 split-accumulator tile and the
#: 2-CTA cluster twins (:func:`_cluster_candidates`): the prefill kinds, from a quarter of the
#: prefill size on. At 128-256 rows per expert (the course's 1024-token layers) quack-tuned's
#: clustered tiles were the fastest baseline on the H200: 192 x 128 with a split accumulator, two
#: CTAs along N, ahead of the default call's 64 x 256 split-accumulator tile by 1.104x on Kimi K3's
#: gate+up (146 rows per expert; 1.30x on the H100 with a 64 x 128 one), and 128 x 256 in the same
#: clusters by 1.039x on DeepSeek V4 Pro's (128 rows per expert, against our 128 x 256 alone)
#: (``results/<GPU>/compare_general.json.gz``). Entries tuned before this band had these candidates
#: hold none of them: ``general_runs.sh midsize`` times them.
CLUSTER_ROWS = 64


def _split_tile(tile_m: int, tile_n: int, per_expert: float) -> bool:
    """Whether the :data:`OPTIONS` split-accumulator variants are tried on this tile: 64-row tiles
    always; above :data:`CLUSTER_ROWS` rows per expert also 128 x 128 and 128 x 192, whose fp32
    accumulator one consumer warpgroup holds whole (128 and 192 registers a thread; 128 x 192 with a
    split accumulator and clusters of two along M is quack's default Hopper configuration). Below,
    the 128 x 128 split-accumulator tile comes from :func:`_small_tile_candidates`; on the H200 it
    won 4 of the tuning set's entries at 256 rows per expert, the largest size it was timed at
    before."""
    return tile_m == 64 or (
        per_expert > CLUSTER_ROWS and tile_m == 128 and tile_m * tile_n <= 128 * 192
    )


def _tile_shapes(per_expert: float, n: int) -> list[tuple[int, int]]:
    if per_expert <= 32:  # decode: 64-row tiles first; wide tiles for few active experts
        shapes = [(64, 128), (64, 256), (64, 64), (64, 192), (128, 128)]
    elif per_expert <= 256:  # mid: padding of the last m tile matters (146 rows: 3 x 64 < 2 x 128)
        shapes = [(64, 128), (128, 128), (64, 256), (128, 256), (128, 192), (64, 192)]
    else:  # prefill: large tiles, more reuse of each weight tile (256 rows: two warpgroups of 128)
        shapes = [(128, 128), (128, 256), (256, 128), (128, 192), (256, 192), (64, 256), (64, 128)]
    # 192-wide tiles only where they divide n, except at prefill, where the partial last n tile
    # of each row block costs little against many full ones (n = 4096: 22 tiles, 3% padding)
    prefill = per_expert > PREFILL_ROWS
    return [(m, t) for m, t in shapes
            if t <= max(n, 64) and (t != 192 or n % 192 == 0 or prefill)]  # fmt: skip


def _small_tile_candidates(
    base: GemmConfig, per_expert: float, n: int, experts: int = 1, sms: int = 132
) -> list[GemmConfig]:
    """sm_90a options beyond the post, first at decode: A boxes that end inside A
    (``shift_a_box``) and tiles of fewer rows than the 64-row wgmma (``tile_m`` 8-32: smaller A
    entries, more of them in flight).

    * tile heights: the smallest box that holds an average expert's rows, the next one up, and
      32 rows (the pick must also suit skewed routing, where some experts get many rows);
    * tile widths: 128 and 256, and at most one row per expert also 96 (only the experts some token
      picked are active, e.g. 6 for DeepSeek V4 Pro at 1 token: 6 x 6144 / 128 = 288 tiles are 2.2
      waves of 132 SMs, 6 x 6144 / 96 = 384 tiles are 2.9); at decode also the width whose tiles
      fill the waves best (:func:`~pearl_moe.kernels.autotune.wave_width`), for layers whose few
      active experts give fewer tiles than SMs;
    * options in the order the H200 ablation ranked them: plain, wide B entries, the split
      accumulator; before them, at decode, the same heights with swapped operands (``swap_ab``: the
      weights as the wgmma's 64-row M, the tile's tokens as its N), which compute no padding rows.
    """
    if per_expert <= 64:
        heights = [m for m in (8, 16, 32, 64) if m >= per_expert][:2]
        if per_expert > 1 and 32 not in heights:
            heights.append(32)  # skewed routing gives some experts many more rows
    elif per_expert <= 256:
        heights = [64, 128]
    else:
        return []
    widths = [128, 96, 256] if per_expert <= 1 else [128, 256]
    if per_expert <= 64:
        active = active_experts(experts, per_expert)
        wave = wave_width(n, active, sms)
        if wave not in widths:
            widths.insert(1, wave)
    widths = [w for w in widths if w <= max(n, 64)]
    direct = {"epilogue": "direct_store", "shift_a_box": True}
    out = []
    if per_expert <= 64:
        # swapped operands first: the weights are the wgmma's M, the tokens its N (no padding rows)
        for b_k_tiles in (1, 2):
            for tile_n in (128, 256):
                for tile_m in heights:
                    if tile_m < 64 and tile_n <= max(n, 64):
                        out.append(
                            base.with_(
                                tile_m=tile_m, tile_n=tile_n, b_k_tiles=b_k_tiles,
                                swap_ab=True, **direct,
                            )
                        )  # fmt: skip
    for extra in ({}, {"b_k_tiles": 2}, {"acc_slots": 2}):
        for tile_n in widths:
            for tile_m in heights:
                try:
                    out.append(base.with_(tile_m=tile_m, tile_n=tile_n, **direct, **extra))
                except ValueError:
                    continue
    return out


def _cluster_candidates(
    configs: list[GemmConfig], n: int, per_expert: float = math.inf
) -> list[GemmConfig]:
    """Prefill twins in clusters of two CTAs that share their larger operand tile by TMA
    multicast (each CTA loads half of it into both), of the 128- and 256-row tiles among ``configs``
    (and of the 128 x 128 and 128 x 192 direct-store tiles with a split accumulator): along N
    sharing A (``cluster_n=2``, where ``tile_m >= tile_n`` and ``n`` gives at least two n tiles),
    along M sharing B (``cluster_m=2``, where ``tile_n >= tile_m``); and the 128 x 192
    split-accumulator tile along N too, sharing the smaller A: quack's tuned configurations share A
    with 128-row split-accumulator tiles on 3 of the held-out set's 10 down projections at 4096
    tokens (128 x 128, 128 x 160 and 128 x 192 wide; on GLM-4.5-Air's, with 160, ours takes 1.077x);
    this one has passed its GPU tests on an H100 (``results/H100/gpu_checks.txt``), not yet on the
    H200.

    At prefill a tile's operands cross from L2 to the SM once per k tile: a 128 x 256 tile moves 16
    KB of A and 32 KB of B per 4.2 MFLOP, which at the H200's measured bf16 ceiling (796 TFLOP/s
    over 132 SMs) is about 9 TB/s of L2 reads (arithmetic, not a measurement); sharing its B tile
    cuts a CTA's loads from 48 to 32 KB, a third (quack's tuned Hopper configurations use 2-CTA
    clusters on every prefill shape of the held-out set, along M or along N). Both directions passed
    their GPU tests on the H200 (the ``clusterN2`` / ``clusterM2`` variants of
    ``tests/test_kernels_sm90_gpu.py``; all but the 128 x 192 split-accumulator tile along N, which
    passed on an H100); the tuner times them, and a table picks them only where they measured
    fastest (the H200 table: one 256 x 192 tile along N, one 128 x 192 split-accumulator tile along
    M).

    Below prefill (``per_expert`` at most :data:`PREFILL_ROWS`) an expert's rows fill one or two
    m tiles, so a pair along M often has a CTA with no rows of its own: there the pairs go along
    N for every tile (two n tiles of the same rows always both have work), and along M only where
    an average expert has more rows than one tile. quack-tuned's choices at 128-256 rows per
    expert pair along N (128 x 256 on DeepSeek V4 Pro's gate+up at 1024 tokens, 192 x 128 on
    Kimi K3's)."""
    out = []
    mid = per_expert <= PREFILL_ROWS
    for config in configs:
        if config.tile_m < 128 or config.b_k_tiles != 1:
            continue
        twins = []
        if (mid or config.tile_m >= config.tile_n) and n >= 2 * config.tile_n:
            twins.append(config.with_(cluster_n=2))
        if config.tile_n >= config.tile_m and (not mid or per_expert > config.tile_m):
            twins.append(config.with_(cluster_m=2))
        if config.tile_m == 128 and config.tile_n <= 192 and config.epilogue == "direct_store":
            twins += [t.with_(acc_slots=2) for t in twins]  # the split-accumulator tile too
            if config.tile_n > config.tile_m and n >= 2 * config.tile_n and not mid:
                twins.append(config.with_(cluster_n=2, acc_slots=2))  # and sharing A
        out += twins
    return out


def _rows192_candidates(base: GemmConfig, per_expert: float, n: int) -> list[GemmConfig]:
    """The 192 x 128 split-accumulator tile (one consumer warpgroup's three m64 blocks), alone and
    paired along N, where an average expert's rows pad to fewer rows in 192-row tiles than in
    128-row ones: 129-192 rows, 513-576, 897-960 and so on every 384 rows; not 65-128 or 257-384,
    where they pad as much or more. Measured only at 146 rows per expert (and lost at 128 and 256).

    quack-tuned's fastest tile on Kimi K3's gate+up at 1024 tokens (146 rows per expert) is this
    one paired along N: one tile holds an expert's rows where 128-row tiles need two. On an H100,
    in interleaved rounds with the default call and quack-tuned, the pair took 0.972x the default
    call's time there (0.996x quack-tuned's), and lost where the rows fit 128-row tiles (1.06x at
    128 rows per expert, 1.39x at 256) (``experiments/pingpong_192_rows``): so the tuner times it
    only where its padding is smaller."""
    if n < 128 or m_tiles(per_expert, 192) * 192 >= m_tiles(per_expert, 128) * 128:
        return []
    tile = base.with_(tile_m=192, tile_n=128, epilogue="direct_store", acc_slots=2, b_k_tiles=1)
    return [tile.with_(cluster_n=2), tile] if n >= 256 else [tile]


#: Rows per expert from which the tuner also times serial-walk twins (the 4096-token shapes of the
#: three models have 512-1024; their 1024-token shapes, 128-256, fill the limit without them).
SERIAL_WALK_ROWS = 512


def candidates(
    arch: str, n: int, k: int, experts: int, rows: int, limit: int = 28, sms: int = 132,
    group_twins: int = 0,
) -> list[tuple[int, GemmConfig]]:  # fmt: skip
    """The pruned configuration space the tuner measures for one shape: ``[(stage, config)]``.

    The full space on sm_90a is tile_m {8, 16, 32, 64, 128, 192, 256} x tile_n {64, 96, 128, 192,
    256} x ring depth 2..max x {TMA, direct store} x b_k_tiles {1, 2} x acc_slots {1, 2} x
    clusters {none, 2 along N, 2 along M} and more: thousands of kernels per shape. What prunes
    it:

    * **ring depth**: always the deepest that fits. At decode the kernel is bound by bytes in
      flight and every extra entry helped on the H200 (2-7 entries at 64 tokens, monotone); at
      prefill the ring only needs to cover the load latency, which it does at any depth >= 4.
    * **tile shape** by rows per expert (:func:`_tile_shapes`): 64-row tiles at decode (a 128-row
      tile at 16 rows per expert is 7/8 padding), 128- and 256-row tiles at prefill, both in
      between; ``tile_n`` 192 only where it divides ``n`` (at prefill always); never wider than
      ``n``.
    * **options** in the order of the course's stages (:data:`OPTIONS`): TMA store (stage 3), direct
      store (4), B entries spanning two K tiles (6), the split accumulator (7; 64-row tiles, and
      128 x 128 and 128 x 192 above :data:`CLUSTER_ROWS` rows per expert, :func:`_split_tile`;
      below, 128 x 128 split-accumulator tiles come from :func:`_small_tile_candidates`).
      Each is tried on the most promising shapes first, so truncation at ``limit`` drops the least
      likely combinations.
    * **clusters** (sm_90a, above :data:`CLUSTER_ROWS` rows per expert,
      :func:`_cluster_candidates`): twins of the first pass's 128- and 256-row tiles in 2-CTA
      clusters sharing their larger operand tile (and the 128 x 192 split-accumulator tile sharing
      A), right after that pass.
    * **the 192 x 128 split-accumulator tile**, alone and paired along N, where 192-row tiles pad an
      expert's rows less than 128-row ones (:func:`_rows192_candidates`): right after the small
      tiles, so that the CLI's default limit holds it.
    * the heuristic's pick and the course's configuration of each stage 3-7 are always included,
      so the table never picks something slower than either (within the run's noise).
    * **the scheduler's walk**: from :data:`SERIAL_WALK_ROWS` rows per expert on, the slots the
      space above leaves under ``limit`` go to serial-walk twins of its single-consumer candidates,
      in order (on the H200 the serial walk took 0.83-0.95x the warp-parallel walk's time with 64 x
      128 tiles at 4096 tokens, and 1.03-1.06x at 1 token: ``results/H200/walk.json.gz``).
    * **the tile order** (``group_twins``, sm_90a prefill, off by default): beyond ``limit``, twins
      in the grouped order (``n_group=8``, quack's) of ``group_twins`` candidates of 128 or more
      rows (split accumulator, then 256-row, then cluster tiles first): a tuning run that decides
      whether the order earns a place in the space (``experiments/prefill_order``).

    Configurations of stages whose kernel does not exist here (``stage_module`` would raise
    ModuleNotFoundError) or that the kernel refuses (:func:`pearl_moe.kernels.api.can_implement`)
    are skipped.
    """
    per_expert = rows / experts if experts else 0.0
    ordered: list[GemmConfig] = [heuristic(arch, n, k, experts, rows).config]
    ordered += [stage_config(arch, s) for s in range(3, LAST_STAGE + 1)]
    base = stage_config(arch, 3)
    if arch == "sm_90a":
        ordered += _small_tile_candidates(base, per_expert, n, experts, sms)
        ordered += _rows192_candidates(base, per_expert, n)
    shapes = _tile_shapes(per_expert, n) if arch == "sm_90a" else [(128, 128), (128, 256)]
    for first, last in ((0, 2), (2, len(OPTIONS))):  # tma and direct everywhere, then the rest
        for tile_m, tile_n in shapes:
            for _, fields, split in OPTIONS[first:last]:
                if split and not _split_tile(tile_m, tile_n, per_expert):
                    continue
                try:
                    ordered.append(base.with_(tile_m=tile_m, tile_n=tile_n, **fields))
                except ValueError:
                    continue
        if first == 0 and arch == "sm_90a" and per_expert > CLUSTER_ROWS:
            ordered += _cluster_candidates(ordered, n, per_expert)
    out: list[tuple[int, GemmConfig]] = []
    seen = set()
    for config in ordered:
        try:
            config = config.resolved()
            stage = stage_for(config, n, k)
        except ValueError:
            continue
        key = asdict(config)
        key = tuple(sorted(key.items()))
        if key in seen:
            continue
        seen.add(key)
        out.append((stage, config))
        if len(out) >= limit:
            break
    if arch == "sm_90a" and per_expert >= SERIAL_WALK_ROWS:
        for stage, config in list(out):
            if len(out) >= limit:
                break
            if config.acc_slots == 1 and config.walk == "warp-parallel":
                out.append((stage, config.with_(walk="serial")))
    if arch == "sm_90a" and per_expert > PREFILL_ROWS and group_twins > 0:
        out += _group_twins(out, n, k, group_twins)
    return out


def _group_twins(cands: list[tuple[int, GemmConfig]], n: int, k: int, count: int) -> list:
    """``(stage, config)`` twins with ``n_group=8`` of ``count`` candidates of 128 or more rows in
    m-fastest order: the split-accumulator, 256-row and 2-CTA cluster candidates first (the kinds
    that won the H200 table's prefill entries), then the others in order."""
    twins = []

    def rank(config: GemmConfig) -> int:
        clustered = config.cluster_m * config.cluster_n > 1
        return 0 if config.acc_slots == 2 else 1 if config.tile_m == 256 else 2 if clustered else 3

    for config in sorted((c for _, c in cands), key=rank):
        if len(twins) >= count:
            break
        if config.tile_m < 128 or config.n_group:
            continue
        try:
            twin = config.with_(n_group=8).resolved()
            twins.append((stage_for(twin, n, k), twin))
        except ValueError:
            continue
    return twins
