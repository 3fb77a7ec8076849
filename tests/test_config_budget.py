"""The budget model against the blog's figures, and configurations that cannot exist."""

import pytest

from pearl_moe.config import (
    GemmConfig,
    max_acc_buffers,
    max_ring_depth,
    resolve,
    smem_budget,
    tmem_columns,
)
from pearl_moe.hardware import B200, H200

KB = 1024
BLOG = GemmConfig(arch="sm_100a", tile_m=128, tile_n=128, tile_k=64)


def test_epilogue_buffer_is_24_kb_and_its_removal_makes_room_for_a_seventh_stage():
    staged = smem_budget(BLOG, B200)
    assert staged.as_dict()["epilogue"] == 24 * KB
    assert max_ring_depth(BLOG, B200) == 6
    direct = BLOG.with_(epilogue="direct_store")
    assert smem_budget(direct, B200).as_dict()["epilogue"] == 0
    assert max_ring_depth(direct, B200) == 7
    # And the seventh stage really would not fit next to the buffer.
    with pytest.raises(ValueError, match="shared memory"):
        smem_budget(BLOG.with_(ring_depth=7), B200)


def test_a_stage_halves_with_64_row_tiles():
    assert BLOG.a_entry_bytes == 16 * KB
    assert BLOG.with_(tile_m=64).a_entry_bytes == 8 * KB
    assert max_ring_depth(BLOG.with_(tile_m=64, epilogue="direct_store")) > max_ring_depth(
        BLOG.with_(epilogue="direct_store")
    )


def test_b_stage_of_two_k_tiles():
    wide = BLOG.with_(b_k_tiles=2)
    assert BLOG.b_entry_bytes == 16 * KB and wide.b_entry_bytes == 32 * KB
    assert (BLOG.b_entry_row_bytes, wide.b_entry_row_bytes) == (128, 256)
    resolved = resolve(wide.with_(tile_m=64, epilogue="direct_store"))
    assert resolved.b_ring_depth == -(-resolved.ring_depth // 2)
    assert smem_budget(resolved).fits


def test_tmem_columns_of_the_blog_accumulators():
    half = BLOG.with_(tile_n=256)
    assert max_acc_buffers(half) == 2 and tmem_columns(half) == 512
    assert half.tmem_columns_for(1) == 256  # one 128 x 256 fp32 accumulator: half of TMEM
    full = GemmConfig(tile_m=256, tile_n=512, cta_group=2)
    assert max_acc_buffers(full) == 1 and tmem_columns(full) == 512
    split = full.with_(acc_slots=2)
    assert split.mma_atoms_n == 2 and tmem_columns(split) == 512


def test_tmem_allocation_is_a_power_of_two_of_at_least_32_columns():
    assert (
        GemmConfig(tile_m=64, tile_n=8, acc_buffers=1, epilogue="direct_store").tmem_columns_for(1)
        == 32
    )
    assert GemmConfig(tile_n=96, acc_buffers=2).tmem_columns_for(2) == 256
    assert tmem_columns(GemmConfig(arch="sm_90a")) == 0


def test_resolve_fills_stages_and_accumulators_per_arch():
    hopper = resolve(GemmConfig(arch="sm_90a"), H200)
    # sm90 stage docstrings: 6 x 32 KB + 24 KB + (2 x 6 x 8 + 64) B = 221,344 B of H200's 232,448
    assert hopper.ring_depth == 6 and hopper.acc_buffers is None
    assert smem_budget(hopper, H200).total == 6 * 32 * KB + 24 * KB + 2 * 6 * 8 + 64
    with pytest.raises(ValueError, match="shared memory"):
        smem_budget(hopper.with_(ring_depth=7), H200)
    blackwell = resolve(BLOG)
    assert blackwell.ring_depth == 6 and blackwell.acc_buffers == 2
    assert smem_budget(blackwell).total <= B200.smem_per_block


def test_budget_items_add_up():
    b = smem_budget(BLOG.with_(ring_depth=4))
    d = b.as_dict()
    assert d["A ring"] == 4 * 16 * KB and d["B ring"] == 4 * 16 * KB
    assert b.total == sum(d.values()) and b.free == b.limit - b.total
    assert "total" in str(b)


def test_stage3_docstring_budget_128x256():
    # sm100 stage 3: 4 x (16 + 32) KB + 24 KB + (2 x 4 + 2 x 2) x 8 B + 64 B, and 5 stages do not fit
    wide = resolve(BLOG.with_(tile_n=256))
    assert (wide.ring_depth, wide.acc_buffers) == (4, 2) and tmem_columns(wide) == 512
    assert smem_budget(wide).total == 4 * 48 * KB + 24 * KB + 160 == 221_344


def test_2cta_splits_a_and_b_across_the_pair():
    pair = GemmConfig(tile_m=256, tile_n=256, cta_group=2)
    assert pair.cta_tile_m == 128 and pair.cta_tile_n == 128
    assert pair.a_entry_bytes == 16 * KB and pair.b_entry_bytes == 16 * KB


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(tile_m=64, cta_group=2), "64-row tiles need 1-CTA"),
        (dict(tile_m=256, cta_group=1), "does not exist"),
        (dict(tile_n=1024, tile_m=256, cta_group=2), "TMEM"),
        (dict(tile_n=256, acc_buffers=3), "TMEM columns"),
        (dict(tile_n=100), "steps of 8"),
        (dict(tile_m=128, tile_n=120, cta_group=2), "steps of 16"),
        (dict(tile_n=384), "multiple of 256"),
        (dict(acc_slots=2, tile_n=256), "tile_n must be 512"),
        (dict(arch="sm_90a", cta_group=2), "Blackwell"),
        (dict(arch="sm_90a", tile_n=512), "wgmma"),
        (dict(arch="sm_90a", acc_buffers=2), "tensor-memory"),
        (dict(arch="sm_80"), "arch must be"),
        (dict(tile_k=40), "multiple of 16"),
        (dict(ring_depth=1), "at least 2"),
        (dict(epilogue="smem"), "epilogue must be"),
        (dict(b_k_tiles=3), "b_k_tiles"),
        (dict(epi_tile_n=48), "epi_tile_n"),
        (dict(swap_ab=True, epilogue="direct_store"), "sm_90a kernels only"),
        (dict(arch="sm_90a", tile_m=16, swap_ab=True), "only the direct store"),
        (dict(arch="sm_90a", tile_m=128, swap_ab=True, epilogue="direct_store"), "at most 64"),
        (
            dict(arch="sm_90a", tile_m=16, tile_n=96, swap_ab=True, epilogue="direct_store"),
            "multiple of 64",
        ),
        (
            dict(arch="sm_90a", tile_m=64, swap_ab=True, epilogue="direct_store", acc_slots=2),
            "one consumer warpgroup",
        ),
        (dict(arch="sm_90a", tile_m=128, tile_n=256, acc_slots=2), "at most 192 registers"),
        (dict(walk="linear"), "walk must be one of"),
        (dict(cluster_n=2), "sm_90a kernels only"),
        (dict(arch="sm_90a", cluster_n=4), "cluster_n and cluster_m must be 1 or 2"),
        (
            dict(arch="sm_90a", tile_m=16, cluster_n=2, epilogue="direct_store"),
            "tile_m >= 64",
        ),
        (dict(arch="sm_90a", cluster_n=2, b_k_tiles=2), "not with wide B entries"),
        (dict(arch="sm_90a", cluster_n=2, cluster_m=2), "not both"),
        (dict(arch="sm_90a", cluster_m=2, swap_ab=True, tile_m=16), "decode-sized"),
        (dict(cluster_m=2), "sm_90a kernels only"),
    ],
)
def test_configurations_that_cannot_exist(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GemmConfig(**kwargs)


def test_too_large_tiles_do_not_fit_two_ring_entries():
    huge = GemmConfig(tile_m=256, tile_n=512, cta_group=2, tile_k=256)
    with pytest.raises(ValueError, match="not even two ring entries"):
        max_ring_depth(huge)


def test_describe_is_short_and_informative():
    label = resolve(BLOG.with_(epilogue="direct_store", b_k_tiles=2)).describe()
    assert label.startswith("sm_100a 128x128x64 1cta") and "B2" in label and "direct" in label
    assert "walk" not in label and "serialwalk" in BLOG.with_(walk="serial").describe()
    clustered = GemmConfig(arch="sm_90a", tile_n=256, cluster_n=2, epilogue="direct_store")
    label = resolve(clustered).describe()
    assert label == "sm_90a 128x256x64 1cta r4 clusterN2 direct"
    assert GemmConfig.from_label(label) == resolve(clustered)
    assert "cluster" not in resolve(GemmConfig(arch="sm_90a")).describe()
    along_m = resolve(clustered.with_(cluster_n=1, cluster_m=2))
    assert "clusterM2" in along_m.describe()
    assert GemmConfig.from_label(along_m.describe()) == along_m


def test_the_budget_lives_with_the_config():
    """The budget arithmetic is part of config.py (an import leaf of the package): resolving a
    config needs no other module, so no circle can form between a config and its budget."""
    import ast
    from pathlib import Path

    import pearl_moe.config as config

    tree = ast.parse(Path(config.__file__).read_text())
    ours = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level and node.module
    }
    assert ours == {"hardware"}
    assert config.GemmConfig.resolved.__module__ == config.resolve.__module__ == "pearl_moe.config"


def test_retired_schedule_variants_are_refused_and_recorded_static_configs_still_load():
    """The tile-schedule variants were studies and left the kernels: a config has no schedule
    field, and a recorded config that names one loads only when it is the static schedule."""
    with pytest.raises(TypeError):
        GemmConfig(arch="sm_90a", schedule="dynamic")
    recorded = {"arch": "sm_90a", "tile_m": 64, "stages": 4, "schedule": "static"}
    assert GemmConfig.from_dict(recorded) == GemmConfig(arch="sm_90a", tile_m=64, ring_depth=4)
    with pytest.raises(ValueError, match="schedule='lockstep' is a retired study variant"):
        GemmConfig.from_dict({**recorded, "schedule": "lockstep"})
    with pytest.raises(ValueError, match="walk='hybrid' is a retired study variant"):
        GemmConfig.from_dict({**recorded, "walk": "hybrid"})
    with pytest.raises(ValueError, match="walk must be one of"):
        GemmConfig(arch="sm_90a", walk="hybrid")


def test_gather_a_label_round_trip_and_budget():
    """``gather_a`` reads A's rows through an index: the label names it (``gatherA``) and reads
    back; the ring entry and barriers are the same, so the budget model does not move."""
    plain = resolve(GemmConfig(arch="sm_90a", epilogue="direct_store"))
    gathered = plain.with_(gather_a=True)
    assert gathered.describe() == plain.describe().replace(" direct", " gatherA direct")
    assert GemmConfig.from_label(gathered.describe()) == gathered
    assert "gatherA" not in plain.describe()
    tma = resolve(GemmConfig(arch="sm_90a", tile_m=256, gather_a=True))
    assert GemmConfig.from_label(tma.describe()) == tma
    assert smem_budget(gathered).total == smem_budget(plain).total
    assert (
        resolve(GemmConfig(arch="sm_90a", gather_a=True)).ring_depth
        == resolve(GemmConfig(arch="sm_90a")).ring_depth
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(), "sm_90a kernels only"),
        (dict(arch="sm_90a", tile_m=32, epilogue="direct_store"), "at least 64"),
        (
            dict(arch="sm_90a", tile_m=64, swap_ab=True, epilogue="direct_store"),
            "not with swap_ab",
        ),
        (dict(arch="sm_90a", cluster_n=2), "cannot multicast"),
        (dict(arch="sm_90a", cluster_m=2), "cannot multicast"),
        (dict(arch="sm_90a", b_k_tiles=2), "b_k_tiles must be 1"),
        (dict(arch="sm_90a", shift_a_box=True, epilogue="direct_store"), "not shift_a_box"),
        (dict(arch="sm_90a", tile_k=128), "tile_k must be 64"),
    ],
)
def test_gather_a_refusals(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GemmConfig(gather_a=True, **kwargs)


def test_gather_a_arrives_in_the_persistent_kernel():
    from pearl_moe.kernels.ladder import stage_problems

    cfg = GemmConfig(arch="sm_90a", gather_a=True)
    assert stage_problems(cfg, 3) == []
    for stage in (1, 2):
        (why,) = stage_problems(cfg, stage)
        assert "arrives in stage 3" in why
