"""The kernel configuration every part of the package reads, and its shared-memory and TMEM budget.

A :class:`GemmConfig` is plain, frozen Python data, and this module is an import leaf of the
package (it imports only :mod:`pearl_moe.hardware`). The budget (:func:`smem_budget`,
:func:`max_ring_depth`, :func:`tmem_columns`, :func:`resolve`, below the class) turns a config into
bytes of shared memory and columns of tensor memory; the kernels of each stage take the same object and lay out
their shared memory from it, so the model can be checked against what the compiler allocates.

Terms used throughout:

* ``tile_m x tile_n`` is the output tile one MMA instruction group computes. With ``cta_group=2``
  (Blackwell's ``cta_group::2``) two CTAs of a cluster share that tile: each holds ``tile_m / 2``
  rows of A and of the accumulator, and loads half of the B tile.
* ``ring_depth`` is the number of entries of the shared-memory A/B ring: how many K tiles of A
  (and their B) can be in flight. (The course says "stage" only for its kernel stages 1-7; a slot
  of the ring is a "ring entry"; the DSL's ``num_stages`` arguments receive ``ring_depth``.)
* ``b_k_tiles`` lets one B ring entry span several adjacent K tiles, so a single TMA copy fetches
  a wider contiguous run of each weight row (the blog's "B stages spanning two K tiles").
* ``epilogue`` is ``"tma_store"`` (stage through a shared-memory buffer, then a TMA store) or
  ``"direct_store"`` (registers straight to global memory; 256-bit STG on Blackwell).
* ``epi_buffers`` is how many ``tile_m x epi_tile_n`` shared-memory buffers the TMA-store epilogue
  rotates through.
* ``acc_buffers`` is how many accumulators fit in tensor memory at once (Blackwell); ``acc_slots=2``
  splits one accumulator into two halves synchronized independently, so the epilogue can hand the
  first half back while it still reads the second. On Hopper the accumulator lives in a consumer
  warpgroup's registers: ``acc_slots=2`` there means two consumer warpgroups that take alternate
  tiles, so one stores its tile while the other multiplies
  (:mod:`pearl_moe.kernels.sm90.split_accumulator`).
* ``tile_m`` below 64 (8, 16, 32; sm_90a only) keeps the 64-row wgmma but loads an A box of
  ``tile_m`` rows per ring entry; the wgmma's other rows read whatever follows in shared memory and
  are dropped. At decode an expert has a handful of rows: smaller A entries, more of them.
* ``shift_a_box`` starts each A box early enough that it ends inside A (TMA boxes that cross the
  tensor's end are slow); the epilogue then skips the rows before the tile.
* ``swap_ab`` (sm_90a) swaps the wgmma operands: a 64-row block of weights is the MMA's M and the
  tile's ``tile_m`` tokens its N (8-64), so a decode tile computes no padding rows; the
  accumulator is then weight rows x tokens, written by the direct store.
* ``walk`` is how the device tile scheduler finds a tile's expert (``"warp-parallel"``: 32 experts
  per dependent load, the default; ``"serial"``: one expert per load, as the course's first
  persistent kernel did). Both give the same tiles in the same order. Persistent CTAs (stage 3
  on) share the tiles statically: CTA ``c`` of ``C`` takes tiles ``c, c + C, c + 2C, ...``.
* ``cluster_n=2`` (sm_90a) launches clusters of two CTAs that compute neighbouring n tiles of the
  same rows: each loads half of their shared A tile and the TMA multicasts it into both CTAs'
  shared memory, so A crosses from L2 once per pair instead of twice. ``cluster_m=2`` is the same
  along M: the two CTAs compute neighbouring m tiles of one expert and share the B (weight) tile.
  One of the two at a time.
* ``n_group`` (sm_90a) orders an expert's tiles in groups of ``n_group`` n tiles: inside a group
  the n tile varies fastest, and every other group walks the m tiles backwards (a serpentine), as
  quack's scheduler does at prefill. 0 (the default) keeps the m tile fastest: CTAs side by side
  then share one n tile of the weights, but every wave of CTAs reads all of the expert's rows of
  A. With ``n_group`` a wave reads ``n_group`` weight tiles and a part of A, which the next group
  (walking back) finds in L2. On the H200 it halved the HBM reads of Qwen2-57B-A14B's gate+up
  at 4096 tokens but gained under 3% in time, and lost 3% (geomean) over the tuning set's
  prefill shapes: an option, not among the tuner's candidates (``experiments/prefill_order``;
  ``tune --group-twins``). With ``cluster_n=2`` the scheduler
  counts cluster tiles, so a group is ``2 n_group`` n tiles wide.
* ``gather_a`` (sm_90a) reads A's rows through an index: row ``r`` of the output is
  ``x[a_index[r]] @ W[e]^T`` (an MoE layer's token gather, without materializing ``x[a_index]``).
  The producer warpgroup loads A with ``cp.async`` (16 bytes a thread) instead of a TMA box; B
  stays a TMA copy (:mod:`pearl_moe.kernels.sm90.gather_a`).
* ``pdl`` (the persistent kernel, stage 3 on) launches the kernel as a programmatic dependent
  of the kernel before it on the stream: its CTAs may start while that kernel finishes, set up
  their barriers and descriptors, and wait (``griddepcontrol.wait``) for it to complete before
  they read anything it wrote; they let the next programmatic dependent launch as soon as they
  have waited. At decode, where a GEMM takes a few microseconds, the launch and the prologue
  are a visible part of it.
* ``store_bits`` is the width of each direct store (256: ``STG.E.ENL2.256`` on Blackwell; 128:
  16-byte stores, the widest Hopper has).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .hardware import B200, H200, GpuSpec, get_gpu

__all__ = [
    "ACTIVATIONS",
    "ARCHS",
    "EPILOGUES",
    "GemmConfig",
    "LEGACY_FIELD_NAMES",
    "N_GROUPS",
    "RETIRED_FIELDS",
    "RETIRED_VALUES",
    "WALKS",
    "retired_variant",
    "unknown_activation",
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

ARCHS = ("sm_100a", "sm_90a")
EPILOGUES = ("tma_store", "direct_store")
#: Values of ``GemmConfig.n_group`` (0: the m tile varies fastest inside an expert).
N_GROUPS = (0, 2, 4, 8, 16)
#: Tile-scheduler walks (:meth:`pearl_moe.kernels.scheduler.TileScheduler.seek`).
WALKS = ("warp-parallel", "serial")
#: Gated activations the epilogue can apply (``activation``): ``act(gate) * up`` of a ``[gate; up]``
#: projection whose weight rows are interleaved in blocks of 8 (:func:`pearl_moe.kernels.interleave_gate_up`).
ACTIVATIONS = ("swiglu", "geglu")

#: Field names used by measurements recorded before the course settled its vocabulary.
LEGACY_FIELD_NAMES = {
    "stages": "ring_depth",
    "acc_stages": "acc_buffers",
    "epi_stages": "epi_buffers",
    "b_stage_k_tiles": "b_k_tiles",
}

#: Fields that recorded measurements carry but the kernels no longer have, with the one value the
#: kernels still implement (the tile-schedule variants are studies: ``experiments/README.md``).
RETIRED_FIELDS = {"schedule": "static"}
#: Values of a field that recorded measurements used and the kernels no longer implement.
RETIRED_VALUES = {"walk": ("hybrid",)}


def unknown_activation(activation) -> str | None:
    """Why ``activation`` names no gated activation the epilogue can fuse (None: it names one, or
    is None). A config's field and the public call's ``activation`` argument are checked here."""
    if activation is not None and activation not in ACTIVATIONS:
        return f"activation must be None or one of {ACTIVATIONS}, got {activation!r}"
    return None


def retired_variant(fields: dict) -> str | None:
    """What retired study variant a recorded config (a dict of fields) names, or None."""
    for key, kept in RETIRED_FIELDS.items():
        if key in fields and fields[key] != kept:
            return f"{key}={fields[key]!r}"
    for key, values in RETIRED_VALUES.items():
        if fields.get(key) in values:
            return f"{key}={fields[key]!r}"
    return None


#: Widest tcgen05 / wgmma instruction along N; wider tiles issue several instructions ("atoms").
MAX_MMA_N = 256


@dataclass(frozen=True)
class GemmConfig:
    """Tile shapes, pipeline depths and epilogue choice of one grouped-GEMM kernel.

    ``ring_depth=None`` and ``acc_buffers=None`` mean "as many as fit"; :meth:`resolved` (or the budget
    model) fills them in for a given GPU. Constructing a configuration the hardware cannot run
    raises ``ValueError`` with the reason.
    """

    arch: str = "sm_100a"
    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 64
    cta_group: int = 1
    ring_depth: int | None = None
    b_k_tiles: int = 1
    epilogue: str = "tma_store"
    epi_tile_n: int = 32
    epi_buffers: int = 3
    acc_buffers: int | None = None
    acc_slots: int = 1
    store_bits: int | None = None  # direct stores: None = the widest the arch has
    shift_a_box: bool = False  # start A boxes early enough to end inside A (needs direct_store)
    swap_ab: bool = False  # sm_90a: weights as the 64-row wgmma operand, tokens as its N
    walk: str = "warp-parallel"  # how the tile scheduler finds a tile's expert (WALKS)
    activation: str | None = None  # fused act(gate) * up in the epilogue (ACTIVATIONS): n / 2 out
    cluster_n: int = 1  # sm_90a: CTAs of a cluster side by side along N, sharing A (multicast)
    cluster_m: int = 1  # sm_90a: CTAs of a cluster one above the other along M, sharing B
    gather_a: bool = False  # sm_90a: A's rows read through an index (x[a_index[r]]), by cp.async
    n_group: int = 0  # sm_90a: n tiles per group of the tile order (0: m fastest; N_GROUPS)
    pdl: bool = False  # a programmatic dependent launch (its prologue under the previous kernel)
    dtype_bytes: int = 2  # bf16 operands and output
    acc_bytes: int = 4  # fp32 accumulator

    def __post_init__(self) -> None:
        problems = list(self._problems())
        if problems:
            raise ValueError("invalid GemmConfig: " + "; ".join(problems))

    # ------------------------------------------------------------------ checks
    def _problems(self):
        if self.arch not in ARCHS:
            yield f"arch must be one of {ARCHS}, got {self.arch!r}"
            return
        if self.epilogue not in EPILOGUES:
            yield f"epilogue must be one of {EPILOGUES}, got {self.epilogue!r}"
        if self.walk not in WALKS:
            yield f"walk must be one of {WALKS}, got {self.walk!r}"
        if self.n_group not in N_GROUPS:
            yield f"n_group must be one of {N_GROUPS}, got {self.n_group!r}"
        if self.tile_k <= 0 or self.tile_k % 16:
            yield f"tile_k must be a positive multiple of 16 (the bf16 MMA K), got {self.tile_k}"
        if self.ring_depth is not None and self.ring_depth < 2:
            yield f"ring_depth must be at least 2 to overlap loads with math, got {self.ring_depth}"
        if self.b_k_tiles not in (1, 2, 4):
            yield f"b_k_tiles must be 1, 2 or 4, got {self.b_k_tiles}"
        if self.epilogue == "tma_store":
            if self.epi_tile_n <= 0 or self.tile_n % self.epi_tile_n:
                yield f"epi_tile_n={self.epi_tile_n} must divide tile_n={self.tile_n}"
            if self.epi_buffers < 1:
                yield f"epi_buffers must be at least 1, got {self.epi_buffers}"
        if self.acc_slots not in (1, 2):
            yield f"acc_slots must be 1 or 2, got {self.acc_slots}"
        if self.activation is not None:
            if problem := unknown_activation(self.activation):
                yield problem
            if self.epilogue != "direct_store":
                yield (
                    "the fused activation pairs gate and up columns in the registers: it needs "
                    "epilogue='direct_store'"
                )
        if self.shift_a_box and self.epilogue != "direct_store":
            yield (
                "shift_a_box moves the A box up to the tensor's end, so the epilogue must skip the "
                "rows before the tile: it needs epilogue='direct_store'"
            )
        if self.store_bits is not None:
            if self.epilogue != "direct_store":
                yield "store_bits is the width of direct stores: it needs epilogue='direct_store'"
            widest = 256 if self.arch == "sm_100a" else 128
            if self.store_bits not in (128, 256) or self.store_bits > widest:
                yield (
                    f"store_bits must be 128 or 256 and at most {widest} on {self.arch} "
                    f"(its widest global store), got {self.store_bits}"
                )
        if self.arch == "sm_100a":
            yield from self._sm100_problems()
        else:
            yield from self._sm90_problems()

    def _sm100_problems(self):
        if self.cluster_n != 1 or self.cluster_m != 1:
            yield (
                "cluster_n / cluster_m are implemented by the sm_90a kernels only (sm_100a pairs "
                "CTAs by cta_group)"
            )
        if self.shift_a_box:
            yield "shift_a_box is implemented by the sm_90a kernels only"
        if self.gather_a:
            yield "gather_a is implemented by the sm_90a kernels only"
        if self.n_group:
            yield "n_group is implemented by the sm_90a kernels only"
        if self.swap_ab:
            yield "swap_ab is implemented by the sm_90a kernels only"
        if self.cta_group not in (1, 2):
            yield f"cta_group must be 1 or 2, got {self.cta_group}"
            return
        valid_m = (64, 128) if self.cta_group == 1 else (128, 256)
        if self.tile_m not in valid_m:
            yield (
                f"tcgen05.mma with cta_group::{self.cta_group} has M in {valid_m}; "
                f"tile_m={self.tile_m} does not exist"
                + (" (64-row tiles need 1-CTA mode)" if self.tile_m == 64 else "")
            )
        step = 8 * self.cta_group
        if self.tile_n <= MAX_MMA_N:
            if self.tile_n < step or self.tile_n % step:
                yield (
                    f"tcgen05.mma with cta_group::{self.cta_group} has N from {step} to "
                    f"{MAX_MMA_N} in steps of {step}; tile_n={self.tile_n} does not exist"
                )
        elif self.tile_n % MAX_MMA_N:
            yield f"tile_n={self.tile_n} above {MAX_MMA_N} must be a multiple of {MAX_MMA_N}"
        if self.acc_slots == 2:
            if self.mma_atoms_n != 2:
                yield "acc_slots=2 splits the accumulator along its two N atoms: tile_n must be 512"
            if self.acc_buffers not in (None, 1):
                yield "acc_slots=2 is for a single accumulator stage (acc_buffers=1)"
        if self.acc_buffers is not None:
            if self.acc_buffers < 1:
                yield f"acc_buffers must be at least 1, got {self.acc_buffers}"
            elif self.tmem_columns_for(self.acc_buffers) > 512:
                yield (
                    f"{self.acc_buffers} accumulator stage(s) of {self.tile_n} fp32 columns need "
                    f"{self.acc_buffers * self.tile_n} TMEM columns; an SM has 512"
                )
        elif self.tile_n > 512:
            yield f"a {self.tile_n}-column fp32 accumulator exceeds TMEM's 512 columns"

    def _sm90_problems(self):
        if self.cta_group != 1:
            yield "cta_group=2 is a Blackwell (sm_100a) feature; Hopper wgmma is 1-CTA"
        if self.cluster_n not in (1, 2) or self.cluster_m not in (1, 2):
            yield f"cluster_n and cluster_m must be 1 or 2, got {self.cluster_n}, {self.cluster_m}"
        elif self.cluster_n * self.cluster_m == 4:
            yield "a cluster is two CTAs along N (cluster_n=2) or along M (cluster_m=2), not both"
        elif self.cluster_n * self.cluster_m == 2:
            which = "cluster_n" if self.cluster_n == 2 else "cluster_m"
            if self.tile_m < 64 or self.swap_ab:
                yield (
                    f"{which}=2 is for prefill tiles of tile_m >= 64 rows (not with tiles of "
                    "fewer rows or swap_ab, which are decode-sized)"
                )
            if self.b_k_tiles != 1:
                yield f"{which}=2 multicasts through the A/B ring: not with wide B entries"
        if self.tile_m == 192:
            if self.acc_slots != 2 or self.tile_n != 128:
                yield (
                    "a 192-row tile is a split-accumulator warpgroup's 192 x 128 (acc_slots=2: three m64 "
                    "blocks, 192 accumulator registers a thread; the width its GPU tests cover); "
                    f"got acc_slots={self.acc_slots}, tile_n={self.tile_n}"
                )
            if (
                self.b_k_tiles != 1 or self.gather_a or self.activation or self.cluster_m != 1
                or self.n_group or self.walk != "warp-parallel"
            ):  # fmt: skip
                yield (
                    "a 192-row tile runs without wide B entries, the A gather, the fused "
                    "activation, clusters along M, the grouped tile order and the serial walk "
                    "(none of them tested with it)"
                )
        elif self.tile_m not in (8, 16, 32, 64, 128, 256):
            yield (
                f"sm_90a tile_m must be 64, 128 or 256 (64 rows per warpgroup), 192 (a split-"
                f"accumulator warpgroup's three m64 blocks), or 8, 16 or 32 (a 64-row wgmma over a "
                f"smaller A box), got {self.tile_m}"
            )
        if self.tile_m < 64 and self.epilogue != "direct_store":
            yield (
                f"a {self.tile_m}-row tile computes 64 accumulator rows and keeps {self.tile_m}: "
                "only the direct store can drop the others (epilogue='direct_store')"
            )
        if self.tile_n < 8 or self.tile_n > MAX_MMA_N or self.tile_n % 8:
            yield f"wgmma has N from 8 to {MAX_MMA_N} in steps of 8; tile_n={self.tile_n}"
        if self.acc_buffers not in (None, 1):
            yield "accumulator buffers are a tensor-memory feature of sm_100a"
        if self.swap_ab:
            if self.epilogue != "direct_store":
                yield (
                    "swap_ab leaves the accumulator transposed (weight rows x tokens): only the "
                    "direct store writes it (epilogue='direct_store')"
                )
            if self.tile_m > 64:
                yield f"swap_ab makes tile_m the wgmma's N: at most 64 here, got {self.tile_m}"
            if self.tile_n % 64:
                yield (f"swap_ab makes tile_n the wgmma's M: a multiple of 64, got {self.tile_n}")
            if self.acc_slots != 1:
                yield "swap_ab has one consumer warpgroup (acc_slots=1)"
            if self.activation is not None:
                yield "the fused activation needs the tokens as rows: not with swap_ab"
        if self.gather_a:
            yield from self._gather_a_problems()
        if self.acc_slots == 2 and self.tile_m * self.tile_n > 128 * 192:
            yield (
                "on sm_90a acc_slots=2 means two consumer warpgroups that take alternate tiles, "
                "each holding a whole tile's fp32 accumulator in its registers: "
                f"tile_m x tile_n / 128 threads must be at most 192 registers (of the 232 a "
                f"consumer thread gets), got {self.tile_m} x {self.tile_n} "
                f"({self.tile_m * self.tile_n // 128})"
            )

    def _gather_a_problems(self):
        """What the cp.async gather of A (sm_90a) does not combine with."""
        if self.tile_m < 64:
            yield (
                "gather_a loads whole tile_m-row A entries with the producer warpgroup's 128 "
                f"threads (16 rows a pass): tile_m must be at least 64, got {self.tile_m}"
            )
        if self.swap_ab:
            yield "gather_a keeps the tokens as the wgmma's M: not with swap_ab"
        if self.cluster_n != 1 or self.cluster_m != 1:
            yield "gather_a loads A by cp.async, which cannot multicast: cluster_n = cluster_m = 1"
        if self.b_k_tiles != 1:
            yield "gather_a fills one A/B ring entry per K tile: b_k_tiles must be 1"
        if self.shift_a_box:
            yield "gather_a has no A box to shift (rows come through the index): not shift_a_box"
        if self.tile_k != 64:
            yield (
                "gather_a's producer keeps one row index per 16-row pass of a 64-deep K tile "
                f"(its register budget): tile_k must be 64, got {self.tile_k}"
            )

    # ------------------------------------------------------------------ derived
    @property
    def direct_store_bits(self) -> int:
        """Width of one direct store: ``store_bits``, or the widest the arch has."""
        return self.store_bits or (256 if self.arch == "sm_100a" else 128)

    @property
    def output_alignment(self) -> int:
        """Bytes the output's data pointer must be aligned to: one direct store's width (32 for
        256-bit stores), else 16 (128-bit stores and the TMA store's global address)."""
        if self.epilogue == "direct_store":
            return max(16, self.direct_store_bits // 8)
        return 16

    def output_columns(self, n: int) -> int:
        """Columns of ``out`` for a weight of ``n`` rows: ``n``, or ``n / 2`` with a fused gated
        activation (each pair of gate and up columns becomes one output column)."""
        return n // 2 if self.activation is not None else n

    @property
    def cta_tile_m(self) -> int:
        """Rows of A and of the accumulator that one CTA holds."""
        return self.tile_m // self.cta_group

    @property
    def cta_tile_n(self) -> int:
        """Columns of B that one CTA loads (2-CTA MMAs split B across the pair)."""
        return self.tile_n // self.cta_group

    @property
    def mma_atoms_n(self) -> int:
        """How many MMA instructions along N one K block issues (512-wide tiles use two)."""
        return max(1, self.tile_n // MAX_MMA_N) if self.tile_n > MAX_MMA_N else 1

    @property
    def b_ring_depth(self) -> int | None:
        """B buffers in the ring; each spans ``b_k_tiles`` K tiles."""
        if self.ring_depth is None:
            return None
        return -(-self.ring_depth // self.b_k_tiles)

    @property
    def a_entry_bytes(self) -> int:
        return self.cta_tile_m * self.tile_k * self.dtype_bytes

    @property
    def b_entry_bytes(self) -> int:
        return self.cta_tile_n * self.tile_k * self.b_k_tiles * self.dtype_bytes

    @property
    def b_entry_row_bytes(self) -> int:
        """Contiguous bytes of one weight row that one B ring entry holds: 128 for one K tile, 256
        for an entry of two. The TMA still fetches them in boxes of 128-byte rows (the 128-byte
        swizzle caps a box's row), so a two-K-tile entry is two boxes under one barrier."""
        return self.tile_k * self.b_k_tiles * self.dtype_bytes

    @property
    def epilogue_bytes(self) -> int:
        if self.epilogue == "direct_store":
            return 0
        return self.cta_tile_m * self.epi_tile_n * self.dtype_bytes * self.epi_buffers

    def tmem_columns_for(self, acc_buffers: int) -> int:
        """TMEM columns an allocation for ``acc_buffers`` accumulators takes (power of two >= 32)."""
        used = self.tile_n * self.acc_bytes // 4 * acc_buffers
        cols = 32
        while cols < used:
            cols *= 2
        return cols

    def resolved(self, gpu=None) -> GemmConfig:
        """This config with ``ring_depth`` and ``acc_buffers`` filled in for ``gpu`` (default per
        arch): the deepest ring and the most accumulators the budget model fits."""
        return resolve(self, gpu)

    @classmethod
    def from_dict(cls, fields: dict) -> GemmConfig:
        """A config from a dict of fields (e.g. a recorded measurement); older field names such as
        ``stages`` are accepted (:data:`LEGACY_FIELD_NAMES`), and a retired field
        (:data:`RETIRED_FIELDS`) is dropped when it holds the value the kernels still implement; a
        retired study variant (:func:`retired_variant`) is a ``ValueError``."""
        retired = retired_variant(fields)
        if retired:
            raise ValueError(
                f"{retired} is a retired study variant, not a kernel of this package "
                "(see experiments/README.md)"
            )
        kept = {
            LEGACY_FIELD_NAMES.get(key, key): value
            for key, value in fields.items()
            if key not in RETIRED_FIELDS
        }
        return cls(**kept)

    def with_(self, **changes) -> GemmConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    @classmethod
    def from_label(cls, label: str) -> GemmConfig:
        """The config a :meth:`describe` label names (e.g. a tuning table's candidate,
        ``sm_90a 16x128x64 1cta r12 B2 shiftA direct``); the epilogue tile and its buffers, which
        labels leave out, take their defaults. ``ValueError`` on a label it cannot read."""
        words = label.split()
        if len(words) < 5:
            raise ValueError(f"not a config label: {label!r}")
        try:
            arch, tile, cta, ring, *rest = words
            tile_m, tile_n, tile_k = (int(v) for v in tile.split("x"))
            fields: dict = dict(
                arch=arch, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k,
                cta_group=int(cta.removesuffix("cta")),
                ring_depth=None if ring == "r*" else int(ring.removeprefix("r")),
            )  # fmt: skip
            for word in rest:
                if word.startswith("B") and word[1:].isdigit():
                    fields["b_k_tiles"] = int(word[1:])
                elif word == "shiftA":
                    fields["shift_a_box"] = True
                elif word == "swapAB":
                    fields["swap_ab"] = True
                elif word == "gatherA":
                    fields["gather_a"] = True
                elif word.endswith("walk"):
                    fields["walk"] = word.removesuffix("walk")
                elif word.startswith("clusterN") and word[8:].isdigit():
                    fields["cluster_n"] = int(word[8:])
                elif word.startswith("clusterM") and word[8:].isdigit():
                    fields["cluster_m"] = int(word[8:])
                elif word.startswith("ng") and word[2:].isdigit():
                    fields["n_group"] = int(word[2:])
                elif word == "pdl":
                    fields["pdl"] = True
                elif word.startswith("direct"):
                    fields["epilogue"] = "direct_store"
                    fields["store_bits"] = int(word[6:]) if word[6:] else None
                elif word == "tma":
                    fields["epilogue"] = "tma_store"
                elif word.startswith("acc"):
                    fields["acc_buffers"] = None if word == "acc*" else int(word[3:])
                elif word in ("split", "pingpong"):  # describe()'s word for acc_slots=2
                    fields["acc_slots"] = 2
                elif word in ACTIVATIONS:
                    fields["activation"] = word
                else:
                    raise ValueError(f"unknown word {word!r}")
        except ValueError as err:
            raise ValueError(f"not a config label: {label!r} ({err})") from None
        return cls(**fields)

    def describe(self) -> str:
        """Short human-readable label, e.g. ``sm_100a 128x128x64 1cta r7 B2 direct``
        (``r7``: a ring of 7 entries; ``B2``: B entries of two K tiles)."""
        parts = [
            self.arch,
            f"{self.tile_m}x{self.tile_n}x{self.tile_k}",
            f"{self.cta_group}cta",
            f"r{self.ring_depth}" if self.ring_depth is not None else "r*",
        ]
        if self.b_k_tiles > 1:
            parts.append(f"B{self.b_k_tiles}")
        if self.shift_a_box:
            parts.append("shiftA")
        if self.swap_ab:
            parts.append("swapAB")
        if self.gather_a:
            parts.append("gatherA")
        if self.walk != "warp-parallel":
            parts.append(f"{self.walk}walk")
        if self.cluster_n != 1:
            parts.append(f"clusterN{self.cluster_n}")
        if self.cluster_m != 1:
            parts.append(f"clusterM{self.cluster_m}")
        if self.n_group:
            parts.append(f"ng{self.n_group}")
        if self.pdl:
            parts.append("pdl")
        if self.epilogue == "direct_store":
            parts.append("direct" + (f"{self.store_bits}" if self.store_bits else ""))
        else:
            parts.append("tma")
        if self.activation is not None:
            parts.append(self.activation)
        if self.arch == "sm_100a":
            parts.append(f"acc{self.acc_buffers if self.acc_buffers is not None else '*'}")
            if self.acc_slots == 2:
                parts.append("split")
        elif self.acc_slots == 2:
            parts.append("pingpong")  # sm_90a acc_slots=2 in the recorded tables and runs
        return " ".join(parts)


# -------------------------------------------------------------------------------- budget
# Shared-memory and tensor-memory budgets of a :class:`~pearl_moe.config.GemmConfig`.
#
# Per CTA, shared memory holds::
#
#     A ring      ring_depth x (tile_m / cta_group) x tile_k x 2 B
#     B ring      b_ring_depth x (tile_n / cta_group) x tile_k x b_k_tiles x 2 B
#     epilogue    (tile_m / cta_group) x epi_tile_n x 2 B x epi_buffers   (0 for direct stores)
#     barriers    one 8-byte mbarrier per full/empty signal of every ring entry, plus 64 B of
#                 bookkeeping (sm_100a: the 2-CTA TMEM-release mbarrier, the TMEM base address and
#                 padding; sm_90a: 16 reserved words). The tile scheduler keeps its state in
#                 registers, not here.
#
# Worked numbers from the blog (tile 128 x 128 x 64, bf16, 1-CTA): an A ring entry is 128 x 64 x 2 = 16 KB
# and a B entry 16 KB, so one ring entry is 32 KB. With the 24 KB epilogue buffer six entries fit in
# 227 KB (6 x 32 + 24 = 216 KB); dropping the buffer makes room for a seventh (7 x 32 = 224 KB).
# With 64-row tiles an A entry is 8 KB. A B entry spanning two K tiles is 32 KB and each TMA copy
# reads 256 contiguous bytes per weight row instead of 128.
#
# Tensor memory (sm_100a) holds the fp32 accumulators: 128 lanes x 512 columns of 32 bits per SM.
# A 128 x 256 accumulator takes 256 columns, so two fit (the epilogue drains one while the MMA fills
# the other); a 128 x 512 accumulator takes all 512, leaving one buffer.
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
