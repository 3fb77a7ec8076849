"""The kernel cases every GPU check of the package shares, per architecture, and how each is checked.

One table per concept, for both kernel families (``"sm_90a"``, ``"sm_100a"``), read by:

* the GPU suites, one module per concept, each case skipped unless the GPU runs its family:
  ``tests/test_kernels_gpu.py`` (stages on edge cases, the course models, fused activations,
  unchecked bad offsets, CUDA graphs with re-routing), ``tests/test_multi_tile_gpu.py`` (many
  tiles a CTA on a small persistent grid); the options of one family in
  ``tests/test_kernels_sm100_gpu.py`` and ``tests/test_kernels_sm90_gpu.py``;
* the selftest's smoke phase (:data:`SMOKE`: one small launch per kernel family, each in a process
  of its own) and its multi-tile sanitizer phase (:data:`MULTI_TILE` under compute-sanitizer);
* the CPU test that compiles every sm_100a case (``tests/test_compile_gpu_cases.py``,
  :func:`compile_requests`): no B200 has run these kernels, so each case the B200 suite will launch
  is compiled for sm_100a first, once per distinct ``(stage, config, n, k, experts, grid)``.

The sm_100a problems share a few ``(n, k, experts)`` shapes on purpose: the row counts (zero-row
experts, one row, every row in the first or last expert, rows either side of a tile) are run-time
values, so one compiled kernel serves them all, and the CPU compile stays short.

Each check poisons its output with NaN first and compares with a float32 reference within twice
PyTorch's own bf16 error (:mod:`pearl_moe.bench.verify`); the ``check_*`` functions return a dict
whose ``ok`` says whether the case is right, and every other key says why not.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import GemmConfig
from ..kernels.ladder import stage_config
from ..workloads import MODELS, GroupedProblem

__all__ = [
    "ARCHS",
    "FUSED_GRAPH_SHAPE",
    "GRAPH_ROUTINGS",
    "GROUPED",
    "MULTI_COUNTS",
    "PREFILL_STAGES",
    "WALKS",
    "check_any",
    "default_call_cases",
    "gpu_family",
    "launch",
    "BAD_OFFSET_CONFIGS",
    "COUNTS",
    "EDGE_CASES",
    "FUSED",
    "GRAPH_CONFIGS",
    "MULTI_TILE",
    "Case",
    "ROUTINGS",
    "SHAPES",
    "SANITIZER",
    "SMOKE",
    "STAGES",
    "TOKENS",
    "VARIANTS_SM100",
    "bad_offsets",
    "check_case",
    "check_fused",
    "check_graph_rerouting",
    "check_guard_band",
    "compile_requests",
    "course",
    "hold_k_tiles",
    "run_on_grid",
]

ARCHS = ("sm_90a", "sm_100a")
STAGES = (1, 2, 3, 4, 5, 6, 7)
GROUPED = STAGES[1:]
#: The course models at these tokens per GPU and routings (EP = 8).
TOKENS = (1, 16, 64, 256, 1024)
ROUTINGS = ("balanced", "random", "skewed")


def gpu_family() -> str | None:
    """The kernel family of this machine's first GPU (``"sm_90a"``, ``"sm_100a"``), or None:
    no CUDA GPU, or one the kernels have no target for. The GPU suites skip the other family's
    cases with it."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        from ..kernels.targets import target_for_capability

        return target_for_capability(*torch.cuda.get_device_capability(0))[0]
    except Exception:
        return None


def course(arch: str, stage: int, **changes) -> GemmConfig:
    """The course's configuration of ``stage`` on ``arch`` (:mod:`pearl_moe.kernels.ladder`),
    fields changed."""
    return stage_config(arch, stage).with_(**changes)


@dataclass(frozen=True)
class Case:
    """One launch: ``stage`` with ``config`` (None: the course's configuration of the stage; both
    None: the default call), on experts of ``counts`` rows, ``n`` x ``k`` weights, on a persistent
    grid of ``ctas`` CTAs (None: the GPU's, as :func:`pearl_moe.grouped_gemm` sizes it).
    ``activation`` (a config's own, or the default call's): fused ``act(gate) * up`` on
    interleaved gate/up weights, ``n / 2`` outputs."""

    id: str
    stage: int | None
    config: GemmConfig | None
    counts: tuple
    n: int
    k: int
    ctas: int | None = None
    activation: str | None = None

    def __post_init__(self):
        if self.config is not None and self.config.activation != self.activation:
            if self.activation is not None:
                raise ValueError(f"{self.id}: config fuses {self.config.activation!r}")
            object.__setattr__(self, "activation", self.config.activation)

    @property
    def problem(self) -> GroupedProblem:
        """The case's problem (its experts, rows, offsets)."""
        return GroupedProblem(self.k, self.n, self.counts, self.id)

    def resolved(self, arch: str, gpu: str | None = None) -> tuple[int, GemmConfig]:
        """``(stage, config)`` as :func:`pearl_moe.grouped_gemm` resolves them: the course's
        configuration of the stage, or the default call's pick on ``gpu`` (a pure function of
        the shape, :func:`pearl_moe.kernels.api.default_choice`)."""
        from ..kernels import api, autotune

        if self.config is None:
            if self.stage is None:
                return api.default_choice(
                    arch, self.n, self.k, len(self.counts), sum(self.counts), gpu, self.activation
                )
            config = api.default_config(arch, self.stage)
            if self.activation is not None:
                config = api.with_activation(config, self.activation, self.n, self.k)
            return self.stage, config
        config = self.config.resolved()
        stage = self.stage if self.stage is not None else autotune.stage_for(config, self.n, self.k)
        return stage, config


# ------------------------------------------------------------------------------- problems
#: Row counts of 8 experts, run-time values every sm_100a shape runs: zero-row experts around
#: ragged ones, rows either side of the 64-, 128- and 256-row tiles, one row in all, every row in
#: the first or the last expert.
COUNTS = {
    "zero-row-experts": (0, 37, 0, 0, 200, 0, 1, 0),
    "tile-edges": (5, 127, 129, 0, 3, 64, 257, 256),
    "one-row": (0, 0, 0, 1, 0, 0, 0, 0),
    "all-in-first": (300, 0, 0, 0, 0, 0, 0, 0),
    "all-in-last": (0, 0, 0, 0, 0, 0, 0, 300),
}

#: The sm_100a ``(n, k)`` shapes (8 experts). ``ragged``: n = 1040 ends 16 columns into a 128-,
#: 256- or 512-wide tile, k = 1160 is 18 K tiles and 8 columns (a zero-filled tail), more K tiles
#: than any ring holds. ``small``: n = 144 is narrower than a 256- or 512-wide tile. The fused
#: shapes give ``n / 2`` outputs: 528 (a partial 64-column output tile), 80 (narrower than one)
#: and 520 (runs of 16 outputs do not fit: the ``epi_tile_n=16`` fallback).
SHAPES = {
    "ragged": (1040, 1160),
    "small": (144, 200),
    "fused-wide": (1056, 1160),
    "fused-narrow": (160, 200),
    "fused-fallback": (1040, 1160),
}

#: The sm_90a edge cases of the Hopper suite, as they were (the H200 and H100 runs passed them).
_EDGE_SM90 = [
    ("zero-row-experts-n2816", (0, 37, 0, 0, 200, 0, 1, 0), 2816, 4096),  # n % tile_n
    ("one-row", (1,), 4096, 6144),
    ("tile-multiples", (128, 256, 384), 256, 512),
    ("k-tail-tiny-n", (5, 127, 129, 0, 3), 136, 200),  # k % tile_k, tiny n
    ("all-in-first", (300, 0, 0, 0), 1024, 1024),
    ("all-in-last", (0, 0, 0, 300), 1024, 1024),
]


def _edge_sm100():
    return [
        (f"{shape}-{name}", counts, *SHAPES[shape])
        for shape in ("ragged", "small")
        for name, counts in COUNTS.items()
    ]


#: ``arch -> [(id, counts, n, k)]``: the problems every stage runs with its course configuration.
EDGE_CASES = {"sm_90a": _EDGE_SM90, "sm_100a": _edge_sm100()}

# --------------------------------------------------------------------- sm_100a tile families
#: The options of the sm_100a persistent kernel beyond the course's ladder: ``id -> (stage,
#: changes to the stage's course configuration, shapes)``. Every tile family (1-CTA 128 and 64
#: rows; 2-CTA 256 rows; the folded 2-CTA 128-row tile, 64 rows a CTA) with each store (TMA
#: store through per-expert descriptors; direct 256- and 128-bit stores), wide B entries, one or
#: two accumulator slots, the serial walk.
VARIANTS_SM100 = {
    "s3-128x256-1cta-tma": (3, dict(tile_n=256), ("ragged",)),
    "s3-256x256-2cta-tma": (3, dict(tile_m=256, tile_n=256, cta_group=2), ("ragged", "small")),
    "s3-128x256-2cta-folded-tma": (3, dict(tile_n=256, cta_group=2), ("ragged", "small")),
    "s4-128x128-stg128": (4, dict(store_bits=128), ("ragged",)),
    "s4-128x256-1cta": (4, dict(tile_n=256), ("ragged",)),
    "s4-256x256-2cta": (4, dict(tile_m=256, tile_n=256, cta_group=2), ("ragged", "small")),
    "s4-128x256-2cta-folded": (4, dict(tile_n=256, cta_group=2), ("ragged", "small")),
    "s5-64x256": (5, dict(tile_n=256), ("ragged",)),
    "s6-128x128-wideB": (6, dict(tile_m=128), ("ragged",)),
    "s6-256x256-2cta-wideB": (6, dict(tile_m=256, tile_n=256, cta_group=2), ("ragged",)),
    "s6-serial-walk": (6, dict(walk="serial"), ("ragged",)),
    "s7-256x512-one-slot": (7, dict(acc_slots=1), ("ragged", "small")),
    "s7-128x512-2cta-folded-tma": (
        7,
        dict(tile_m=128, epilogue="tma_store", acc_slots=1),
        ("ragged", "small"),
    ),
    "s7-128x512-2cta-folded": (7, dict(tile_m=128, acc_slots=1), ("ragged",)),
}

# ----------------------------------------------------------------------- fused activation
#: Configurations with ``act(gate) * up`` in the direct store: ``id -> (stage, config, shapes)``
#: (sm_100a shapes are names of :data:`SHAPES`, sm_90a shapes ``(counts, n, k)``); a config of
#: None is the default call's pick (adapted to the activation). sm_100a: every tile family, the
#: split accumulator, 128-bit stores and the ``epi_tile_n=16`` fallback.
_FUSED_SM100 = {
    "s4-128x128-swiglu": (4, course("sm_100a", 4, activation="swiglu"), ("fused-wide", "fused-narrow")),
    "s4-128x256-swiglu": (4, course("sm_100a", 4, tile_n=256, activation="swiglu"), ("fused-wide",)),
    "s5-64x128-swiglu": (5, course("sm_100a", 5, activation="swiglu"), ("fused-wide", "fused-narrow")),
    "s6-64x128-wideB-geglu": (6, course("sm_100a", 6, activation="geglu"), ("fused-wide",)),
    "s4-256x256-2cta-swiglu": (4, course("sm_100a", 4, tile_m=256, tile_n=256, cta_group=2,
                                         activation="swiglu"), ("fused-wide", "fused-narrow")),
    "s4-128x256-2cta-folded-swiglu": (4, course("sm_100a", 4, tile_n=256, cta_group=2,
                                                activation="swiglu"), ("fused-wide", "fused-narrow")),
    "s7-256x512-split-geglu": (7, course("sm_100a", 7, activation="geglu"), ("fused-wide", "fused-narrow")),
    "s4-128x128-swiglu-epi16": (4, course("sm_100a", 4, activation="swiglu", epi_tile_n=16),
                                ("fused-fallback",)),
    "s4-128x128-swiglu-stg128": (4, course("sm_100a", 4, activation="swiglu", store_bits=128),
                                 ("fused-wide",)),
    "default-swiglu": (None, None, ("fused-wide", "fused-fallback")),  # the default call
}  # fmt: skip

#: The sm_90a fused problems of the Hopper suite: tokenless experts; n / 2 = 72 (a partial output
#: tile, k not a tile multiple); one row; everything in one expert; n / 2 = 232 (partial 32-column
#: groups in the last tile).
_FUSED_CASES_SM90 = (
    ((0, 37, 0, 0, 200, 0, 1, 0), 2816, 4096),
    ((5, 127, 129, 0, 3), 144, 200),
    ((1,), 4096, 6144),
    ((300, 0, 0, 0), 1024, 1024),
    ((3, 0, 70, 1), 464, 320),
)


def _sm90(stage: int, **changes) -> GemmConfig:
    return course("sm_90a", stage, **changes)


_FUSED_SM90 = {
    "s5-64x128-swiglu": (4, _sm90(5, activation="swiglu")),
    "s4-128x128-swiglu": (4, _sm90(4, activation="swiglu")),
    "s6-16x256-shiftA-swiglu": (6, _sm90(6, tile_m=16, tile_n=256, shift_a_box=True,
                                         activation="swiglu")),
    # what the layer's fused gate+up picks at decode (an 8-row A box in the 64-row wgmma)
    "s5-8x128-shiftA-swiglu": (5, _sm90(5, tile_m=8, tile_n=128, shift_a_box=True,
                                        activation="swiglu")),
    "s7-pingpong-geglu": (7, _sm90(7, activation="geglu")),
    "s7-128x128-pingpong-swiglu": (7, _sm90(7, tile_m=128, activation="swiglu")),
    "s5-64x64-swiglu": (5, _sm90(5, tile_n=64, activation="swiglu")),
    "s5-64x192-swiglu": (5, _sm90(5, tile_n=192, activation="swiglu")),
    # widths 32 (2 b + 1): the last two output groups stored word by word
    "s6-16x96-shiftA-swiglu": (6, _sm90(6, tile_m=16, tile_n=96, shift_a_box=True,
                                        activation="swiglu")),
    "s5-64x160-geglu": (5, _sm90(5, tile_n=160, activation="geglu")),
    "s5-64x32-swiglu": (5, _sm90(5, tile_n=32, activation="swiglu")),
    # the widest such tile, and an 8-row A box at 96 wide (combinations the fused picks may use)
    "s5-64x224-swiglu": (5, _sm90(5, tile_n=224, activation="swiglu")),
    "s5-8x96-shiftA-swiglu": (5, _sm90(5, tile_m=8, tile_n=96, shift_a_box=True,
                                       activation="swiglu")),
    "default-swiglu": (None, None),
}  # fmt: skip


def _fused_cases():
    out = {"sm_90a": [], "sm_100a": []}
    for name, (stage, config) in _FUSED_SM90.items():
        act = None if config is not None else "swiglu"
        for i, (counts, n, k) in enumerate(_FUSED_CASES_SM90):
            out["sm_90a"].append(Case(f"{name}-{i}", stage, config, counts, n, k, activation=act))
    for name, (stage, config, shapes) in _FUSED_SM100.items():
        act = None if config is not None else "swiglu"
        for shape in shapes:
            for counts_name in ("zero-row-experts", "tile-edges", "one-row"):
                out["sm_100a"].append(
                    Case(f"{name}-{shape}-{counts_name}", stage, config, COUNTS[counts_name],
                         *SHAPES[shape], activation=act)
                )  # fmt: skip
    return out


#: ``arch -> [Case]``: the fused activation (the default call's cases fuse SwiGLU).
FUSED = _fused_cases()


#: The tile scheduler's two walks, run at stage 6 on Kimi K3's 112 experts at 64 tokens a GPU,
#: skewed routing (four 32-expert steps of the warp-parallel walk, empty experts on both sides).
WALKS = ("warp-parallel", "serial")
#: The prefill problem of many rounds of the static schedule (Kimi K3, 4096 tokens, skewed).
PREFILL_STAGES = (3, 4, 5, 6, 7)


# ------------------------------------------------------------------- offsets and graphs
def bad_offsets(experts: int) -> list[list[int]]:
    """End offsets that break the contract, for ``experts`` experts over 30 rows (the last value
    repeated past the fourth expert): negative, decreasing, past the rows, ending before them,
    huge, all past the rows."""
    heads = [
        [-5, 10, 20, 30],
        [20, 10, 30, 30],
        [10, 20, 30, 1000],
        [0, 0, 0, 0],
        [-100, -50, 2**31 - 1, 5],
        [40, 50, 60, 70],
    ]
    return [(h + [h[-1]] * experts)[:experts] for h in heads]


#: ``arch -> (counts, n, k)`` of the unchecked-offsets problem (30 rows), and the configurations
#: it runs (``id -> (stage, config or None)``): every grouped stage, and on sm_100a every store
#: (TMA stores through descriptors of clamped offsets, 1- and 2-CTA, folded; direct stores).
BAD_OFFSET_CONFIGS = {
    "sm_90a": (
        (10, 10, 5, 5),
        256,
        320,
        {
            **{f"s{s}": (s, None) for s in GROUPED},
            "s7-192x128-pingpong": (
                7,
                _sm90(7, tile_m=192, tile_n=128, b_k_tiles=1, ring_depth=None),
            ),
        },
    ),
    "sm_100a": (
        (10, 10, 5, 5, 0, 0, 0, 0),
        *SHAPES["small"],
        {
            **{f"s{s}": (s, None) for s in GROUPED},
            **{
                name: (stage, course("sm_100a", stage, **changes))
                for name, (stage, changes, shapes) in VARIANTS_SM100.items()
                if "small" in shapes
            },
        },
    ),
}

#: ``arch -> (counts per routing, n, k)``: a CUDA graph captured with the first routing, replayed
#: with the others written into the same offsets (and new rows into the same A): all rows in one
#: expert, spread over all, zero-row experts moved. The configurations replayed: every grouped
#: stage, and on sm_100a the 2-CTA TMA store (descriptors rewritten by each replay) and a fused
#: tile.
GRAPH_ROUTINGS = {
    "sm_90a": (((17, 0, 64, 3), (0, 84, 0, 0), (21, 21, 21, 21), (0, 0, 0, 84)), 512, 256),
    "sm_100a": (
        (
            (17, 0, 64, 3, 0, 0, 0, 0),
            (0, 0, 0, 0, 84, 0, 0, 0),
            (10, 10, 10, 10, 10, 10, 10, 14),
            (84, 0, 0, 0, 0, 0, 0, 0),
        ),
        *SHAPES["small"],
    ),
}
GRAPH_CONFIGS = {
    "sm_90a": {
        **{f"s{s}": (s, None) for s in GROUPED},
        "s5-64x128-swiglu": (5, _sm90(5, activation="swiglu")),
    },
    "sm_100a": {
        **{f"s{s}": (s, None) for s in GROUPED},
        "s3-256x256-2cta-tma": (3, course("sm_100a", 3, tile_m=256, tile_n=256, cta_group=2)),
        "s4-128x128-swiglu": (4, course("sm_100a", 4, activation="swiglu")),
    },
}
#: A fused graph case replays on the fused-narrow shape (n / 2 = 80 outputs), others on ``small``.
FUSED_GRAPH_SHAPE = {"sm_90a": (512, 256), "sm_100a": SHAPES["fused-narrow"]}

# -------------------------------------------------------------------------- multi-tile
#: Experts of a multi-tile problem (1200 rows): empty ones, one row, rows either side of a tile.
MULTI_COUNTS = (300, 0, 517, 129, 1, 0, 64, 189)
MULTI_N = 1024


def hold_k_tiles(config: GemmConfig) -> int:
    """K tiles the sm_100a split accumulator's atom 0 runs ahead on held ring entries
    (:attr:`~pearl_moe.kernels.sm100.split_accumulator.SplitAccumulator.split_k_start`)."""
    return max(1, config.resolved().ring_depth // 2)


def _multi_tile():
    """Small persistent grids (2-4 CTAs or clusters of two) on problems of 100-200 tiles: every
    CTA takes many tiles, so the ring wraps inside and across tiles, the accumulator buffers and
    their phase bits wrap, the epilogue buffers rotate, and (stage 7 on sm_100a) the split slots
    overlap the next tile's first K tiles at every tile. K = 1160 is 19 K tiles (more than 3 x
    the split accumulator's ``hold`` and several times every ring); 1080 is an odd count of 17
    (a wide B entry's second half past k)."""
    k, k_odd = 1160, 1080
    m = MULTI_COUNTS

    def c100(cid, stage, ctas, kk=k, **changes):
        return Case(cid, stage, course("sm_100a", stage, **changes), m, MULTI_N, kk, ctas)

    def c90(cid, stage, ctas, kk=k, **changes):
        return Case(cid, stage, _sm90(stage, **changes), m, MULTI_N, kk, ctas)

    return {
        "sm_100a": [
            c100("s3-128x128-tma", 3, 4),
            c100("s3-256x256-2cta-tma", 3, 4, tile_m=256, tile_n=256, cta_group=2),
            c100("s3-128x256-2cta-folded-tma", 3, 4, tile_n=256, cta_group=2),
            c100("s4-128x128-direct", 4, 4),
            c100("s4-256x256-2cta-direct", 4, 4, tile_m=256, tile_n=256, cta_group=2),
            c100("s5-64x128", 5, 3),
            c100("s6-64x128-wideB-odd-k", 6, 4, kk=k_odd),
            c100("s7-256x512-split", 7, 4),
            c100("s7-256x512-split-one-cluster", 7, 2),
            c100("s7-128x512-2cta-folded", 7, 4, tile_m=128, acc_slots=1),
            c100("s4-128x128-swiglu", 4, 2, activation="swiglu"),
            c100("s7-256x512-split-geglu", 7, 4, activation="geglu"),
        ],
        "sm_90a": [
            c90("s3-128x128-tma", 3, 4),
            c90("s3-128x128-tma-clusterN2", 3, 4, cluster_n=2),
            c90("s3-256x128-tma", 3, 4, tile_m=256),
            c90("s4-128x128-direct", 4, 4),
            c90("s5-64x128", 5, 3),
            c90("s6-64x128-wideB-odd-k", 6, 4, kk=k_odd),
            c90("s7-64x128-pingpong", 7, 4),
            c90("s7-128x128-pingpong-narrowB", 7, 2, tile_m=128, b_k_tiles=1),
            c90("s7-192x128-pingpong", 7, 4, tile_m=192, b_k_tiles=1, ring_depth=None),
            c90("s7-128x192-pingpong-clusterM2", 7, 4, tile_m=128, tile_n=192, b_k_tiles=1,
                cluster_m=2),
            c90("s5-64x128-swiglu", 5, 2, activation="swiglu"),
        ],
    }  # fmt: skip


#: ``arch -> [Case]`` with ``ctas`` set: the multi-tile cases.
MULTI_TILE = _multi_tile()

# ------------------------------------------------------------------------------- smoke
#: ``arch -> [Case]``: one small launch per kernel family, what the selftest's smoke phase runs
#: first, each in a process of its own (a hang or an illegal instruction names its family).
SMOKE = {
    "sm_100a": [
        Case("stage1-dense", 1, None, COUNTS["zero-row-experts"], *SHAPES["small"]),
        Case("stage2-grouped-descriptors", 2, None, COUNTS["zero-row-experts"], *SHAPES["small"]),
        Case("stage3-1cta-tma", 3, None, COUNTS["zero-row-experts"], *SHAPES["small"]),
        Case("stage3-2cta-256x256-tma", 3, course("sm_100a", 3, tile_m=256, tile_n=256,
             cta_group=2), COUNTS["zero-row-experts"], *SHAPES["small"]),
        Case("stage3-2cta-folded-tma", 3, course("sm_100a", 3, tile_n=256, cta_group=2),
             COUNTS["zero-row-experts"], *SHAPES["small"]),
        Case("stage4-direct-256bit", 4, None, COUNTS["zero-row-experts"], *SHAPES["small"]),
        Case("stage4-2cta-direct", 4, course("sm_100a", 4, tile_m=256, tile_n=256, cta_group=2),
             COUNTS["zero-row-experts"], *SHAPES["small"]),
        Case("stage5-64-rows", 5, None, COUNTS["zero-row-experts"], *SHAPES["small"]),
        Case("stage6-wide-b", 6, None, COUNTS["zero-row-experts"], *SHAPES["small"]),
        Case("stage7-split-accumulator", 7, None, COUNTS["zero-row-experts"], *SHAPES["small"]),
        Case("fused-swiglu-1cta", 4, course("sm_100a", 4, activation="swiglu"),
             COUNTS["zero-row-experts"], *SHAPES["fused-narrow"]),
        Case("fused-geglu-2cta-split", 7, course("sm_100a", 7, activation="geglu"),
             COUNTS["zero-row-experts"], *SHAPES["fused-narrow"]),
    ],
    "sm_90a": [
        Case("stage1-dense", 1, None, COUNTS["zero-row-experts"], 256, 256),
        Case("stage2-grouped", 2, None, COUNTS["zero-row-experts"], 256, 256),
        Case("stage3-tma", 3, None, COUNTS["zero-row-experts"], 256, 256),
        Case("stage3-clusterN2", 3, _sm90(3, cluster_n=2), COUNTS["zero-row-experts"], 256, 256),
        Case("stage3-256-rows", 3, _sm90(3, tile_m=256), COUNTS["zero-row-experts"], 256, 256),
        Case("stage4-direct", 4, None, COUNTS["zero-row-experts"], 256, 256),
        Case("stage5-64-rows", 5, None, COUNTS["zero-row-experts"], 256, 256),
        Case("stage6-wide-b", 6, None, COUNTS["zero-row-experts"], 256, 256),
        Case("stage7-pingpong", 7, None, COUNTS["zero-row-experts"], 256, 256),
        Case("stage7-192-rows", 7, _sm90(7, tile_m=192, tile_n=128, b_k_tiles=1,
             ring_depth=None), COUNTS["zero-row-experts"], 256, 256),
        Case("fused-swiglu", 5, _sm90(5, activation="swiglu"), COUNTS["zero-row-experts"],
             256, 256),
    ],
}  # fmt: skip


# ------------------------------------------------------------------------- sanitizers
def _sanitizer_cases():
    """What the selftest's sanitizer phase wraps: the cases most likely to break first, each with
    zero-row experts. Stages 2 and 3 (the TMA store through descriptors patched on the device on
    sm_100a) on experts of 1, 15, 16 and 200 rows; stage 6 with an odd K-tile count (a wide B
    entry's second half past k); stage 7 with fewer K tiles than the ring holds and n not a
    multiple of 512; stage 5 with empty experts around a ragged one."""
    out = {}
    for arch in ARCHS:
        edges = (1, 15, 0, 16, 200, 0)
        cases = [
            Case("stage 3, experts of 1, 15, 16 and 200 rows", 3, None, edges, 384, 256),
            Case("stage 2, experts of 1, 15, 16 and 200 rows", 2, None, edges, 384, 256),
        ]
        if arch == "sm_100a":
            cases.append(Case("stage 3, 2-CTA 256 x 256 tiles with TMA stores", 3,
                              course(arch, 3, tile_m=256, tile_n=256, cta_group=2),
                              (1, 0, 15, 16, 200, 300), 512, 256))  # fmt: skip
        cases += [
            Case("stage 6, odd K-tile count (3 tiles, two-tile B entries)", 6, None,
                 (5, 0, 70, 130), 384, 192),
            Case("stage 7, 2 K tiles (fewer than the ring holds), n = 640", 7, None,
                 (0, 3, 300, 17), 640, 128),
            Case("stage 5, zero-row experts around a ragged one", 5, None, (0, 0, 37, 0), 256,
                 320),
        ]  # fmt: skip
        out[arch] = cases
    return out


#: ``arch -> [Case]``: the selftest's sanitizer cases (memcheck, racecheck, synccheck).
SANITIZER = _sanitizer_cases()


# ------------------------------------------------------------------------------ launches
def run_on_grid(A, W, offsets, out, stage: int, config: GemmConfig, ctas: int):
    """``grouped_gemm(A, W, offsets, out=out, stage=stage, config=config)`` on a persistent grid
    of ``ctas`` CTAs instead of the GPU's (the multi-tile cases: few CTAs, many tiles each).

    The call's own pieces in its order (:mod:`pearl_moe.kernels.api`): validation, the
    architecture's check of the configuration, the compiled kernel for that grid (the grid is a
    compile-time constant and part of the cache key), the stage's launch. ``ctas`` must be a whole
    number of clusters and at most what the GPU holds at once (:func:`persistent_ctas`)."""
    import torch

    from ..kernels import api
    from ..kernels.host import cuda_stream, device_end_offsets
    from ..kernels.targets import persistent_ctas

    config = config.resolved()
    rows, n, k, experts, host = api.validate(A, W, offsets, out, activation=config.activation)
    arch = api.arch_of(A.device)
    problems = api.can_implement(config, stage, n, k)
    if config.arch != arch:
        problems.append(f"config is for {config.arch} but the GPU is {arch}")
    if problems:
        raise ValueError(f"{config.describe()} cannot run as {arch} stage {stage}: {problems}")
    if stage < 3:
        raise ValueError(f"stage {stage} is not persistent: its grid is one CTA per tile")
    if out.data_ptr() % config.output_alignment:
        raise ValueError(f"out must be {config.output_alignment}-byte aligned for this store")
    cluster = config.cluster_n * config.cluster_m if arch == "sm_90a" else config.cta_group
    sms = torch.cuda.get_device_properties(A.device).multi_processor_count
    most = persistent_ctas(arch, config, sms, A.device)
    if ctas % cluster or not 0 < ctas <= most:
        raise ValueError(
            f"a grid of {ctas} CTAs: must be a positive multiple of the cluster ({cluster}) and at "
            f"most the {most} this GPU holds at once"
        )
    if rows:
        fn = api.compiled_kernel(arch, stage, config, n, k, experts, ctas)
        api.stage_module(arch, stage).launch(
            fn, A, W, device_end_offsets(offsets, experts), out, host, cuda_stream(A.device)
        )
    return out


def launch(case: Case, A, W, offsets, out):
    """``case``'s call into ``out``: the public call, or :func:`run_on_grid` when the case has a
    grid of its own (then it names its stage and configuration)."""
    from ..kernels import grouped_gemm

    if case.ctas is None:
        return grouped_gemm(A, W, offsets, out=out, stage=case.stage, config=case.config,
                            activation=case.activation)  # fmt: skip
    if case.stage is None or case.config is None:
        raise ValueError(f"{case.id}: a case on a grid of its own names its stage and config")
    return run_on_grid(A, W, offsets, out, case.stage, case.config, case.ctas)


def check_case(
    case: Case,
    seed: int = 0,
    W=None,
    cu_seqlens: bool = False,
    keep_output: bool = False,
    cpu_reference: bool = False,
) -> dict:
    """Run ``case`` (unfused) into a NaN-poisoned output and compare with the fp32 reference;
    ``cu_seqlens``: pass E + 1 offsets with a leading 0; ``keep_output``: the output tensor
    under ``"output"``; ``cpu_reference``: the references on the CPU (no cuBLAS GEMM on the
    GPU, what a sanitizer run should see)."""
    import torch

    from ..bench.verify import random_inputs, run_checked

    A, W, offs = random_inputs(case.counts, case.n, case.k, W=W, seed=seed)
    host = offs.tolist()
    if cu_seqlens:
        offs = torch.cat([torch.zeros(1, dtype=torch.int32, device=offs.device), offs])
    kept = []

    def run(A, W, o, out):
        launch(case, A, W, o, out)
        kept.append(out)

    res = run_checked(run, A, W, offs, host, cpu_reference=cpu_reference)
    if keep_output:
        res["output"] = kept[0]
    return res


def check_fused(
    case: Case, seed: int = 0, keep_output: bool = False, cpu_reference: bool = False
) -> dict:
    """Run a fused ``case`` on interleaved ``[gate; up]`` weights into the middle of a NaN buffer
    (4 KB guard bands each side, 32-byte aligned) and compare ``act(gate) * up`` with the fp32
    reference; ``guard_intact`` says no write landed outside ``out``; ``cpu_reference`` as in
    :func:`check_case`."""
    import torch

    from ..bench.verify import compare, random_inputs, reference
    from ..kernels import interleave_gate_up
    from ..moe.reference import gated, grouped_mm_loop

    activation = case.activation
    n, k = case.n, case.k
    A, W, offs = random_inputs(case.counts, n, k, seed=seed)  # W is [gate; up]
    host = offs.tolist()
    rows, guard = A.shape[0], 2048
    buf = torch.full((guard + rows * (n // 2) + guard,), float("nan"), dtype=torch.bfloat16,
                     device=A.device)  # fmt: skip
    out = buf[guard : guard + rows * (n // 2)].view(rows, n // 2)
    launch(case, A, interleave_gate_up(W), offs, out)
    torch.cuda.synchronize()
    guard_ok = bool(
        torch.isnan(buf[:guard]).all() and torch.isnan(buf[guard + out.numel() :]).all()
    )
    got = out
    if cpu_reference:
        A, W, got = A.cpu(), W.cpu(), out.cpu()
    ref = gated(reference(A, W, host), activation)
    torch_out = gated(grouped_mm_loop(A, W, host), activation).to(torch.bfloat16)
    res = compare(got, ref, torch_out)
    res["guard_intact"] = guard_ok
    res["ok"] = bool(res["ok"] and guard_ok)
    if keep_output:
        res["output"] = out
    return res


def check_any(
    case: Case, seed: int = 0, keep_output: bool = False, cpu_reference: bool = False
) -> dict:
    """:func:`check_fused` for a fused case, else :func:`check_case`."""
    check = check_fused if case.activation else check_case
    return check(case, seed, keep_output=keep_output, cpu_reference=cpu_reference)


def check_guard_band(arch: str, stage: int, config, bad: list[int]) -> dict:
    """``check=False`` with offsets that break the contract (:func:`bad_offsets`): the kernels
    clamp them on the device, so a guard band of sentinel rows around ``out`` must survive."""
    import torch

    from ..bench.verify import random_inputs
    from ..kernels import grouped_gemm

    counts, n, k, _ = BAD_OFFSET_CONFIGS[arch]
    rows, guard, sentinel = sum(counts), 64, 3.0
    A, W, _ = random_inputs(counts, n, k, seed=7)
    buf = torch.full((guard + rows + guard, n), sentinel, dtype=torch.bfloat16, device=A.device)
    out = buf[guard : guard + rows]
    offs = torch.tensor(bad, dtype=torch.int32, device=A.device)
    grouped_gemm(A, W, offs, out=out, stage=stage, config=config, check=False)
    torch.cuda.synchronize()
    before = bool((buf[:guard] == sentinel).all())
    after = bool((buf[guard + rows :] == sentinel).all())
    return {"ok": before and after, "rows_before_intact": before, "rows_after_intact": after}


def check_graph_rerouting(arch: str, stage: int, config, seed: int = 3) -> dict:
    """Capture one unchecked call (``check=False``) in a CUDA graph with the first routing of
    :data:`GRAPH_ROUTINGS`, then for each routing write its offsets (as ``cu_seqlens``) and fresh
    rows into the captured tensors and replay: each replay must equal an eager call on the same
    inputs bit for bit and be right against the fp32 reference."""
    import torch

    from ..bench.verify import compare, random_inputs, reference
    from ..kernels import grouped_gemm, interleave_gate_up
    from ..moe.reference import gated, grouped_mm_loop
    from ..workloads import counts_to_offsets

    routings, n, k = GRAPH_ROUTINGS[arch]
    activation = config.activation if config is not None else None
    if activation is not None:
        n, k = FUSED_GRAPH_SHAPE[arch]
    A, W, _ = random_inputs(routings[0], n, k, seed=seed)
    Wk = interleave_gate_up(W) if activation else W
    device = A.device
    cu = torch.zeros(len(routings[0]) + 1, dtype=torch.int32, device=device)
    cols = n // 2 if activation else n
    out = torch.full((A.shape[0], cols), float("nan"), dtype=torch.bfloat16, device=device)

    def call(o):
        grouped_gemm(A, Wk, cu, out=o, stage=stage, config=config, check=False,
                     activation=activation)  # fmt: skip

    cu[1:] = torch.tensor(counts_to_offsets(routings[0]), dtype=torch.int32, device=device)
    call(out)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(out)
    results = []
    for i, counts in enumerate(routings):
        host = counts_to_offsets(counts)
        cu[1:] = torch.tensor(host, dtype=torch.int32, device=device)
        fresh, _, _ = random_inputs(counts, n, k, W=W, seed=seed + 1 + i)
        A.copy_(fresh)
        out.fill_(float("nan"))
        graph.replay()
        eager = torch.full_like(out, float("nan"))
        call(eager)
        torch.cuda.synchronize()
        ref = reference(A, W, host)
        torch_out = grouped_mm_loop(A, W, host)
        if activation:
            ref, torch_out = gated(ref, activation), gated(torch_out, activation)
        res = compare(out, ref, torch_out.to(torch.bfloat16))
        res["equals_eager"] = bool(torch.equal(out, eager))
        res["ok"] = bool(res["ok"] and res["equals_eager"])
        results.append({"counts": list(counts), **res})
    return {"ok": all(r["ok"] for r in results), "replays": results}


# ------------------------------------------------------------------------- CPU compiles
def compile_requests(arch: str = "sm_100a", gpu: str = "B200") -> dict[tuple, list[str]]:
    """Every distinct kernel the ``arch`` GPU checks compile: ``(stage, config, n, k, experts,
    ctas)`` (``ctas`` None: the whole GPU) -> the ids of the cases that launch it.

    ``config`` is resolved as the call resolves it (the default call's pick for ``gpu``, one
    accumulator for stages 1 and 2): a request of
    :func:`pearl_moe.course.kernel_report.compile_many` then compiles exactly the kernel the GPU
    launches (for the GPU's whole grid with the target's SM count)."""
    from ..workloads import make_problem

    cases: list[tuple[str, Case]] = []
    for cid, counts, n, k in EDGE_CASES[arch]:
        cases += [(f"edge-s{s}-{cid}", Case(cid, s, None, counts, n, k)) for s in STAGES]
    for model in MODELS:
        p = make_problem(model, 1, ep=8)
        cases += [
            (f"model-{model}-s{s}", Case(model, s, None, (1,) * p.experts, p.n, p.k))
            for s in STAGES
        ]
    if arch == "sm_100a":
        for name, (stage, changes, shapes) in VARIANTS_SM100.items():
            for shape in shapes:
                config = course(arch, stage, **changes)
                cases.append((f"variant-{name}-{shape}", Case(name, stage, config, (1,) * 8,
                                                              *SHAPES[shape])))  # fmt: skip
    cases += [(f"fused-{c.id}", c) for c in FUSED[arch]]
    counts, n, k, configs = BAD_OFFSET_CONFIGS[arch]
    cases += [
        (f"bad-offsets-{cid}", Case(cid, s, c, counts, n, k)) for cid, (s, c) in configs.items()
    ]
    routings, n, k = GRAPH_ROUTINGS[arch]
    for cid, (stage, config) in GRAPH_CONFIGS[arch].items():
        shape = FUSED_GRAPH_SHAPE[arch] if config is not None and config.activation else (n, k)
        cases.append((f"graph-{cid}", Case(cid, stage, config, routings[0], *shape)))
    cases += [(f"multi-tile-{c.id}", c) for c in MULTI_TILE[arch]]
    cases += [(f"smoke-{c.id}", c) for c in SMOKE[arch]]
    cases += [(f"sanitizer-{c.id}", c) for c in SANITIZER[arch]]
    cases += [(f"default-{c.id}", c) for c in default_call_cases()]
    k3 = make_problem("Kimi K3", 64, ep=8, routing="skewed", seed=5)
    for walk in WALKS:
        config = course(arch, 6, walk=walk)
        cases.append((f"walk-{walk}", Case(walk, 6, config, tuple(k3.counts), k3.n, k3.k)))
    requests: dict[tuple, list[str]] = {}
    for label, case in cases:
        stage, config = case.resolved(arch, gpu)
        if stage < 3 and config.acc_buffers != 1:
            config = config.with_(acc_buffers=1)  # what stages 1 and 2 compile with
        key = (stage, config, case.n, case.k, len(case.counts), case.ctas)
        requests.setdefault(key, []).append(label)
    return requests


def default_call_cases() -> list[Case]:
    """The default call on layers no one tuned: every held-out layer of
    :mod:`pearl_moe.bench.shape_sets` once, at 1, 16 (skewed routing) or 512 tokens in turn."""
    from ..bench import shape_sets

    layers = list(
        dict.fromkeys((c.model, c.projection, c.ep) for c in shape_sets.cases("held-out"))
    )
    cases = []
    for i, (model, projection, ep) in enumerate(layers):
        tokens, routing = ((1, "balanced"), (16, "skewed"), (512, "balanced"))[i % 3]
        layer = shape_sets.LayerCase(model, projection, ep, tokens, routing)
        p = layer.problem(seed=tokens)
        cases.append(Case(layer.id, None, None, tuple(p.counts), p.n, p.k))
    return cases
