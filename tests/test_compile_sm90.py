"""Compile every sm_90a stage on the CPU and check the SASS against the design and budget model.

The sm_90a kernels live in three modules, ``pearl_moe.kernels.sm90.stage1_gemm``, ``stage2_grouped``
and ``stage3_persistent`` (stages 3-7), reached through ``pearl_moe.kernels.dispatch.stage_module``. Every stage exists, so a missing
module, an import error or a compile error fails (these kernels run on the H200; they must keep
compiling). Stages 4-7 are compiled with the course's configuration for them
(:func:`pearl_moe.kernels.ladder.stage_config`) plus a few variants of their options.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pearl_moe.config import GemmConfig
from pearl_moe.course.kernel_report import compile_many
from pearl_moe.kernels.ladder import stage_config

BASE = GemmConfig(arch="sm_90a", tile_m=128, tile_n=128, tile_k=64, ring_depth=6)
CASES = {
    "s1-128x128x64": (1, BASE),
    "s2-128x128x64": (2, BASE),
    "s3-128x128x64": (3, BASE),
    **{f"s{s}-course": (s, stage_config("sm_90a", s)) for s in (4, 5, 6, 7)},
    # options in other combinations than the course's ladder
    "s4-64x256-direct": (4, stage_config("sm_90a", 4).with_(tile_m=64, tile_n=256)),
    "s6-128x128-wideB": (6, stage_config("sm_90a", 6).with_(tile_m=128)),
    "s7-pingpong-narrowB": (7, stage_config("sm_90a", 7).with_(b_k_tiles=1)),
    "s5-16rows-shiftA": (5, stage_config("sm_90a", 5).with_(tile_m=16, shift_a_box=True)),
    "s7-32rows": (7, stage_config("sm_90a", 7).with_(tile_m=32)),
    "s7-128x128-pingpong": (7, stage_config("sm_90a", 7).with_(tile_m=128, tile_n=128)),
    # beyond the post: the gated activation fused into the direct store (n / 2 outputs)
    "s4-64x128-swiglu": (4, stage_config("sm_90a", 5).with_(activation="swiglu")),
    "s7-pingpong-geglu": (7, stage_config("sm_90a", 7).with_(activation="geglu")),
    # one split-accumulator warpgroup computes a 128-row tile: two m64 blocks through _gated_words
    "s7-128x128-pingpong-swiglu": (
        7,
        stage_config("sm_90a", 7).with_(tile_m=128, activation="swiglu"),
    ),  # fmt: skip
    # a fused tile 96 wide: one block of four output groups, then two groups stored word by word
    "s6-16x96-swiglu": (
        6,
        stage_config("sm_90a", 6).with_(
            tile_m=16, tile_n=96, shift_a_box=True, activation="swiglu"
        ),
    ),  # fmt: skip
    # the narrowest: no block of four output groups, both groups word by word
    "s5-64x32-swiglu": (5, stage_config("sm_90a", 5).with_(tile_n=32, activation="swiglu")),
    # 256-row tiles: two consumer warpgroups of 128 rows (two m64 blocks each per k block)
    "s3-256x128": (3, BASE.with_(tile_m=256, ring_depth=None)),
    "s4-256x192-direct": (4, stage_config("sm_90a", 4).with_(tile_m=256, tile_n=192)),
    # 2-CTA clusters along N: A multicast into both CTAs, releases arrive on both
    "s3-128x256-clusterN2": (3, BASE.with_(tile_n=256, cluster_n=2, ring_depth=None)),
    "s7-128x128-pingpong-clusterN2": (
        7,
        stage_config("sm_90a", 7).with_(tile_m=128, b_k_tiles=1, cluster_n=2),
    ),  # fmt: skip
    "s4-128x256-clusterM2": (4, stage_config("sm_90a", 4).with_(tile_n=256, cluster_m=2)),
    "s3-128x128-clusterM2": (3, BASE.with_(cluster_m=2, ring_depth=None)),
    "s7-128x192-pingpong": (7, stage_config("sm_90a", 7).with_(tile_m=128, tile_n=192)),
    # a split-accumulator warpgroup's 192-row tile: three m64 blocks (129-192 rows of an expert)
    "s7-192x128-pingpong": (
        7,
        stage_config("sm_90a", 7).with_(tile_m=192, tile_n=128, b_k_tiles=1, ring_depth=None),
    ),
    # the scheduler's first walk: one expert per dependent load
    "s6-serialwalk": (6, stage_config("sm_90a", 6).with_(walk="serial")),
    # beyond the post: swapped operands (weights as the wgmma's M, 16 tokens as its N)
    "s6-16x128-swapAB": (
        6,
        stage_config("sm_90a", 6).with_(tile_m=16, shift_a_box=True, swap_ab=True),
    ),  # fmt: skip
    "s5-8x256-swapAB": (
        5,
        stage_config("sm_90a", 5).with_(tile_m=8, tile_n=256, shift_a_box=True, swap_ab=True),
    ),  # fmt: skip
    # beyond the post: tiles in groups of 8 n tiles, serpentine over m (quack's prefill order)
    "s7-128x128-pingpong-ng8": (7, stage_config("sm_90a", 7).with_(tile_m=128, n_group=8)),
    "s3-128x192-clusterM2-ng8": (
        3,
        BASE.with_(tile_n=192, cluster_m=2, n_group=8, ring_depth=None),
    ),  # fmt: skip
    # beyond the post: A's rows gathered through an index (cp.async), B by TMA
    "s3-128x128-gatherA": (3, BASE.with_(gather_a=True)),
    "s4-128x128-gatherA": (4, stage_config("sm_90a", 4).with_(gather_a=True)),
    "s3-256x128-gatherA": (3, BASE.with_(tile_m=256, gather_a=True, ring_depth=None)),
    # beyond the post: a programmatic dependent launch (the MoE layer's GEMMs on sm_90a)
    "s5-course-pdl": (5, stage_config("sm_90a", 5).with_(pdl=True)),
    "s4-128x128-gatherA-pdl": (4, stage_config("sm_90a", 4).with_(gather_a=True, pdl=True)),
    "s3-128x256-clusterN2-pdl": (
        3,
        BASE.with_(tile_n=256, cluster_n=2, ring_depth=None, pdl=True),
    ),  # fmt: skip
}
PDL = [name for name, (_, cfg) in CASES.items() if cfg.pdl]
SWAPPED = [name for name, (_, cfg) in CASES.items() if cfg.swap_ab]
DIRECT = [
    name
    for name, (_, cfg) in CASES.items()
    if cfg.epilogue == "direct_store" and name not in SWAPPED
]
TMA_STORE = [name for name in CASES if name not in DIRECT + SWAPPED]
GATHERED = [name for name, (_, cfg) in CASES.items() if cfg.gather_a]


@pytest.fixture(scope="module")
def reports():
    compiled = compile_many([(stage, cfg, None, None, None, None) for stage, cfg in CASES.values()])
    return dict(zip(CASES, compiled, strict=True))


def _count(report, *prefixes) -> int:
    return sum(n for op, n in report.opcodes.items() if op.split(".")[0] in prefixes)


@pytest.mark.parametrize("name", list(CASES))
def test_wgmma_and_tma_instructions(reports, name):
    fam = reports[name].families
    assert fam["HGMMA (wgmma)"] > 0, "no wgmma (HGMMA) in the SASS"
    assert fam["UTC*MMA (tcgen05.mma)"] == 0, "tcgen05 instruction in a Hopper kernel"
    assert fam["LDTM (tcgen05.ld)"] == 0
    assert fam["UTMALDG (TMA load)"] > 0
    assert fam["STG.E.ENL2.256"] == 0, "256-bit stores do not exist on sm_90"


@pytest.mark.parametrize("name", TMA_STORE)
def test_tma_store_epilogue(reports, name):
    fam = reports[name].families
    assert fam["UTMASTG (TMA store)"] > 0, "TMA-store epilogue missing"
    assert fam["STG.E.128"] == 0


@pytest.mark.parametrize("name", DIRECT)
def test_direct_store_uses_16_byte_stores_and_no_tma_store(reports, name):
    report = reports[name]
    fam = report.families
    assert fam["UTMASTG (TMA store)"] == 0, "a direct-store kernel must not TMA-store"
    assert fam["STSM (stmatrix)"] == 0, "the direct store stages nothing in shared memory"
    config = report.gemm_config
    # a fused 32-wide tile has 16 outputs: no block of four groups, no 16-byte store (counted
    # in the 96-wide test below)
    assert fam["STG.E.128"] > 0 or config.output_columns(config.tile_n) < 32, "no 16-byte stores"
    # a fused tile 32 (2 b + 1) wide stores its last two output groups 4 bytes a thread (counted
    # in the 96-wide test below); every other direct store has 16-byte stores only
    if config.activation is not None and config.tile_n // 2 % 32:
        assert fam["STG (other)"] == report.opcodes.get("STG.E", 0) > 0, report.opcodes
    else:
        assert fam["STG (other)"] == 0, f"narrower global stores: {report.opcodes}"
    # one quad transpose (3 butterfly shuffles) per 16-byte store; with the split accumulator the
    # compiler keeps two copies of the shuffles but merges some stores, so count exactly only with
    # one consumer
    shuffles = sum(n for op, n in report.opcodes.items() if op.startswith("SHFL.BFLY"))
    assert shuffles % 3 == 0 and (shuffles > 0) == (fam["STG.E.128"] > 0)
    if report.gemm_config.acc_slots == 1:
        assert shuffles == 3 * fam["STG.E.128"]


@pytest.mark.parametrize("name", list(CASES))
def test_no_register_spills(reports, name):
    report = reports[name]
    assert _count(report, "STL", "LDL") == 0, f"{report.label} spills registers to local memory"


def test_fused_tiles_32_2b_1_wide_store_their_last_two_groups_word_by_word(reports):
    """16 x 96 with the activation: 48 outputs a row, one quad-transposed block of 32 (a 16-byte
    store per row half) and 16 more as one 4-byte store per thread, group and row half; one exp2
    per output a thread holds (64 rows x 48 outputs over 128 threads)."""
    report = reports["s6-16x96-swiglu"]
    assert report.opcodes["STG.E.128"] == 2 and report.opcodes["STG.E"] == 4
    assert report.opcodes.get("MUFU.EX2", 0) == 64 * 48 // 128
    assert sum(n for op, n in report.opcodes.items() if op.startswith("SHFL.BFLY")) == 3 * 2
    # 64 x 32: 16 outputs a row, the two groups only; no transpose
    narrow = reports["s5-64x32-swiglu"]
    assert narrow.opcodes.get("STG.E.128", 0) == 0 and narrow.opcodes["STG.E"] == 4
    assert not any(op.startswith("SHFL.BFLY") for op in narrow.opcodes)


def test_the_fused_activation_halves_the_stores_and_adds_one_exp_per_output(reports):
    plain, fused = reports["s5-course"], reports["s4-64x128-swiglu"]
    assert fused.gemm_config.tile_n == plain.gemm_config.tile_n == 128
    # n / 2 outputs: half the 16-byte stores and half the quad transposes of the same tile
    assert 2 * fused.families["STG.E.128"] == plain.families["STG.E.128"]
    # SiLU: one exp2 per output value a thread holds, 64 rows x 64 outputs over 128 threads
    assert fused.opcodes.get("MUFU.EX2", 0) == 64 * 64 // 128
    assert plain.opcodes.get("MUFU.EX2", 0) == 0
    # and one hardware reciprocal: no IEEE division, whose guarded slow path (FCHK, a CALLed
    # subroutine) cost the fused kernel up to 9% at decode (experiments/fused_decode)
    rcp = fused.opcodes.get("MUFU.RCP", 0) - plain.opcodes.get("MUFU.RCP", 0)
    assert rcp == 64 * 64 // 128
    assert not any(op.startswith("FCHK") for op in fused.opcodes)
    assert fused.smem_bytes == plain.smem_bytes  # registers only: the budget does not move
    geglu = reports["s7-pingpong-geglu"]
    assert any(op.startswith("MUFU.TANH") for op in geglu.opcodes)


def test_wide_b_entries_issue_two_tma_boxes_per_copy(reports):
    narrow, wide = reports["s5-course"], reports["s6-course"]
    # one A box plus one B box, against one A box plus the B copy's two 128-byte-wide boxes
    assert narrow.families["UTMALDG (TMA load)"] == 2
    assert wide.families["UTMALDG (TMA load)"] == 3


def test_128_row_split_accumulator_tile_runs_two_m64_wgmma_per_k_block(reports):
    """One split-accumulator warpgroup owns a whole 128-row tile: two m64 wgmma per 16-deep k block,
    as many as the two cooperative warpgroups of a 128-row tile issue together (each one m64)."""
    pp, coop = reports["s7-128x128-pingpong"], reports["s6-128x128-wideB"]
    kblocks = 64 // 16  # one K tile of 64 (the mainloop body issues one K tile at a time)
    assert pp.families["HGMMA (wgmma)"] == 2 * kblocks
    assert coop.families["HGMMA (wgmma)"] == kblocks
    assert "HGMMA.64x128x16.F32.BF16" in Path(pp.files["sass"]).read_text()


def test_192_row_split_accumulator_tile_runs_three_m64_wgmma_per_k_block_without_spills(reports):
    """A split-accumulator warpgroup's 192 x 128 tile: three m64 wgmma per 16-deep k block, 192 fp32
    accumulator registers a thread (as 128 x 192) and no local-memory spills; its direct store
    writes 192 x 128 / 128 threads / 8 = 24 16-byte stores a thread."""
    report = reports["s7-192x128-pingpong"]
    sass = Path(report.files["sass"]).read_text()
    assert report.families["HGMMA (wgmma)"] == 3 * (64 // 16)
    assert "HGMMA.64x128x16.F32.BF16" in sass
    assert "STL" not in sass and "LDL" not in sass
    assert sass.count("STG.E.128") == 24


@pytest.mark.parametrize("name", [n for n, (stage, _) in CASES.items() if stage >= 3])
def test_the_mainloop_keeps_its_wgmma_descriptors_in_uniform_registers(reports, name):
    """Between the first and the last HGMMA of the mainloop no R2UR moves a descriptor from an
    ordinary register: the consumer warpgroup's index comes from the warp-uniform warpgroup
    number, so every branch on it is uniform. Taken from the thread index, split-accumulator and
    cooperative tiles built each descriptor in ordinary registers and moved it over (up to four
    R2UR a wgmma; experiments/down_profile)."""
    sass = Path(reports[name].files["sass"]).read_text()
    lines = [line for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", line)]
    hgmma = [i for i, line in enumerate(lines) if "HGMMA" in line]
    mainloop = lines[hgmma[0] : hgmma[-1] + 1]
    assert not [line for line in mainloop if "R2UR" in line], name


def test_256_row_tiles_give_each_of_two_warpgroups_two_m64_blocks(reports):
    """A 256-row tile runs on two consumer warpgroups (as a 128-row one), each computing 128 rows:
    two m64 wgmma per 16-deep k block, with ``tile_n`` accumulator registers a thread and no
    spills (192 columns: 192 of the 232 registers a consumer thread gets)."""
    kblocks = 64 // 16
    for name, width in (("s3-256x128", 128), ("s4-256x192-direct", 192)):
        report = reports[name]
        assert report.families["HGMMA (wgmma)"] == 2 * kblocks, name
        assert f"HGMMA.64x{width}x16.F32.BF16" in Path(report.files["sass"]).read_text()
    from pearl_moe.kernels.sm90 import stage3_persistent

    kernel = stage3_persistent.PersistentGroupedGemmKernel(reports["s3-256x128"].gemm_config)
    assert (kernel.num_mma_warpgroups, kernel.mma_m, kernel.threads_per_cta) == (2, 256, 384)


@pytest.mark.parametrize(
    "name",
    [
        "s3-128x256-clusterN2",
        "s7-128x128-pingpong-clusterN2",
        "s4-128x256-clusterM2",
        "s3-128x128-clusterM2",
    ],
)
def test_clusters_multicast_one_operand_and_release_entries_in_both_ctas(reports, name):
    """With ``cluster_n=2`` the A copy is a multicast TMA (each CTA loads half of the box into
    both) and B a plain copy; with ``cluster_m=2`` the other way round (A is 2-D, B 3-D: the
    experts' weights). The consumers' releases reach the other CTA's empty barriers (remote
    arrives), and the CTAs of a cluster meet at a cluster barrier after the mbarriers are
    initialized, before any multicast can reach them. Without clusters none of that is there."""
    sass = Path(reports[name].files["sass"]).read_text()
    loads = [line for line in sass.splitlines() if "UTMALDG" in line]
    assert len(loads) == 2 and sum(".MULTICAST" in line for line in loads) == 1
    shared = "UTMALDG.3D" if reports[name].gemm_config.cluster_m == 2 else "UTMALDG.2D"
    assert any(".MULTICAST" in line and shared in line for line in loads)
    assert "SYNCS.ARRIVE.TRANS64.RED" in sass and "UCGABAR_WAIT" in sass
    plain = Path(reports["s3-128x128x64"].files["sass"]).read_text()
    assert ".MULTICAST" not in plain and "UCGABAR" not in plain


@pytest.mark.parametrize("name", SWAPPED)
def test_swapped_operands_make_the_tokens_the_wgmma_n(reports, name):
    """With ``swap_ab`` every wgmma is 64 weight rows x tile_m tokens (no padding rows computed),
    tile_n / 64 of them per k block, and the transposed accumulator leaves by bf16 stores."""
    report = reports[name]
    cfg = report.gemm_config
    sass = Path(report.files["sass"]).read_text()
    shapes = set(re.findall(r"HGMMA\.(\d+)x(\d+)x16", sass))
    assert shapes == {("64", str(cfg.tile_m))}
    assert report.families["HGMMA (wgmma)"] == (cfg.tile_n // 64) * (cfg.tile_k // 16)
    assert report.families["UTMASTG (TMA store)"] == 0
    assert set(re.findall(r"STG\.E[.A-Z0-9]*", sass)) == {"STG.E.U16"}


def test_the_split_accumulator_hands_the_mainloop_over_on_named_barriers(reports):
    assert _count(reports["s7-course"], "BAR") > _count(reports["s6-course"], "BAR")
    assert any(op.startswith("BAR.ARV") for op in reports["s7-course"].opcodes)


@pytest.mark.parametrize("name", list(CASES))
def test_smem_matches_budget_model_and_no_tmem(reports, name):
    report = reports[name]
    assert report.smem_bytes > 0
    assert report.smem_bytes == report.model_smem_bytes, (
        f"{report.label}: kernel launches with {report.smem_bytes} B of SMEM, "
        f"budget model says {report.model_smem_bytes} B"
    )
    assert report.tmem_columns == 0


def test_direct_store_adds_a_ring_entry(reports):
    assert reports["s3-128x128x64"].gemm_config.ring_depth == 6
    assert reports["s4-course"].gemm_config.ring_depth == 7
    assert reports["s4-course"].smem_bytes <= 232_448


@pytest.mark.parametrize("tile_n", [48, 80, 112])
def test_direct_store_refuses_tiles_it_would_not_fill(tile_n):
    """The direct store writes 32 columns per quad transpose: a tile_n of 16 more would leave its
    last 16 columns unwritten, so the kernel refuses it (the tuner's widths are 96-256)."""
    from pearl_moe.kernels.api import can_implement

    cfg = stage_config("sm_90a", 4).with_(tile_m=64, tile_n=tile_n)
    assert any("multiple of 32" in why for why in can_implement(cfg, 4, 4096, 4096))
    tma = cfg.with_(epilogue="tma_store", epi_tile_n=16, ring_depth=None)
    assert can_implement(tma, 3, 4096, 4096) == []


def test_the_static_schedule_needs_no_global_atomics_or_strong_accesses(reports):
    """Persistent CTAs share the tiles statically (CTA ``c`` takes ``c, c + C, ...``): no kernel
    claims tiles or waits for another CTA through global memory."""
    for name in CASES:
        ops = reports[name].opcodes
        atomics = {op: n for op, n in ops.items() if op.startswith(("ATOMG", "RED"))}
        strong = {op for op in ops if op.startswith(("LDG", "STG")) and "STRONG" in op}
        assert not atomics, (name, atomics)
        assert not strong, (name, strong)


def test_a_grouped_tile_order_is_compiled_in_and_changes_nothing_else(reports):
    """``n_group`` adds integer arithmetic to the scheduler's decode (a group's width, the
    serpentine) and nothing else: the split-accumulator kernel has the same wgmma, TMA copies and
    barriers as without it (spills: the test above, for every case)."""
    for name in ("s7-128x128-pingpong-ng8", "s3-128x192-clusterM2-ng8"):
        assert reports[name].gemm_config.n_group == 8
    plain = compile_many([(7, stage_config("sm_90a", 7).with_(tile_m=128), None, None, None,
                           None)])[0]  # fmt: skip
    grouped = reports["s7-128x128-pingpong-ng8"]

    def count(report, prefixes):
        return sum(n for op, n in report.opcodes.items() if op.startswith(prefixes))

    for prefix in ("HGMMA", "UTMALDG", "SYNCS", "BAR"):
        assert count(grouped, prefix) == count(plain, prefix), prefix
    assert count(grouped, ("IMAD", "IADD")) > count(plain, ("IMAD", "IADD"))


def test_scheduler_walk_is_the_one_configured(reports):
    """The warp-parallel walk's prefix sum is 5 ``SHFL.UP`` per seek; the serial walk has none."""
    for name, (_, cfg) in CASES.items():
        if cfg.walk == "serial":
            assert not any(op.startswith("SHFL.UP") for op in reports[name].opcodes), name
        elif cfg.arch == "sm_90a" and name[1] in "34567":
            ups = sum(n for op, n in reports[name].opcodes.items() if op.startswith("SHFL.UP"))
            assert ups > 0 and ups % 5 == 0, (name, ups)


@pytest.mark.parametrize("name", GATHERED)
def test_gather_a_loads_a_by_cp_async_and_b_by_one_tma(reports, name):
    """With ``gather_a`` the producer warpgroup copies A with 16-byte cp.async (LDGSTS), one per
    16-row pass of a K tile (``tile_m / 16`` per thread), each thread's completion arriving on
    the entry's full barrier; B stays one TMA copy of the 3-D weight view; the consumers fence
    the generic-proxy writes before their wgmma. Registers: the producer keeps 40 up to 128 rows,
    56 at 256 (the consumers then 224). The kernels without the option have none of it."""
    report = reports[name]
    cfg = report.gemm_config
    sass = Path(report.files["sass"]).read_text()
    lines = sass.splitlines()
    cp_async = [line for line in lines if re.search(r"\sLDGSTS\.", line)]
    assert all("LDGSTS.E.BYPASS.128" in line for line in cp_async)
    # pass i writes 16 rows x 128 bytes = 0x800 bytes further into the entry (the compiler may
    # duplicate a copy on two paths: count the passes by their shared-memory offsets)
    offsets = {
        int(m or "0", 16) for m in re.findall(r"LDGSTS\S* \[R\d+(?:\+(0x[0-9a-f]+))?\]", sass)
    }
    assert offsets == {0x800 * i for i in range(cfg.tile_m // 16)}
    tma = [line for line in lines if "UTMALDG" in line]
    assert len(tma) == 1 and "UTMALDG.3D" in tma[0]
    assert "ARRIVES.LDGSTSBAR" in sass
    producer = 56 if cfg.tile_m == 256 else 40
    assert f"USETMAXREG.DEALLOC.CTAPOOL {producer:#x}" in sass
    assert report.smem_bytes == report.model_smem_bytes
    assert _count(report, "STL", "LDL") == 0
    for plain in ("s3-128x128x64", "s4-course", "s3-256x128"):
        assert "LDGSTS" not in Path(reports[plain].files["sass"]).read_text()


@pytest.mark.parametrize("name", PDL)
def test_a_programmatic_dependent_launch_waits_before_its_first_load(reports, name):
    """``pdl``: one ``griddepcontrol.wait`` (SASS ``ACQBULK``) before the first global load, TMA
    copy or ``cp.async`` in the listing (nothing the previous kernel wrote is read before it
    completes), and one ``griddepcontrol.launch_dependents`` (``PREEXIT``); the kernels without
    the option have neither, and it costs no shared memory."""
    report = reports[name]
    assert report.opcodes.get("ACQBULK", 0) == 1 and report.opcodes.get("PREEXIT", 0) == 1
    code = [line.split("*/", 1)[-1].split() for line in report.sass.splitlines() if "*/" in line]
    ops = [w[1] if w[0].startswith("@") else w[0] for w in code if w]
    loads = ("LDG", "UTMALDG", "LDGSTS", "ST", "UTMASTG")  # and no store before it either
    first = min(i for i, op in enumerate(ops) if op.startswith(loads) and not op.startswith("STS"))
    assert ops.index("ACQBULK") < first
    for other in (r for n, r in reports.items() if n not in PDL):
        assert "ACQBULK" not in other.opcodes and "PREEXIT" not in other.opcodes, other.label
    assert reports["s5-course-pdl"].smem_bytes == reports["s5-course"].smem_bytes
