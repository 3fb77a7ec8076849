"""What the sm_100a stages accept, and that everything they accept compiles (CPU, no B200).

* ``can_implement`` gives a reason for every configuration the kernels cannot build, among them
  the MMA N sizes that used to abort the compiler (Blackwell fix 3: 128 x 24, 64 x 24, 2-CTA
  256 x 48), and accepts the course's configuration of every stage;
* a seeded fuzz over every ``GemmConfig`` field: each configuration is either refused by
  ``GemmConfig`` or ``can_implement`` with a reason, or compiles in a worker process without
  crashing (a handful of compiles, marked ``slow``; both archs, the sm_90a stages that exist);
* ``launch`` refuses an output pointer the compiled kernel cannot store to.
"""

from __future__ import annotations

import random

import pytest

from pearl_moe.config import GemmConfig
from pearl_moe.kernels import api
from pearl_moe.kernels.ladder import stage_config, stage_problems

N, K = 4096, 6144


def _problems(stage, n=N, k=K, arch="sm_100a", **fields):
    """``can_implement``'s reasons, or ``GemmConfig``'s (as one problem) where it refuses the
    fields themselves."""
    try:
        config = GemmConfig(arch=arch, **fields).resolved()
    except ValueError as err:
        return [str(err)]
    return api.can_implement(config, stage, n, k)


@pytest.mark.parametrize("stage", range(1, 8))
def test_course_configs_are_accepted(stage):
    config = stage_config("sm_100a", stage).resolved()
    assert api.can_implement(config, stage, N, K) == []


@pytest.mark.parametrize(
    "stage, fields, pattern",
    [
        # fix 3: N sizes tcgen05.mma has but the B operand's SMEM layout aborts the compiler on
        (3, dict(tile_n=24, epi_tile_n=8), "24 rows of B"),
        (5, dict(tile_m=64, tile_n=24, epilogue="direct_store", epi_tile_n=8), "24 rows of B"),
        (3, dict(tile_m=256, tile_n=48, cta_group=2, epi_tile_n=16), "24 rows of B"),
        # direct stores: whole 32-byte stores per thread, rows starting 32-byte aligned
        (4, dict(epilogue="direct_store", epi_tile_n=8), "256-bit stores need a multiple of 16"),
        (5, dict(tile_m=64, epilogue="direct_store", epi_tile_n=16), "multiple of 16"),
        (4, dict(epilogue="direct_store", epi_tile_n=48, tile_n=96), "power of two"),
        # fix 1: the 2 x 2 warp epilogue of 64-row CTAs drains epi_tile_n / 2 columns per half
        (3, dict(tile_m=128, tile_n=256, cta_group=2, epi_tile_n=8), "multiple of 16"),
        # the split accumulator is a direct-store, one-B-ring feature
        (7, dict(tile_m=256, tile_n=512, cta_group=2, acc_slots=2), "direct_store"),
        (
            7,
            dict(
                tile_m=256, tile_n=512, cta_group=2, acc_slots=2, epilogue="direct_store",
                b_k_tiles=2,
            ),
            "b_k_tiles",
        ),
    ],
)  # fmt: skip
def test_can_implement_rejects_with_a_reason(stage, fields, pattern):
    problems = _problems(stage, **fields)
    assert problems and any(pattern in p for p in problems), problems


def test_direct_store_needs_rows_aligned_for_its_store_width():
    assert _problems(4, n=4104, epilogue="direct_store") == [
        "n=4104: 256-bit direct stores need every output row to start 32-byte aligned, i.e. "
        "n % 16 == 0 (store_bits=128 needs n % 8 == 0)"
    ]
    assert _problems(4, n=4104, epilogue="direct_store", store_bits=128) == []


def test_stage_builds_refuse_what_can_implement_refuses():
    from pearl_moe.kernels.sm100 import stage3_persistent

    with pytest.raises(ValueError, match="24 rows of B"):
        stage3_persistent.build(GemmConfig(tile_n=24, epi_tile_n=8))


# ---------------------------------------------------------------------- fuzz
FIELDS = dict(
    tile_m=[8, 16, 32, 64, 64, 128, 128, 256],
    tile_n=[8, 16, 24, 32, 40, 48, 64, 96, 128, 160, 192, 256, 512],
    tile_k=[16, 32, 48, 64, 128],
    cta_group=[1, 2],
    ring_depth=[None, None, 2, 3, 4, 7],
    b_k_tiles=[1, 1, 2, 4],
    epilogue=["tma_store", "direct_store"],
    epi_tile_n=[8, 16, 32, 64, 128],
    epi_buffers=[1, 2, 3],
    acc_buffers=[None, 1, 2],
    acc_slots=[1, 1, 2],
    store_bits=[None, 128, 256],
    shift_a_box=[False, False, False, True],
)
SHAPES = [(4096, 6144), (2816, 384), (256, 128), (4104, 520)]


def _existing_stages(arch):
    from pearl_moe.course.kernel_report import stage_module_name

    stages = []
    for stage in range(1, 8):
        try:
            stage_module_name(stage, arch)
            stages.append(stage)
        except ModuleNotFoundError:
            pass
    return stages


def fuzz(arch: str, seed: int, count: int):
    """``count`` samples ``(stage, config or None, n, k, problems)``: a config ``GemmConfig``
    refuses comes back as ``None`` with its message as the one problem."""
    rng = random.Random(seed)
    stages = _existing_stages(arch)
    out = []
    while len(out) < count:
        fields = {name: rng.choice(values) for name, values in FIELDS.items()}
        if arch == "sm_90a":
            fields.update(cta_group=1, acc_buffers=None)
        n, k = rng.choice(SHAPES)
        try:
            config = GemmConfig(arch=arch, **fields)
        except ValueError as err:
            out.append((None, None, n, k, [str(err)]))
            continue
        allowed = [s for s in stages if not stage_problems(config, s)]
        if not allowed:
            continue
        stage = rng.choice(allowed)
        try:
            config = config.resolved()
        except ValueError as err:
            out.append((stage, None, n, k, [str(err)]))
            continue
        out.append((stage, config, n, k, api.can_implement(config, stage, n, k)))
    return out


@pytest.mark.parametrize("arch", ["sm_100a", "sm_90a"])
def test_every_refusal_comes_with_a_reason(arch):
    samples = fuzz(arch, seed=7, count=3000)
    accepted = [s for s in samples if s[1] is not None and not s[4]]
    assert len(accepted) > 10, "the fuzz hardly reaches a configuration the kernels take"
    for _stage, _config, _n, _k, problems in samples:
        assert all(isinstance(p, str) and len(p) > 10 for p in problems), problems


def test_fuzz_never_accepts_a_known_compiler_abort():
    for _stage, config, _n, _k, problems in fuzz("sm_100a", seed=11, count=3000):
        if config is None or problems:
            continue
        b_rows = min(config.tile_n, 256) // config.cta_group
        assert b_rows == 8 or b_rows % 16 == 0, config.describe()


@pytest.mark.slow
@pytest.mark.parametrize("arch, count", [("sm_100a", 6), ("sm_90a", 3)])
def test_fuzzed_accepted_configs_compile(arch, count):
    """Each configuration ``can_implement`` accepts compiles in its own worker process: a compiler
    abort (SIGABRT) fails this test instead of killing the test run."""
    from pearl_moe.course.kernel_report import compile_stage
    from pearl_moe.kernels.sm100.common import one_accumulator

    accepted = [s for s in fuzz(arch, seed=2026, count=400) if s[1] is not None and not s[4]]
    for stage, config, n, k, _ in accepted[:count]:
        if arch == "sm_100a" and stage < 3:
            config = one_accumulator(config)  # as grouped_gemm compiles stages 1 and 2
        report = compile_stage(stage, config, n=n, k=k, experts=4)
        assert report.smem_bytes == report.model_smem_bytes, config.describe()
        assert report.tmem_columns == report.model_tmem_columns, config.describe()


# ---------------------------------------------------------------------- launch
def test_output_alignment_follows_the_store_width():
    # 256-bit direct stores need 32 bytes; 128-bit direct stores and the TMA store need 16
    def course(stage, **changes):
        return stage_config("sm_100a", stage).with_(**changes)

    assert course(4).output_alignment == 32
    assert course(4, store_bits=128).output_alignment == 16
    assert course(3).output_alignment == 16
    assert course(7).output_alignment == 32
    assert course(7, epilogue="tma_store", acc_slots=1).output_alignment == 16
    assert stage_config("sm_90a", 4).output_alignment == 16


def test_launch_refuses_an_output_no_store_can_reach():
    torch = pytest.importorskip("torch")
    from pearl_moe.kernels.sm100 import stage3_persistent

    calls = []
    A = torch.zeros(8, 64, dtype=torch.bfloat16)
    W = torch.zeros(2, 32, 64, dtype=torch.bfloat16)
    ends = torch.tensor([3, 8], dtype=torch.int32)
    flat = torch.zeros(8 * 32 + 16, dtype=torch.bfloat16)
    skip = (-flat.data_ptr() % 16) // 2 + 4  # 8 bytes past a 16-byte boundary
    out = flat[skip : skip + 8 * 32].view(8, 32)
    with pytest.raises(ValueError, match="16-byte aligned"):
        stage3_persistent.launch(lambda *args: calls.append(args), A, W, ends, out, None, None)
    assert calls == []
