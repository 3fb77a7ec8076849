"""The Blackwell (sm_100a) pieces every kernel stage shares, as ``sm90/common.py`` is for Hopper.

:class:`KernelBase` turns a :class:`~pearl_moe.config.GemmConfig` into what a tcgen05 GEMM
needs, one method per piece, and the stage kernels call those pieces from their own role code::

    TMA producer warp --(A/B ring, `ring_depth` entries, full/empty mbarriers)--> MMA warp
    MMA warp          --(accumulator in TMEM, full/empty mbarriers)------------> epilogue warps
    epilogue warps    --(TMEM -> registers -> SMEM buffer, `epi_buffers` deep)--> TMA store

* host side (traced in ``__call__``): ``_make_tiled_mma``, ``_setup`` (SMEM layouts, TMA bytes per
  ring entry), ``_make_tma_atoms``, ``_make_tma_store_atom``, ``shared_storage``;
* device side: ``allocate_smem`` (data buffers, then the barrier block, so the total equals the
  budget model), ``make_pipelines``, ``mma_fragments``, ``tma_partition_ab``, ``load_k_tiles``,
  ``mma_k_loop``, ``epilogue_begin``, ``epilogue_tile``, ``epilogue_end``;
* checks: :func:`can_implement` (what ``grouped_gemm`` asks before it compiles anything),
  :func:`resolve_for_stage`.

Stage 1 (:mod:`.stage1_gemm`) adds the one-tile-per-CTA kernel around these pieces, stage 2 the
grouped grid, stage 3 the persistent tile loops; stages 4-7 are options of the stage-3 kernel.
"""

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.memory import SmemAllocator, TmemAllocator
from cutlass.utils.gemm.sm100 import transform_partitioned_tensor_layout

from ...config import MAX_MMA_N, GemmConfig, tmem_columns
from ..rules import shared_problems

__all__ = [
    "BOOKKEEPING_WORDS",
    "EPILOGUE_WARPS",
    "MMA_WARP",
    "KernelBase",
    "TMA_WARP",
    "can_implement",
    "one_accumulator",
    "resolve_for_stage",
]

#: Every warp role of the sm_100a kernels, in warp-index order.
EPILOGUE_WARPS = (0, 1, 2, 3)
MMA_WARP = 4
TMA_WARP = 5
THREADS_PER_CTA = 32 * (len(EPILOGUE_WARPS) + 2)

#: Named barriers (id 0 is __syncthreads).
EPILOGUE_SYNC_BARRIER = 1
TMEM_ALLOC_BARRIER = 2

#: Bytes of bookkeeping after the mbarriers: the 2-CTA TMEM-release mbarrier (8 B), the TMEM base
#: address (4 B) and padding to the 64 B that ``pearl_moe.config.BOOKKEEPING_BYTES`` models.
BOOKKEEPING_WORDS = 13  # 32-bit padding words after the 12 bytes above: 12 + 13 x 4 = 64


def _kernel_problems(config: GemmConfig) -> list[str]:
    """Configurations ``GemmConfig`` accepts (the hardware has the instruction) but these kernels
    cannot build: each would abort the compiler or read TMEM it must not."""
    problems = []
    # B rows one CTA holds per MMA atom. tcgen05.mma itself takes N % 8 == 0 (1-CTA) or
    # N % 16 == 0 (2-CTA), but the K-major 128B-swizzled SMEM layout of B that CuTe builds
    # (make_smem_layout_b) aborts the compiler (SIGABRT, DSL 4.8.1) for 24, 40, 56, ... rows: it
    # takes 8 rows or a multiple of 16. So 128 x 24 and 64 x 24 (1-CTA) and 256 x 48 (2-CTA:
    # 24 rows per CTA) are out.
    b_rows = min(config.tile_n, MAX_MMA_N) // config.cta_group
    if b_rows != 8 and b_rows % 16:
        problems.append(
            f"tile_n={config.tile_n} gives each CTA {b_rows} rows of B per MMA "
            f"(tile_n / cta_group); the swizzled SMEM layout of B needs 8 or a multiple of 16 "
            f"rows (other sizes abort the CuTe DSL compiler)"
        )
    # 64 rows per CTA (2-CTA tile_m=128) with two 256-column atoms and split slots: the folded
    # epilogue of both atoms compiles with register spills (LDL/STL in the SASS, DSL 4.8.1).
    if config.cta_group == 2 and config.cta_tile_m == 64 and config.tile_n > MAX_MMA_N:
        if config.acc_slots == 2:
            problems.append(
                "a 2-CTA 128 x 512 tile with split accumulator slots (64 rows per CTA, two "
                "folded atoms) spills registers in the epilogue; use tile_m=256 (the post's "
                "256 x 512 tile) or one slot"
            )
    # Every SMEM buffer starts 1024-byte aligned (the 128B swizzle repeats every 1024 B); an A or
    # B ring entry of another size leaves padding between the buffers that the budget model does
    # not count (and 8-row B tiles of 96-byte K rows, tile_k=48, abort the compiler).
    for operand, entry in (("A", config.a_entry_bytes), ("B", config.b_entry_bytes)):
        if entry % 1024:
            problems.append(
                f"an {operand} ring entry of {entry} B is not a multiple of 1024 B (each SMEM "
                f"buffer is 1024-byte aligned for the swizzle): use a larger tile_k or "
                f"{'tile_m' if operand == 'A' else 'tile_n'}"
            )
    folded = config.cta_group == 2 and config.cta_tile_m == 64  # 2 x 2 epilogue warps
    epi_n = config.epi_tile_n
    if folded and (epi_n <= 0 or epi_n % 16):
        problems.append(
            f"2-CTA tile_m=128 drains each epi_tile_n slice as two halves of epi_tile_n / 2 "
            f"columns (one per pair of warps, see KernelBase._epilogue_tile); "
            f"epi_tile_n={epi_n} must be a multiple of 16"
        )
    if config.epilogue == "direct_store":
        problems += _direct_store_problems(config)
    if config.acc_slots == 2 and config.b_k_tiles != 1:
        problems.append(
            "acc_slots=2 holds A/B ring entries across two atoms; with b_k_tiles > 1 the "
            "B entries live in their own ring, which the split mainloop does not walk"
        )
    return problems


def _direct_store_problems(config: GemmConfig) -> list[str]:
    """The direct-store epilogue drains ``epi_tile_n`` columns per step; each thread gets a run
    of one row (``epi_tile_n``, or half of it with 16-lane loads or 2 x 2 warps) that must split
    into whole stores."""
    problems = []
    epi_n = config.epi_tile_n
    if epi_n <= 0 or config.tile_n % epi_n or epi_n & (epi_n - 1):
        problems.append(
            f"epi_tile_n={epi_n} must be a power of two that divides tile_n={config.tile_n} "
            f"(the direct store drains TMEM in epi_tile_n-column steps; tcgen05.ld repeats by "
            f"powers of two)"
        )
        return problems
    run = thread_run(config)
    vec = config.direct_store_bits // (8 * config.dtype_bytes)
    if config.activation is not None:
        if run % 16 or run > 64:
            problems.append(
                f"the fused activation pairs 8 gate and 8 up columns inside one thread's run of "
                f"{run} columns (epi_tile_n={epi_n}): the run must be a multiple of 16, and more "
                f"than 64 fp32 per step would not stay in registers"
            )
        return problems
    if run % vec or run > 64:
        problems.append(
            f"each thread stores {run} consecutive outputs of its row per epi_tile_n={epi_n} "
            f"step; {config.direct_store_bits}-bit stores need a multiple of {vec}, and more "
            f"than 64 fp32 per step would not stay in registers"
        )
    return problems


def thread_run(config: GemmConfig) -> int:
    """Consecutive accumulator columns of one row a thread drains per epilogue step:
    ``epi_tile_n``, or half of it with 64 rows per CTA (16-lane loads in 1-CTA mode, 2 x 2 warps
    in 2-CTA mode)."""
    return config.epi_tile_n // 2 if config.cta_tile_m == 64 else config.epi_tile_n


def fused_run_outputs(config: GemmConfig) -> int:
    """Outputs a thread stores per epilogue step with the fused activation: half its run."""
    return thread_run(config) // 2


def fused_store_elems(config: GemmConfig) -> int:
    """bf16 outputs per store of the fused activation's epilogue: a thread's run of outputs, at
    most one store of ``direct_store_bits``."""
    return min(fused_run_outputs(config), config.direct_store_bits // (8 * config.dtype_bytes))


def resolve_for_stage(config: GemmConfig, stage: int) -> GemmConfig:
    """``config`` as stage ``stage`` compiles it, resolved for the B200: stages 1 and 2 hold
    exactly one accumulator (:func:`one_accumulator`); stage 3 keeps what the config asks for (or
    as many as fit). ``ring_depth=None`` becomes the deepest ring that fits. ``ValueError`` with
    :func:`can_implement`'s reasons if the stage cannot run it."""
    problems = can_implement(config, stage)
    if problems:
        raise ValueError(
            f"{config.describe()} cannot run as sm_100a stage {stage}: " + "; ".join(problems)
        )
    return (one_accumulator(config) if stage < 3 else config).resolved()


def one_accumulator(config: GemmConfig) -> GemmConfig:
    """``config`` with ``acc_buffers=1``, the only value stages 1 and 2 take (each CTA computes
    one tile). :func:`pearl_moe.kernels.grouped_gemm` resolves every config first, and resolving
    turns ``acc_buffers=None`` into "as many as fit" (2 at 128 x 128), a stage-3 knob: the
    stage-1 and stage-2 kernels pin it back."""
    return config if config.acc_buffers == 1 else config.with_(acc_buffers=1)


def can_implement(
    config: GemmConfig, stage: int, n: int | None = None, k: int | None = None
) -> list[str]:
    """Reasons sm_100a stage ``stage`` cannot run ``config`` at ``(n, k)`` (empty list: it can;
    ``n`` and ``k`` None: at any shape). The rules every architecture shares
    (:func:`pearl_moe.kernels.rules.shared_problems`), then those of these kernels. Stages 1 and
    2 are checked with the one accumulator they compile with (:func:`one_accumulator`)."""
    if stage < 3 and config.arch == "sm_100a":
        config = one_accumulator(config)
    problems = shared_problems("sm_100a", config, stage, n, k)
    if config.arch != "sm_100a":
        return problems  # the rules below read sm_100a fields
    problems += _kernel_problems(config)
    if n is None or n % 8:
        return problems  # no shape, or one TMA cannot address (a shared problem)
    if config.activation is not None:
        outputs = fused_run_outputs(config)
        if (n // 2) % outputs:
            problems.append(
                f"n={n}: a thread stores its run of {outputs} fused outputs whole (guarded by its "
                f"first column), so n / 2 must be a multiple of {outputs} (epi_tile_n="
                f"{config.epi_tile_n}; a smaller epi_tile_n makes shorter runs)"
            )
    elif config.epilogue == "direct_store" and n % (config.direct_store_bits // 16):
        problems.append(
            f"n={n}: {config.direct_store_bits}-bit direct stores need every output row to start "
            f"{config.direct_store_bits // 8}-byte aligned, i.e. n % "
            f"{config.direct_store_bits // 16} == 0 (store_bits=128 needs n % 8 == 0)"
        )
    return problems


class KernelBase:
    """Configuration and the shared pieces of every sm_100a kernel stage (see the module docstring).

    ``__init__`` holds only plain-Python configuration: the tile shapes, ring depths, warp roles and
    TMEM columns, all derived from the config after :func:`resolve_for_stage` has checked it for
    the kernel's ``stage``. Operand types are known only when ``__call__`` traces (``_setup``).
    """

    stage = 1

    def __init__(self, config: GemmConfig):
        config = resolve_for_stage(config, self.stage)
        self.config = config
        self.use_2cta = config.cta_group == 2
        self.cta_group = tcgen05.CtaGroup.TWO if self.use_2cta else tcgen05.CtaGroup.ONE
        # The MMA tile (both CTAs of a pair together) and the part one CTA owns.
        self.mma_tiler_mnk = (config.tile_m, config.tile_n, config.tile_k)
        self.cta_tile_mnk = (config.cta_tile_m, config.tile_n, config.tile_k)
        self.cluster_shape_mn = (config.cta_group, 1)
        self.ring_depth = config.ring_depth
        # B ring entries span `b_k_tiles` K tiles (stage 6); with 1 the B ring is the A ring.
        self.b_k_tiles = config.b_k_tiles
        self.wide_b = config.b_k_tiles > 1
        self.b_ring_depth = config.b_ring_depth
        self.b_tiler_mnk = (config.tile_m, config.tile_n, config.tile_k * config.b_k_tiles)
        self.num_acc_buffers = config.acc_buffers
        # accumulator pipeline entries: one per buffer and slot (stage 7 splits a buffer in two)
        self.num_acc_stages = config.acc_buffers * config.acc_slots
        self.direct_store = config.epilogue == "direct_store"
        self.activation = config.activation  # fused act(gate) * up in the direct store, or None
        # output columns per tile: tile_n, or tile_n / 2 with the fused activation
        self.out_tile_n = config.output_columns(config.tile_n)
        self.num_epi_buffers = config.epi_buffers
        self.epi_tile_mn = (config.cta_tile_m, config.epi_tile_n)
        self.num_tmem_cols = tmem_columns(config)
        self.acc_dtype = cutlass.Float32
        self.epilogue_warps = EPILOGUE_WARPS
        self.mma_warp = MMA_WARP
        self.tma_warp = TMA_WARP
        self.threads_per_cta = THREADS_PER_CTA

    # ------------------------------------------------------------------ setup (host, traced)
    def _make_tiled_mma(self):
        # One MMA instruction is at most 256 wide; a 512-wide tile issues two of them ("atoms")
        # per K block, as MMA_N = 2 in the partitioned shapes.
        return sm100_utils.make_trivial_tiled_mma(
            self.ab_dtype,  # A
            self.ab_dtype,  # B
            cute.nvgpu.OperandMajorMode.K,
            cute.nvgpu.OperandMajorMode.K,
            self.acc_dtype,
            self.cta_group,
            (self.mma_tiler_mnk[0], min(self.mma_tiler_mnk[1], MAX_MMA_N)),
        )

    def _setup(self, a_dtype, c_dtype, c_layout):
        """Derive everything that depends on the operand types: MMA, SMEM layouts, epilogue tile."""
        self.ab_dtype = a_dtype
        self.c_dtype = c_dtype
        self.c_layout = c_layout
        tiled_mma = self._make_tiled_mma()
        self.cluster_layout_vmnk = cute.tiled_divide(
            cute.make_layout((*self.cluster_shape_mn, 1)), (tiled_mma.thr_id.shape,)
        )
        # (MMA, MMA_M, MMA_K, STAGE): `ring_depth` K tiles of A, swizzled for UMMA
        self.a_smem_layout = sm100_utils.make_smem_layout_a(
            tiled_mma, self.mma_tiler_mnk, a_dtype, self.ring_depth
        )
        # (MMA, MMA_N, MMA_K, STAGE): one B entry holds `b_k_tiles` K tiles (MMA_K grows with it)
        self.b_smem_layout = sm100_utils.make_smem_layout_b(
            tiled_mma, self.b_tiler_mnk, a_dtype, self.b_ring_depth
        )
        # (EPI_M, EPI_N, EPI_STAGE): the bf16 staging buffer the TMA store reads (none for direct
        # stores, whose bytes went to the ring)
        self.c_smem_layout = None
        if not self.direct_store:
            self.c_smem_layout = sm100_utils.make_smem_layout_epi(
                c_dtype, c_layout, self._epilogue_tile(), self.num_epi_buffers
            )
        a_bytes = cute.size_in_bytes(
            a_dtype, cute.slice_(self.a_smem_layout, (None, None, None, 0))
        )
        b_bytes = cute.size_in_bytes(
            a_dtype, cute.slice_(self.b_smem_layout, (None, None, None, 0))
        )
        # Bytes one ring entry's "full" barrier waits for (both CTAs' halves in 2-CTA mode). With
        # wide B entries the B ring has its own barriers and byte count.
        self.num_a_load_bytes = a_bytes * self.config.cta_group
        self.num_b_load_bytes = b_bytes * self.config.cta_group
        self.num_tma_load_bytes = self.num_a_load_bytes
        if not self.wide_b:
            self.num_tma_load_bytes = (a_bytes + b_bytes) * self.config.cta_group
        self._check_tmem_columns(tiled_mma)
        return tiled_mma

    def _epilogue_tile(self):
        """The (rows, columns) one epilogue step drains from TMEM: ``(cta_tile_m, epi_tile_n)``.

        Built where it is used (host or device code: a layout made on the host cannot be used
        inside a kernel). Each of the four epilogue warps may read only its own 32-lane quarter of TMEM. With 64 rows
        per CTA in 2-CTA mode (``tile_m=128``, ``cta_group=2``) the accumulator is folded: rows
        0-63 of columns ``[0, n/2)`` sit in lanes 0-63 and those of ``[n/2, n)`` in lanes 64-127. A
        plain ``64 x epi_tile_n`` step lies in one column half, so warps 0 and 2 (1 and 3) read
        the same 32 lanes, half of the time outside their own quarter (and write the same SMEM).
        So, as CUTLASS does for this shape (``compute_epilogue_tile_shape``), a step
        takes ``epi_tile_n / 2`` columns from each half: ``(64, (epi_tile_n/2, 2):(1, n/2))``, and
        the TMEM load tiles the warps 2 x 2 (two row halves x two column halves).

        The fold is per MMA atom: a 512-wide tile is two 256-column atoms, each folded at its own
        128 columns, so the second half of a step starts ``min(tile_n, 256) / 2`` columns on.
        (Folding at ``tile_n / 2`` would put both halves of a step in the same 64 lanes, and with
        split slots release slot 0 while later subtiles still read atom 0's columns.)
        """
        if self.use_2cta and self.config.cta_tile_m == 64:
            half = self.config.epi_tile_n // 2
            fold = min(self.config.tile_n, MAX_MMA_N) // 2
            cols = cute.make_layout((half, 2), stride=(1, fold))
            return (cute.make_layout(self.config.cta_tile_m), cols)
        return self.epi_tile_mn

    def _check_tmem_columns(self, tiled_mma):
        """The accumulators' TMEM layout must fit the columns the kernel allocates (the budget
        model's :func:`~pearl_moe.config.tmem_columns`); checked while tracing."""
        acc = tiled_mma.make_fragment_C(
            cute.append(tiled_mma.partition_shape_C(self.mma_tiler_mnk[:2]), self.num_acc_buffers)
        )
        needed = sm100_utils.get_num_tmem_alloc_cols(acc)
        if needed > self.num_tmem_cols:
            raise ValueError(
                f"{self.config.describe()}: the accumulators need {needed} TMEM columns, the "
                f"budget model allocates {self.num_tmem_cols}"
            )

    def _make_tma_atoms(self, tiled_mma, mA, mB):
        """TMA load atoms for A and B (2-CTA forms when the MMA spans a CTA pair)."""
        a_op = sm100_utils.cluster_shape_to_tma_atom_A(
            (*self.cluster_shape_mn, 1), tiled_mma.thr_id
        )
        b_op = sm100_utils.cluster_shape_to_tma_atom_B(
            (*self.cluster_shape_mn, 1), tiled_mma.thr_id
        )
        tma_atom_a, tma_tensor_a = cute.nvgpu.make_tiled_tma_atom_A(
            a_op,
            mA,
            cute.slice_(self.a_smem_layout, (None, None, None, 0)),
            self.mma_tiler_mnk,
            tiled_mma,
            self.cluster_layout_vmnk.shape,
        )
        tma_atom_b, tma_tensor_b = cute.nvgpu.make_tiled_tma_atom_B(
            b_op,
            mB,
            cute.slice_(self.b_smem_layout, (None, None, None, 0)),
            self.b_tiler_mnk,
            tiled_mma,
            self.cluster_layout_vmnk.shape,
        )
        return tma_atom_a, tma_tensor_a, tma_atom_b, tma_tensor_b

    def _make_tma_store_atom(self, mC):
        epi_smem_one = cute.select(self.c_smem_layout, mode=[0, 1])
        return cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), mC, epi_smem_one, self._epilogue_tile()
        )

    def shared_storage(self):
        """The mbarriers and bookkeeping words, placed after the data buffers.

        ``(2 x ring_depth [+ 2 x b_ring_depth] + 2 x acc_buffers x acc_slots) x 8 B`` of mbarriers
        (a full and an empty barrier per entry of each pipeline) plus 64 B of bookkeeping: exactly
        the "barriers" item of :func:`pearl_moe.config.smem_budget`.
        """
        wide_b = self.wide_b

        @cute.struct
        class SharedStorage:
            ab_mbar: cute.struct.MemRange[cutlass.Int64, 2 * self.ring_depth]
            if wide_b:  # the B ring's own full/empty barriers (stage 6)
                b_mbar: cute.struct.MemRange[cutlass.Int64, 2 * self.b_ring_depth]
            acc_mbar: cute.struct.MemRange[cutlass.Int64, 2 * self.num_acc_stages]
            tmem_dealloc_mbar: cutlass.Int64
            tmem_base: cutlass.Int32
            padding: cute.struct.MemRange[cutlass.Int32, BOOKKEEPING_WORDS]

        return SharedStorage

    # ------------------------------------------------------------------ device pieces
    def allocate_smem(self, a_smem_layout, b_smem_layout, c_smem_layout):
        """The A/B rings, the epilogue buffer and the barrier block, in that order.

        Data buffers first (1024-byte aligned for the 128 B swizzle), then the barrier block, so
        the total is exactly the sum of the budget items (``A ring + B ring + epilogue + barriers``).
        """
        smem = SmemAllocator()
        # (MMA, MMA_M, MMA_K, STAGE)
        sA = smem.allocate_tensor(
            self.ab_dtype, a_smem_layout.outer, byte_alignment=1024, swizzle=a_smem_layout.inner
        )
        # (MMA, MMA_N, MMA_K, STAGE)
        sB = smem.allocate_tensor(
            self.ab_dtype, b_smem_layout.outer, byte_alignment=1024, swizzle=b_smem_layout.inner
        )
        # (EPI_M, EPI_N, EPI_STAGE); none for direct stores
        sC = None
        if c_smem_layout is not None:
            sC = smem.allocate_tensor(
                self.c_dtype, c_smem_layout.outer, byte_alignment=1024, swizzle=c_smem_layout.inner
            )
        storage = smem.allocate(self.shared_storage())
        return sA, sB, sC, storage

    def _tma_umma_ring(self, barriers, entries, tx_bytes, cluster_layout_vmnk, defer_sync):
        """(producer, consumer) of a TMA -> UMMA ring of ``entries`` full/empty mbarrier pairs:
        the TMA arrives with ``tx_bytes``, the MMA warp's one thread releases."""
        return pipeline.PipelineTmaUmma.create(
            barrier_storage=barriers,
            num_stages=entries,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
            tx_count=tx_bytes,
            cta_layout_vmnk=cluster_layout_vmnk,
            defer_sync=defer_sync,
        ).make_participants()

    def make_pipelines(self, storage, cluster_layout_vmnk=None, defer_sync=False):
        """A/B ring (TMA -> UMMA), accumulator hand-off (UMMA -> epilogue) and the TMEM allocator."""
        # One TMA thread arrives on each "full" barrier: no multicast in our (cta_group, 1) clusters;
        # in 2-CTA mode the pair's loads land on the leader's barrier, counted in tx bytes.
        ab_producer, ab_consumer = self._tma_umma_ring(
            storage.ab_mbar.data_ptr(), self.ring_depth, self.num_tma_load_bytes,
            cluster_layout_vmnk, defer_sync,
        )  # fmt: skip
        acc_pipeline = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_mbar.data_ptr(),
            num_stages=self.num_acc_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            # one elected thread per epilogue warp, of both CTAs in 2-CTA mode
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, len(self.epilogue_warps) * self.config.cta_group
            ),
            cta_layout_vmnk=cluster_layout_vmnk,
            defer_sync=defer_sync,
        )
        tmem = TmemAllocator(
            storage.tmem_base.ptr,
            barrier_for_retrieve=pipeline.NamedBarrier(
                barrier_id=TMEM_ALLOC_BARRIER,
                num_threads=32 * (len(self.epilogue_warps) + 1),
            ),
            allocator_warp_id=self.epilogue_warps[0],
            is_two_cta=self.use_2cta,
            two_cta_tmem_dealloc_mbar_ptr=storage.tmem_dealloc_mbar.ptr,
        )
        return ab_producer, ab_consumer, acc_pipeline, tmem

    def mma_fragments(self, tiled_mma, sA, sB):
        """UMMA views of the A/B rings and the layout of the TMEM accumulators (not allocated yet)."""
        # (MMA, MMA_M, MMA_K, STAGE)
        tCrA = tiled_mma.make_fragment_A(sA)
        # (MMA, MMA_N, MMA_K, STAGE)
        tCrB = tiled_mma.make_fragment_B(sB)
        # (MMA, MMA_M, MMA_N, ACC_STAGE): layout only until TMEM is allocated
        tCtAcc_fake = tiled_mma.make_fragment_C(
            cute.append(tiled_mma.partition_shape_C(self.mma_tiler_mnk[:2]), self.num_acc_buffers)
        )
        return tCrA, tCrB, tCtAcc_fake

    def tma_partition_ab(
        self,
        tma_atom_a,
        sA,
        tCgA,
        tma_atom_b,
        sB,
        tCgB,
        cluster_layout_vmnk=None,
        cluster_coord=None,
    ):
        """TMA views of one tile's A and B K tiles and of the rings they land in.

        Without a cluster (stages 1, 2) each CTA loads its whole tile. The stage-3 kernel (stages
        3-7) passes its cluster: of one CTA unless the tile is 2-CTA (``cta_group=2``: the course's
        stage 7; stage 3 only when configured so), where the coordinates in
        ``cluster_layout_vmnk`` pick this CTA's part of the pair's loads.
        """
        a_cta, a_cta_layout = 0, cute.make_layout(1)
        b_cta, b_cta_layout = 0, cute.make_layout(1)
        if cluster_layout_vmnk is not None:
            a_cta = cluster_coord[2]
            a_cta_layout = cute.make_layout(cute.slice_(cluster_layout_vmnk, (0, 0, None, 0)).shape)
            b_cta = cluster_coord[1]
            b_cta_layout = cute.make_layout(cute.slice_(cluster_layout_vmnk, (0, None, 0, 0)).shape)
        # ((ATOM_V, REST_V), STAGE) and ((ATOM_V, REST_V), RestK)
        tAsA, tAgA = cpasync.tma_partition(
            tma_atom_a,
            a_cta,
            a_cta_layout,
            cute.group_modes(sA, 0, 3),
            cute.group_modes(tCgA, 0, 3),
        )
        # ((ATOM_V, REST_V), STAGE) and ((ATOM_V, REST_V), RestK)
        tBsB, tBgB = cpasync.tma_partition(
            tma_atom_b,
            b_cta,
            b_cta_layout,
            cute.group_modes(sB, 0, 3),
            cute.group_modes(tCgB, 0, 3),
        )
        return tAsA, tAgA, tBsB, tBgB

    @cute.jit
    def load_k_tiles(
        self,
        tma_atom_a: cute.CopyAtom,
        tAgA: cute.Tensor,
        tAsA: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        tBgB: cute.Tensor,
        tBsB: cute.Tensor,
        ab_producer,
        k_tile_cnt,
        a_mcast_mask=None,
        b_mcast_mask=None,
    ):
        """TMA-load every K tile of one output tile into the A/B ring (one thread of the TMA warp).

        Each ring entry's "full" barrier counts the bytes of both loads. The masks, set only for a
        2-CTA tile (``cta_group=2``: the course's stage 7; stage 3 only when configured so), make
        the pair's loads signal the leader CTA's barrier. Returns ``ab_producer``, whose
        ring position the caller must carry to its next tile (see :meth:`mma_k_loop`).
        """
        for k_tile in cutlass.range(k_tile_cnt, unroll=1):
            slot = ab_producer.acquire_and_advance()
            cute.copy(
                tma_atom_a,
                tAgA[(None, k_tile)],
                tAsA[(None, slot.index)],
                tma_bar_ptr=slot.barrier,
                mcast_mask=a_mcast_mask,
            )
            cute.copy(
                tma_atom_b,
                tBgB[(None, k_tile)],
                tBsB[(None, slot.index)],
                tma_bar_ptr=slot.barrier,
                mcast_mask=b_mcast_mask,
            )
        return ab_producer

    @cute.jit
    def mma_k_loop(self, tiled_mma, tCtAcc, tCrA, tCrB, ab_consumer, k_tile_cnt):
        """Accumulate every K tile of one output tile into ``tCtAcc`` (one thread issues UMMAs)."""
        tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
        num_k_blocks = cute.size(tCrA, mode=[2])
        for _k_tile in cutlass.range(k_tile_cnt, unroll=1):
            slot = ab_consumer.wait_and_advance()
            for k_block in cutlass.range(num_k_blocks, unroll_full=True):
                coord = (None, None, k_block, slot.index)
                cute.gemm(tiled_mma, tCtAcc, tCrA[coord], tCrB[coord], tCtAcc)
                tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
            slot.release()  # tcgen05.commit: the stage is free once these UMMAs have read it
        # The ACCUMULATE flag lives in the TiledMma value and the ring position in the consumer:
        # hand both back so the caller's control flow (stage 3's tile loop) carries them. A helper
        # cannot rebind the caller's variables, and a loop only carries the names it assigns or
        # calls methods on, not objects it merely passes to a helper.
        return tiled_mma, ab_consumer

    def epilogue_begin(self, tmem, tCtAcc_fake):
        """Epilogue warps, once: allocate TMEM, make the accumulators and the TMA-store pipeline.

        The first epilogue warp allocates ``num_tmem_cols`` columns and publishes the address; the
        MMA warp waits on the same named barrier (``tmem.wait_for_alloc``) before using it.
        """
        # after the kernel's griddepcontrol.wait (pdl): a dependent CTA waiting on this SM must
        # not hold TMEM the kernel before it still needs
        tmem.allocate(self.num_tmem_cols)
        tmem.wait_for_alloc()
        tmem_ptr = tmem.retrieve_ptr(self.acc_dtype)
        # (MMA, MMA_M, MMA_N, ACC_STAGE)
        tCtAcc = cute.make_tensor(tmem_ptr, tCtAcc_fake.layout)
        c_pipeline = None  # direct stores (stage 4 on) have no store buffer to track
        if cutlass.const_expr(not self.direct_store):
            c_pipeline = pipeline.PipelineTmaStore.create(
                num_stages=self.num_epi_buffers,
                producer_group=pipeline.CooperativeGroup(
                    pipeline.Agent.Thread, 32 * len(self.epilogue_warps)
                ),
            )
        return tmem_ptr, tCtAcc, c_pipeline

    @cute.jit
    def epilogue_tile(
        self,
        tidx,
        warp_idx,
        tma_atom_c: cute.CopyAtom,
        tCtAcc: cute.Tensor,
        sC: cute.Tensor,
        tCgC: cute.Tensor,
        c_pipeline,
        subtile_base,
        tma_desc_ptr,
    ):
        """TMEM -> registers -> SMEM -> TMA store of one accumulator, ``epi_tile_n`` columns at a time.

        ``subtile_base`` counts slices stored before this tile, so the staging buffer keeps rotating
        across tiles; ``tma_desc_ptr`` (or None) points the store at a per-expert descriptor.
        """
        # ((ATOM_M, MMA_M), (ATOM_N, MMA_N)) for TMEM and this CTA's C tile
        tAcc = transform_partitioned_tensor_layout(tCtAcc)
        gC = transform_partitioned_tensor_layout(tCgC)
        epi_tile = self._epilogue_tile()
        copy_atom_t2r = sm100_utils.get_tmem_load_op(
            self.cta_tile_mnk,
            self.c_layout,
            self.c_dtype,
            self.acc_dtype,
            epi_tile,
            self.use_2cta,
        )
        # (EPI_TILE_M, EPI_TILE_N, EPI_M, EPI_N)
        tAcc_epi = cute.flat_divide(tAcc, epi_tile)
        tiled_copy_t2r = tcgen05.make_tmem_copy(copy_atom_t2r, tAcc_epi[(None, None, 0, 0)])
        thr_copy_t2r = tiled_copy_t2r.get_slice(tidx)
        # (T2R, T2R_M, T2R_N, EPI_M, EPI_N)
        tTR_tAcc = thr_copy_t2r.partition_S(tAcc_epi)
        # (EPI_TILE_M, EPI_TILE_N, EPI_M, EPI_N)
        gC_epi = cute.flat_divide(gC, epi_tile)
        # (T2R, T2R_M, T2R_N, EPI_M, EPI_N)
        tTR_gC = thr_copy_t2r.partition_D(gC_epi)
        # (T2R, T2R_M, T2R_N): fp32 slice in registers, then its bf16 copy
        tTR_rAcc = cute.make_rmem_tensor(tTR_gC[(None, None, None, 0, 0)].shape, self.acc_dtype)
        tTR_rC = cute.make_rmem_tensor(tTR_rAcc.shape, self.c_dtype)

        copy_atom_r2s = sm100_utils.get_smem_store_op(
            self.c_layout, self.c_dtype, self.acc_dtype, tiled_copy_t2r
        )
        tiled_copy_r2s = cute.make_tiled_copy_D(copy_atom_r2s, tiled_copy_t2r)
        thr_copy_r2s = tiled_copy_r2s.get_slice(tidx)
        # (R2S, R2S_M, R2S_N, EPI_STAGE)
        tRS_sC = thr_copy_r2s.partition_D(sC)
        # (R2S, R2S_M, R2S_N)
        tRS_rC = tiled_copy_r2s.retile(tTR_rC)

        # ((ATOM_V, REST_V), EPI_STAGE) and ((ATOM_V, REST_V), EPI_M, EPI_N)
        bSG_sC, bSG_gC = cpasync.tma_partition(
            tma_atom_c,
            0,
            cute.make_layout(1),
            cute.group_modes(sC, 0, 2),
            cute.group_modes(gC_epi, 0, 2),
        )
        # (T2R, T2R_M, T2R_N, EPI_SUBTILES) and ((ATOM_V, REST_V), EPI_SUBTILES)
        tTR_tAcc = cute.group_modes(tTR_tAcc, 3, cute.rank(tTR_tAcc))
        bSG_gC = cute.group_modes(bSG_gC, 1, cute.rank(bSG_gC))

        epi_sync = pipeline.NamedBarrier(
            barrier_id=EPILOGUE_SYNC_BARRIER, num_threads=32 * len(self.epilogue_warps)
        )
        subtile_cnt = cute.size(tTR_tAcc.shape, mode=[3])
        for subtile in cutlass.range(subtile_cnt):
            cute.copy(tiled_copy_t2r, tTR_tAcc[(None, None, None, subtile)], tTR_rAcc)
            tRS_rC.store(tiled_copy_r2s.retile(tTR_rAcc).load().to(self.c_dtype))
            buf = (subtile_base + subtile) % self.num_epi_buffers
            cute.copy(tiled_copy_r2s, tRS_rC, tRS_sC[(None, None, None, buf)])
            # make the generic-proxy SMEM writes visible to the TMA (async proxy), then sync
            cute.arch.fence_proxy("async.shared", space="cta")
            epi_sync.arrive_and_wait()
            if warp_idx == self.epilogue_warps[0]:
                if cutlass.const_expr(tma_desc_ptr is None):
                    cute.copy(tma_atom_c, bSG_sC[(None, buf)], bSG_gC[(None, subtile)])
                else:
                    cute.copy(
                        tma_atom_c,
                        bSG_sC[(None, buf)],
                        bSG_gC[(None, subtile)],
                        tma_desc_ptr=tma_desc_ptr,
                    )
                c_pipeline.producer_commit()
                c_pipeline.producer_acquire()  # the next buffer's old store has drained
            epi_sync.arrive_and_wait()

    def epilogue_end(self, tmem, tmem_ptr, c_pipeline):
        """Epilogue warps, once: drain the outstanding TMA stores, then free TMEM.

        With direct stores every warp reads TMEM on its own schedule, so the warps meet at a named
        barrier first: the allocating warp frees TMEM only after the last read of all four.
        """
        if cutlass.const_expr(self.direct_store):
            pipeline.NamedBarrier(
                barrier_id=EPILOGUE_SYNC_BARRIER, num_threads=32 * len(self.epilogue_warps)
            ).arrive_and_wait()
        else:
            c_pipeline.producer_tail()
        tmem.relinquish_alloc_permit()
        tmem.free(tmem_ptr)
