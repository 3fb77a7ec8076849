"""Every kernel the sm_100a GPU checks launch, compiled for sm_100a on the CPU (no B200 needed).

No B200 has run these kernels, so before one does, each distinct kernel that the B200 suite, the
multi-tile cases, the smoke phase and the default call on held-out layers will launch
(:func:`pearl_moe.diagnostics.gpu_cases.compile_requests`: ``(stage, config, n, k, experts,
grid)`` as the call resolves them) is compiled here once, in two worker processes, and its SASS,
shared memory, TMEM and launch are held against what the configuration says. The compiles are
cached on disk (``pearl_moe.course.kernel_report``): a second run takes seconds.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from pearl_moe.diagnostics import gpu_cases
from pearl_moe.diagnostics.tmem_lanes import lanes_outside_quarter, tmem_load_lanes
from pearl_moe.kernels import api

REQUESTS = gpu_cases.compile_requests("sm_100a", "B200")
#: Kernels whose SASS spills one 32-bit value to local memory at this shape (ptxas, DSL 4.8.1):
#: one ``STL`` and a few ``LDL`` refills, outside the accumulator drain (a drain that spills
#: shows dozens). A cost, not a fault; pinned, so that a change in either direction shows.
KNOWN_SPILLS = {
    "edge-s7-small-zero-row-experts": 7,  # 256 x 512 split slots at n = 144, k = 200
    "fused-s4-256x256-2cta-swiglu-fused-wide-zero-row-experts": 2,  # n = 1056, k = 1160
}
KEYS = list(REQUESTS)
IDS = [REQUESTS[key][0] for key in KEYS]


def test_every_case_is_accepted_by_the_call():
    """What ``grouped_gemm`` checks before it compiles: every case's kernel may run."""
    refused = {
        REQUESTS[key][0]: problems
        for key in KEYS
        if (problems := api.can_implement(key[1], key[0], key[2], key[3]))
    }
    assert not refused, refused


def test_the_cases_cover_every_tile_family_store_and_option():
    configs = [(stage, config) for stage, config, *_ in KEYS]
    families = {(c.cta_group, c.cta_tile_m, c.epilogue) for _, c in configs}
    for family in [(1, 128, "tma_store"), (1, 128, "direct_store"), (1, 64, "direct_store"),
                   (2, 128, "tma_store"), (2, 128, "direct_store"), (2, 64, "tma_store"),
                   (2, 64, "direct_store")]:  # fmt: skip
        assert family in families, family
    fused = {(c.cta_group, c.cta_tile_m, c.acc_slots) for _, c in configs if c.activation}
    assert {(1, 128, 1), (1, 64, 1), (2, 128, 1), (2, 64, 1), (2, 128, 2)} <= fused
    assert any(c.activation and c.epi_tile_n == 16 for _, c in configs), "the epi16 fallback"
    assert any(c.store_bits == 128 for _, c in configs) and any(
        c.b_k_tiles == 2 for _, c in configs
    )
    assert {stage for stage, _ in configs} == set(gpu_cases.STAGES)


def test_multi_tile_cases_run_many_tiles_a_cta_and_wrap_every_ring():
    """Few CTAs, many tiles each, K well past every ring; stage 7 at least 3 x ``hold`` K tiles."""
    for case in gpu_cases.MULTI_TILE["sm_100a"]:
        stage, config = case.resolved("sm_100a")
        assert 1 <= case.ctas // config.cta_group <= 4, case.id
        tiles = sum(-(-c // config.tile_m) for c in case.counts) * -(-case.n // config.tile_n)
        assert tiles >= 5 * case.ctas // config.cta_group, (case.id, tiles)
        k_tiles = -(-case.k // config.tile_k)
        assert k_tiles >= 2 * config.ring_depth, (case.id, k_tiles, config.ring_depth)
        if config.acc_slots == 2:
            assert k_tiles >= 3 * gpu_cases.hold_k_tiles(config)
        if config.b_k_tiles == 2:
            assert k_tiles % 2 == 1, "a last wide B entry half past k"


@pytest.fixture(scope="module")
def reports():
    from pearl_moe.course.kernel_report import compile_many

    requests = [(stage, config, None, n, k, experts, ctas)
                for stage, config, n, k, experts, ctas in KEYS]  # fmt: skip
    halves = [requests[0::2], requests[1::2]]  # two worker processes: the machine has two cores
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(compile_many, halves))
    compiled = [None] * len(requests)
    compiled[0::2], compiled[1::2] = done
    return dict(zip(IDS, compiled, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_the_case_compiles_for_sm_100a_as_its_config_says(reports, key):
    stage, config, n, k, experts, ctas = key
    report = reports[REQUESTS[key][0]]
    fam = report.families
    assert report.shape["n"] == n and report.shape["k"] == k and report.shape["experts"] == experts
    assert fam["UTC*MMA (tcgen05.mma)"] > 0 and fam["HGMMA (wgmma)"] == 0
    assert fam["STL/LDL (spills)"] == KNOWN_SPILLS.get(REQUESTS[key][0], 0), "register spills"
    assert report.smem_bytes == report.model_smem_bytes
    assert report.tmem_columns == report.model_tmem_columns
    assert lanes_outside_quarter(tmem_load_lanes(report.ptx)) == []
    cta_pair = "tcgen05.mma.cta_group::2" in report.ptx
    assert cta_pair == (config.cta_group == 2)
    if config.epilogue == "direct_store":
        assert fam["UTMASTG (TMA store)"] == 0 and len(report.launches) == 1
    else:
        assert fam["UTMASTG (TMA store)"] > 0
        # stages 2-3 store through per-expert descriptors written by a kernel launched first
        assert len(report.launches) == (2 if stage >= 2 else 1)
        if stage >= 2:
            assert report.launches[0]["grid"] == experts
            assert "fence.proxy.tensormap::generic.acquire" in report.ptx
    if ctas is not None:  # the persistent grid the multi-tile case asked for
        assert report.launches[-1]["grid"] == ctas
