"""CPU checks of the public grouped_gemm: every bad input is a ValueError raised before a launch."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import functools  # noqa: E402
import types  # noqa: E402

from pearl_moe.config import GemmConfig  # noqa: E402
from pearl_moe.kernels import api, autotune, grouped_gemm  # noqa: E402
from pearl_moe.kernels.api import stage_module, validate  # noqa: E402
from pearl_moe.kernels.host import device_end_offsets, grouped_grid, schedule_tiles  # noqa: E402
from pearl_moe.kernels.ladder import stage_config  # noqa: E402
from pearl_moe.kernels.sm90.common import can_implement  # noqa: E402


def _inputs(rows=10, k=64, n=32, experts=3):
    A = torch.randn(rows, k).to(torch.bfloat16)
    W = torch.randn(experts, n, k).to(torch.bfloat16)
    offs = torch.tensor([3, 3, rows], dtype=torch.int32)
    return A, W, offs


def _misaligned(t):
    """A contiguous copy of ``t`` whose data pointer is 2 bytes past a 16-byte boundary."""
    flat = torch.zeros(t.numel() + 8, dtype=t.dtype)
    skip = (-flat.data_ptr() % 16) // t.element_size() + 1
    return flat[skip : skip + t.numel()].view(t.shape)


def _validate(A, W, offs, out=None, check=True):
    return validate(A, W, offs, out, check, device_type="cpu")


def test_good_inputs_pass_and_return_dims():
    A, W, offs = _inputs()
    rows, n, k, experts, host = _validate(A, W, offs)
    assert (rows, n, k, experts, host) == (10, 32, 64, 3, [3, 3, 10])
    cu = torch.tensor([0, 3, 3, 10], dtype=torch.int32)
    assert _validate(A, W, cu)[4] == [3, 3, 10]
    assert _validate(A, W, offs, check=False)[4] is None


def test_cpu_tensors_are_rejected_by_the_public_call():
    A, W, offs = _inputs()
    with pytest.raises(ValueError, match="CUDA device"):
        grouped_gemm(A, W, offs)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda A, W, o: (A.float(), W, o), "bfloat16"),
        (lambda A, W, o: (A, W.half(), o), "bfloat16"),
        (lambda A, W, o: (A[:, :56], W, o), "differs from A's k|contiguous"),
        (lambda A, W, o: (A, W[:, :, :56].contiguous(), o), "differs from A's k"),
        (lambda A, W, o: (A[:, :60].contiguous(), W[:, :, :60].contiguous(), o), "multiple of 8"),
        (lambda A, W, o: (A, W[:, :28].contiguous(), o), "multiple of 8"),
        (lambda A, W, o: (A[0], W, o), "2-D"),
        (lambda A, W, o: (A, W[0], o), "3-D"),
        (lambda A, W, o: (A, W, o.float()), "int32"),
        (lambda A, W, o: (A, W, o[:2]), "end offsets or"),
        (lambda A, W, o: (A, W, torch.tensor([5, 3, 10], dtype=torch.int32)), "monotone"),
        (lambda A, W, o: (A, W, torch.tensor([3, 3, 9], dtype=torch.int32)), "end at row"),
        (lambda A, W, o: (A, W, torch.tensor([-1, 3, 10], dtype=torch.int32)), "monotone"),
        (lambda A, W, o: (A.t().contiguous().t(), W, o), "contiguous"),
        (lambda A, W, o: (A, W[:0], o), "no experts"),
        (lambda A, W, o: (A, W, o.to("meta")), "offsets are on meta"),
        (lambda A, W, o: (A, W, o.tolist()), "must be a torch.Tensor"),
        (lambda A, W, o: (A.tolist(), W, o), "A must be a torch.Tensor"),
        (lambda A, W, o: (A, W, torch.tensor([1, 3, 3, 10], dtype=torch.int32)), "cu_seqlens"),
        (lambda A, W, o: (A, W, torch.tensor([3, 3, 11], dtype=torch.int64)), "end at row"),
        (lambda A, W, o: (_misaligned(A), W, o), "16-byte aligned"),
    ],
)
def test_bad_inputs_raise_value_error(mutate, message):
    A, W, offs = _inputs()
    with pytest.raises(ValueError, match=message):
        _validate(*mutate(A, W, offs))


def test_bad_out_raises():
    A, W, offs = _inputs()
    with pytest.raises(ValueError, match="shape"):
        _validate(A, W, offs, out=torch.empty(10, 31, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="bfloat16"):
        _validate(A, W, offs, out=torch.empty(10, 32))
    with pytest.raises(ValueError, match="out is on meta"):
        _validate(A, W, offs, out=torch.empty(10, 32, dtype=torch.bfloat16, device="meta"))
    with pytest.raises(ValueError, match="contiguous"):
        _validate(A, W, offs, out=torch.empty(32, 10, dtype=torch.bfloat16).t())
    with pytest.raises(ValueError, match="16-byte aligned"):
        _validate(A, W, offs, out=_misaligned(torch.empty(10, 32, dtype=torch.bfloat16)))


def test_out_must_not_alias_the_inputs():
    # n == k, so A itself has out's shape: writing out would overwrite rows other tiles still read
    A, W, offs = _inputs(k=64, n=64)
    with pytest.raises(ValueError, match="overlaps A"):
        _validate(A, W, offs, out=A)
    with pytest.raises(ValueError, match="overlaps W"):
        _validate(A, W, offs, out=W.view(-1)[64 : 64 + 10 * 64].view(10, 64))
    _validate(A, W, offs, out=torch.empty(10, 64, dtype=torch.bfloat16))  # separate memory is fine


def test_int64_offsets_and_cu_seqlens_become_int32_end_offsets():
    A, W, _ = _inputs()
    for offs in (
        torch.tensor([3, 3, 10], dtype=torch.int64),
        torch.tensor([0, 3, 3, 10], dtype=torch.int64),
        torch.tensor([0, 3, 3, 10], dtype=torch.int32),
    ):
        assert _validate(A, W, offs)[4] == [3, 3, 10]
        ends = device_end_offsets(offs, 3)
        assert ends.dtype == torch.int32 and ends.is_contiguous()
        assert ends.tolist() == [3, 3, 10]


def test_row_count_must_fit_the_kernels_int32():
    # meta tensors: shapes and strides without memory
    A = torch.empty(2**31, 8, dtype=torch.bfloat16, device="meta")
    W = torch.empty(1, 8, 8, dtype=torch.bfloat16, device="meta")
    offs = torch.empty(1, dtype=torch.int32, device="meta")
    with pytest.raises(ValueError, match="32-bit"):
        validate(A, W, offs, check=False, device_type="meta")
    assert validate(A[:-1], W, offs, check=False, device_type="meta")[0] == 2**31 - 1


def test_stage_and_config_errors():
    A, W, offs = _inputs()
    with pytest.raises(ValueError, match="stage"):
        grouped_gemm(A, W, offs, stage=9)
    with pytest.raises(ValueError, match="GemmConfig"):
        grouped_gemm(A, W, offs, config="fast")
    with pytest.raises(ValueError, match="stage"):
        stage_module("sm_90a", 0)


def _one_problem(problems, pattern):
    assert len(problems) == 1, problems
    assert pattern in problems[0], problems


def test_can_implement_sm90():
    assert can_implement(GemmConfig(arch="sm_90a"), 3, 4096, 6144) == []
    # 256-row tiles: two cooperative warpgroups of 128 rows, tile_n registers a thread
    assert can_implement(GemmConfig(arch="sm_90a", tile_m=256), 3, 4096, 6144) == []
    wide = GemmConfig(arch="sm_90a", tile_m=256, tile_n=256, epilogue="direct_store")
    _one_problem(can_implement(wide, 4, 4096, 6144), "at most 192")
    wide_b = GemmConfig(arch="sm_90a", tile_m=256, epilogue="direct_store", b_k_tiles=2)
    assert any("cooperative" in p for p in can_implement(wide_b, 6, 4096, 6144))
    # clusters run in the persistent kernel (stage 3 on)
    clustered = GemmConfig(arch="sm_90a", cluster_n=2)
    assert can_implement(clustered, 3, 4096, 6144) == []
    _one_problem(can_implement(clustered, 2, 4096, 6144), "multicast")
    direct = GemmConfig(arch="sm_90a", epilogue="direct_store")
    _one_problem(can_implement(direct, 3, 4096, 6144), "direct register-to-global store arrives")
    assert can_implement(direct, 4, 4096, 6144) == []
    _one_problem(
        can_implement(GemmConfig(arch="sm_90a"), 3, 4100, 6144), "n=4100 is not a multiple of 8"
    )
    _one_problem(can_implement(GemmConfig(arch="sm_90a"), 3, 4096, 0), "k must be positive")
    _one_problem(can_implement(GemmConfig(arch="sm_90a", tile_k=32), 3, 4096, 6144), "swizzle")
    _one_problem(
        can_implement(GemmConfig(arch="sm_90a", ring_depth=7), 3, 4096, 6144), "shared memory"
    )
    # direct_store does not validate epi_tile_n: a reason, not a ZeroDivisionError
    direct = GemmConfig(arch="sm_90a", epilogue="direct_store", epi_tile_n=0)
    _one_problem(can_implement(direct, 4, 4096, 6144), "epi_tile_n")
    # without a shape: the rules of the configuration alone
    assert can_implement(GemmConfig(arch="sm_90a"), 3) == []
    _one_problem(can_implement(GemmConfig(arch="sm_90a", tile_k=32), 3), "swizzle")


@pytest.mark.parametrize(
    "stage, kwargs, pattern",
    [
        (1, dict(tile_m=256, tile_n=128, cta_group=2), "(cta_group=2) arrives in stage 3"),
        (2, dict(tile_m=256, tile_n=128, cta_group=2), "(cta_group=2) arrives in stage 3"),
        (3, dict(tile_n=512, tile_m=256, cta_group=2), "two MMA atoms"),
        (3, dict(epilogue="direct_store"), "direct register-to-global store arrives in stage 4"),
        (3, dict(b_k_tiles=2), "B ring entry spanning several K tiles arrives in stage 6"),
        (1, dict(ring_depth=7), "shared memory"),
    ],
)
def test_can_implement_sm100_rejects(stage, kwargs, pattern):
    _one_problem(api.can_implement(GemmConfig(**kwargs), stage, 4096, 6144), pattern)


def test_can_implement_sm100_accepts_what_the_stages_compile():
    # the API resolves configs first: acc_buffers=2 at 128 x 128 is pinned to 1 for stages 1, 2
    default = api.default_config("sm_100a")
    assert default.acc_buffers == 2
    for stage in (1, 2, 3):
        assert api.can_implement(default, stage, 4096, 6144) == []
    pair = GemmConfig(tile_m=256, tile_n=256, cta_group=2).resolved()
    assert api.can_implement(pair, 3, 4096, 6144) == []
    _one_problem(api.can_implement(default, 3, 4100, 6144), "n=4100 is not a multiple of 8")
    # each architecture's rules refuse the other's configurations
    _one_problem(can_implement(default, 3, 4096, 6144), "the config is for sm_100a")


@pytest.fixture
def fake_gpu(monkeypatch):
    """``grouped_gemm`` on CPU tensors as if on a GPU of a chosen arch; records compiles/launches.

    Compiling and launching are replaced by recorders, so a test sees whether the call got that
    far: every ValueError must come before either.
    """
    calls = {"compiled": [], "launched": []}
    state = types.SimpleNamespace(arch="sm_90a", calls=calls, a_index=[])
    monkeypatch.setattr(api, "validate", functools.partial(validate, device_type="cpu"))
    monkeypatch.setattr(api, "arch_of", lambda device: state.arch)
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda device: types.SimpleNamespace(multi_processor_count=132),
    )

    def compiled(arch, stage, config, n, k, experts, sms):
        calls["compiled"].append((arch, stage, config, n, k, experts, sms))
        return "fn"

    def module(arch, stage):
        def launch(fn, A, W, end_offsets, out, host_offsets, stream, a_index=None):
            calls["launched"].append((stage, end_offsets, host_offsets))
            state.a_index.append(a_index)

        return types.SimpleNamespace(launch=launch)

    import pearl_moe.kernels.host as host

    monkeypatch.setattr(api, "compiled_kernel", compiled)
    monkeypatch.setattr(api, "stage_module", module)
    monkeypatch.setattr(host, "cuda_stream", lambda device=None: None)
    return state


@pytest.mark.parametrize(
    "arch, kwargs, pattern",
    [
        ("sm_90a", dict(arch="sm_100a"), "config is for sm_100a but the GPU is sm_90a"),
        ("sm_100a", dict(arch="sm_90a"), "config is for sm_90a but the GPU is sm_100a"),
        ("sm_90a", dict(arch="sm_90a", tile_m=256, tile_n=256), "at most 192"),
        ("sm_100a", dict(epilogue="direct_store"), r"arrives in stage 4 \(asked for stage 3\)"),
        ("sm_100a", dict(tile_m=256, tile_n=256, cta_group=2, stage=1), "arrives in stage 3"),
    ],
)
def test_grouped_gemm_rejects_configs_before_compiling(fake_gpu, arch, kwargs, pattern):
    fake_gpu.arch = arch
    kwargs = dict(kwargs)
    stage = kwargs.pop("stage", 3)
    A, W, offs = _inputs()
    with pytest.raises(ValueError, match=pattern):
        grouped_gemm(A, W, offs, config=GemmConfig(**kwargs), stage=stage)
    assert fake_gpu.calls == {"compiled": [], "launched": []}


def _aligned_16_not_32(rows, n):
    """A contiguous bf16 (rows, n) tensor whose data pointer is 16 bytes past a 32-byte boundary."""
    flat = torch.zeros(rows * n + 32, dtype=torch.bfloat16)
    skip = ((16 - flat.data_ptr()) % 32) // 2
    return flat[skip : skip + rows * n].view(rows, n)


def test_output_alignment_comes_from_the_config(fake_gpu):
    fake_gpu.arch = "sm_100a"
    A, W, offs = _inputs(n=64)
    out = _aligned_16_not_32(A.shape[0], 64)
    assert out.data_ptr() % 32 == 16
    wide = stage_config("sm_100a", 4)  # 256-bit direct stores
    with pytest.raises(ValueError, match="32-byte aligned"):
        grouped_gemm(A, W, offs, out=out, stage=4, config=wide)
    assert fake_gpu.calls["launched"] == []
    # 128-bit direct stores and the TMA-store stages need only 16 bytes
    grouped_gemm(A, W, offs, out=out, stage=4, config=wide.with_(store_bits=128))
    grouped_gemm(A, W, offs, out=out, stage=3)
    assert len(fake_gpu.calls["launched"]) == 2


def test_grouped_gemm_rejects_host_offsets_before_compiling(fake_gpu):
    A, W, offs = _inputs()
    with pytest.raises(ValueError, match="differ"):
        grouped_gemm(A, W, offs, stage=1, host_offsets=[3, 4, 10])
    with pytest.raises(ValueError, match="monotone"):
        grouped_gemm(A, W, offs, stage=1, check=False, host_offsets=[4, 3, 10])
    with pytest.raises(ValueError, match="out overlaps A"):
        A2, W2, offs2 = _inputs(n=64)
        grouped_gemm(A2, W2, offs2, out=A2)
    assert fake_gpu.calls == {"compiled": [], "launched": []}


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_grouped_gemm_dispatch_after_validation(fake_gpu, arch):
    fake_gpu.arch = arch
    A, W, _ = _inputs()
    cu = torch.tensor([0, 3, 3, 10], dtype=torch.int64)
    out = grouped_gemm(A, W, cu, stage=1, check=False)
    assert out.shape == (10, 32) and out.dtype == torch.bfloat16
    grouped_gemm(A, W, cu, stage=3, check=False)
    (c1, c3) = fake_gpu.calls["compiled"]
    assert c1[:2] == (arch, 1) and c3[:2] == (arch, 3)
    assert c1[2] == api.default_config(arch) and c1[3:] == (32, 64, 3, 132)
    (l1, l3) = fake_gpu.calls["launched"]
    # stage 1 gets host offsets even with check=False (copied once); stage 3 does not need them
    assert l1[0] == 1 and l1[2] == [3, 3, 10]
    assert l3[0] == 3 and l3[2] is None
    for _stage, ends, _host in (l1, l3):
        assert ends.dtype == torch.int32 and ends.tolist() == [3, 3, 10]
    # no rows: nothing to compile or launch, an empty output all the same
    empty = grouped_gemm(A[:0], W, torch.zeros(3, dtype=torch.int32))
    assert empty.shape == (0, 32)
    assert len(fake_gpu.calls["compiled"]) == 2 and len(fake_gpu.calls["launched"]) == 2


def test_schedule_covers_every_row_once():
    counts = [0, 37, 0, 5, 130, 0, 1, 256]
    n, tile_m, tile_n = 2816, 128, 128
    work = schedule_tiles(counts, n, tile_m, tile_n)
    covered = {}
    for _e, _m_tile, n_tile, first, valid in work:
        assert 1 <= valid <= tile_m
        for r in range(first, first + valid):
            covered[(r, n_tile)] = covered.get((r, n_tile), 0) + 1
    assert set(covered.values()) == {1}
    assert len(covered) == sum(counts) * -(-n // tile_n)
    per_cta = schedule_tiles(counts, n, tile_m, tile_n, ctas=132)
    assert sum(len(w) for w in per_cta) == len(work)
    assert grouped_grid(sum(counts), n, len(counts), GemmConfig(arch="sm_90a")) == (4, 22, 8)


@pytest.mark.parametrize("n_group", [2, 4, 8, 16])
def test_a_grouped_tile_order_covers_every_tile_once_and_snakes_over_m(n_group):
    """``n_group``: every (m tile, n tile) of an expert exactly once; inside a group the n tile
    varies fastest; the next group starts on the m tile the last one ended on."""
    from pearl_moe.kernels.host import tile_in_expert

    for m_tiles, n_tiles in [(1, 1), (3, 5), (7, 9), (32, 40), (2, 16), (5, 17)]:
        order = [tile_in_expert(t, m_tiles, n_tiles, n_group) for t in range(m_tiles * n_tiles)]
        assert sorted(order) == [(m, n) for m in range(m_tiles) for n in range(n_tiles)]
        width = min(n_group, n_tiles)
        assert [n for _, n in order[:width]] == list(range(width))  # n fastest in a group
        if n_tiles > n_group:  # the next group begins where the first ended: the last m tile
            assert order[m_tiles * n_group][0] == order[m_tiles * n_group - 1][0] == m_tiles - 1
    assert tile_in_expert(5, 3, 4, 0) == (2, 1)  # 0: the m tile fastest, as before
    counts = [0, 37, 0, 5, 130, 0, 1, 256]
    plain = schedule_tiles(counts, 2816, 128, 128)
    grouped = schedule_tiles(counts, 2816, 128, 128, n_group=n_group)
    assert sorted(plain) == sorted(grouped) and plain != grouped


def test_the_stage_table_maps_every_stage_to_one_of_three_kernel_modules():
    """Stages 4-7 are options of the persistent kernel: no module per stage, the same module
    names on both architectures, reached through the explicit family mapping."""
    from pearl_moe.kernels import api
    from pearl_moe.kernels.ladder import KERNEL_STAGES, kernel_module_name

    assert {s.module for s in KERNEL_STAGES.values()} == {
        "stage1_gemm",
        "stage2_grouped",
        "stage3_persistent",
    }
    assert all(KERNEL_STAGES[s].options for s in range(4, 8))
    assert not any(KERNEL_STAGES[s].options for s in range(1, 4))
    for arch, package in (("sm_90a", "sm90"), ("sm_100a", "sm100")):
        assert kernel_module_name(arch, 6) == f"pearl_moe.kernels.{package}.stage3_persistent"
        for stage in KERNEL_STAGES:
            kernel = api.stage_module(arch, stage)
            assert kernel.stage == stage and kernel.arch == arch
            assert kernel.module.__name__ == kernel_module_name(arch, stage)
    with pytest.raises(ValueError, match="arch must be one of"):
        api.stage_module("sm_80", 3)
    pkgs = [Path(api.__file__).parent / d for d in ("sm90", "sm100")]
    assert not [f.name for d in pkgs for f in d.glob("stage[4-9]*.py")]  # no alias modules


def test_a_clustered_kernel_needs_a_whole_number_of_clusters():
    from pearl_moe.kernels.sm90.stage3_persistent import build

    clustered = GemmConfig(arch="sm_90a", cluster_n=2)
    assert build(clustered, 132).sms == 132
    with pytest.raises(ValueError, match="whole number of clusters"):
        build(clustered, 131)


# ---------------------------------------------------------------------------- a_index (gather_a)
def _gather_inputs(x_rows=5, rows=10, k=64, n=32):
    """x (x_rows, k), W (3, n, k), end offsets of 3 experts (one empty) over ``rows`` rows, and a
    top-k style index: every row of x, some twice."""
    x = torch.randn(x_rows, k).to(torch.bfloat16)
    W = torch.randn(3, n, k).to(torch.bfloat16)
    offs = torch.tensor([3, 3, rows], dtype=torch.int32)
    idx = (torch.arange(rows, dtype=torch.int32) * 3) % x_rows
    return x, W, offs, idx


def _validate_gather(x, W, offs, idx, out=None, check=True):
    return validate(x, W, offs, out, check, device_type="cpu", a_index=idx)


def test_a_index_sets_the_rows_and_passes_good_inputs():
    x, W, offs, idx = _gather_inputs()
    assert _validate_gather(x, W, offs, idx) == (10, 32, 64, 3, [3, 3, 10])
    out = torch.empty(10, 32, dtype=torch.bfloat16)
    assert _validate_gather(x, W, offs, idx, out=out)[0] == 10
    with pytest.raises(ValueError, match="shape"):  # out has the index's rows, not x's
        _validate_gather(x, W, offs, idx, out=torch.empty(5, 32, dtype=torch.bfloat16))
    # check=False copies nothing to the host: values are not inspected, only dtype/shape/device
    bad = idx.clone()
    bad[0] = 5
    assert _validate_gather(x, W, offs, bad, check=False)[4] is None


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda i: i.long(), "a_index must be int32"),
        (lambda i: i.float(), "a_index must be int32"),
        (lambda i: i.view(2, 5), "a_index must be 1-D"),
        (lambda i: i.to("meta"), "a_index is on meta"),
        (lambda i: i.tolist(), "a_index must be a torch.Tensor"),
        (lambda i: torch.cat([i, i])[::2], "contiguous"),
        (lambda i: i[:9], "a_index has 9 entries"),
        (lambda i: torch.where(i == 4, 5, i).int(), r"a_index holds 5, outside \[0, 5\)"),
        (lambda i: torch.where(i == 4, -1, i).int(), r"a_index holds -1, outside \[0, 5\)"),
    ],
)
def test_bad_a_index_raises_value_error(mutate, message):
    x, W, offs, idx = _gather_inputs()
    with pytest.raises(ValueError, match=message):
        _validate_gather(x, W, offs, mutate(idx))


def test_out_must_not_alias_a_index():
    x, W, offs, idx = _gather_inputs(n=32)
    out = torch.empty(10, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="overlaps a_index"):
        _validate_gather(x, W, offs, out.view(-1)[:20].view(torch.int32)[:10], out=out)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(a_index=torch.arange(10, dtype=torch.int64)), "a_index must be int32"),
        (dict(a_index=torch.full((10,), 7, dtype=torch.int32)), r"outside \[0, 5\)"),
        (dict(config=GemmConfig(arch="sm_90a", epilogue="direct_store")), "gather_a=True"),
        (dict(stage=2), "arrives in stage 3"),
        (dict(arch="sm_100a"), "sm_90a kernels only"),
    ],
)
def test_grouped_gemm_rejects_bad_gathers_before_compiling(fake_gpu, kwargs, pattern):
    x, W, offs, idx = _gather_inputs()
    kwargs = dict(kwargs)
    fake_gpu.arch = kwargs.pop("arch", "sm_90a")
    kwargs.setdefault("a_index", idx)
    with pytest.raises(ValueError, match=pattern):
        grouped_gemm(x, W, offs, **kwargs)
    assert fake_gpu.calls == {"compiled": [], "launched": []}


def test_grouped_gemm_gathers_with_a_gather_config(fake_gpu):
    x, W, offs, idx = _gather_inputs()
    out = grouped_gemm(x, W, offs, a_index=idx, stage=4)
    assert out.shape == (10, 32)
    cfg = GemmConfig(arch="sm_90a", gather_a=True)  # the TMA store, 128 x 128
    grouped_gemm(x, W, offs, a_index=idx, config=cfg)
    (c4, c3) = fake_gpu.calls["compiled"]
    assert c4[1] == 4 and c4[2] == api.default_config("sm_90a", 4).with_(gather_a=True)
    assert c3[1] == 3 and c3[2] == cfg.resolved()
    assert all(i is idx for i in fake_gpu.a_index)
    # a stage whose own configuration cannot gather (16-row swapped tiles at stage 5 on: a
    # tile_m below 64) gets the plain 128 x 128 direct-store tile with the gather
    picked = api.with_gather(stage_config("sm_90a", 6).with_(tile_m=16, swap_ab=True), 32, 64, 6)
    assert picked.gather_a and (picked.tile_m, picked.tile_n, picked.epilogue) == (
        128,
        128,
        "direct_store",
    )
    # a prefill tile keeps its shape and drops what the gather cannot take
    s6 = stage_config("sm_90a", 6).with_(tile_m=128, tile_n=256, activation="swiglu")
    for config in (s6, s6.with_(b_k_tiles=1, cluster_m=2), s6.with_(shift_a_box=True)):
        kept = api.with_gather(config, 4096, 6144)
        assert (kept.tile_m, kept.tile_n, kept.b_k_tiles, kept.cluster_m) == (128, 256, 1, 1)
        assert kept.gather_a and not kept.shift_a_box and kept.activation == "swiglu"
        assert autotune.stage_for(kept, 4096, 6144) == 4
    # so does a 128-row split-accumulator tile; a 64-row one takes the plain 128 x 128 gather tile
    s7 = stage_config("sm_90a", 7)
    kept = api.with_gather(s7.with_(tile_m=128, tile_n=192), 4096, 6144)
    assert (kept.tile_m, kept.tile_n, kept.acc_slots, kept.b_k_tiles) == (128, 192, 2, 1)
    assert autotune.stage_for(kept, 4096, 6144) == 7
    narrow = api.with_gather(s7, 4096, 6144)
    assert (narrow.tile_m, narrow.tile_n, narrow.acc_slots) == (128, 128, 1)
    # without a_index nothing is passed (the other kernels' launch takes no such argument)
    grouped_gemm(*_inputs(), stage=3)
    assert fake_gpu.a_index[-1] is None
    launched = len(fake_gpu.calls["launched"])
    with pytest.raises(ValueError, match="no a_index"):
        grouped_gemm(*_inputs(), config=cfg)
    assert len(fake_gpu.calls["launched"]) == launched


def test_can_implement_is_one_function_that_asks_the_configs_architecture():
    """``api.can_implement(config, stage, n, k)`` is the dispatcher's, and it answers with the
    rules of ``config.arch``: the same reasons as that architecture's own ``can_implement``."""
    from pearl_moe.kernels import dispatch
    from pearl_moe.kernels.sm100.common import can_implement as sm100_can_implement

    assert api.can_implement is dispatch.can_implement
    hopper = GemmConfig(arch="sm_90a", tile_k=32)
    blackwell = GemmConfig(tile_n=24, epi_tile_n=8)
    assert api.can_implement(hopper, 3, 4096, 6144) == can_implement(hopper, 3, 4096, 6144)
    assert api.can_implement(blackwell, 3, 4096, 6144) == sm100_can_implement(
        blackwell, 3, 4096, 6144
    )
    _one_problem(sm100_can_implement(hopper, 3, 4096, 6144), "the config is for sm_90a")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_the_shared_rules_name_the_shape_they_refuse(arch):
    """n and k that TMA cannot address, and a fused activation's n that holds no whole blocks of
    gate and up, are refused with the value in the reason, on both architectures; without a
    shape the configuration alone is judged."""
    fused = stage_config(arch, 4).with_(activation="swiglu").resolved()
    (why,) = [p for p in api.can_implement(fused, 4, 4104, 6144) if "gate and up" in p]
    assert "4104 rows" in why and "multiple of 16" in why and "swiglu" in why
    assert api.can_implement(fused, 4, 4096, 6144) == []
    assert api.can_implement(fused, 4) == []
    _one_problem(api.can_implement(fused, 4, 4096, 6150), "k=6150 is not a multiple of 8")
    assert any(
        "fused gated activation" in p and "arrives" in p for p in api.can_implement(fused, 3)
    )


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_the_split_accumulator_needs_the_direct_store_on_both_architectures(arch):
    """One rule for both kernel families (``rules.shared_problems``); a ``GemmConfig`` may still
    describe such a tile (the course draws its TMEM)."""
    split = stage_config(arch, 7).with_(epilogue="tma_store").resolved()
    assert split.acc_slots == 2
    (why,) = [p for p in api.can_implement(split, 7, 4096, 6144) if "acc_slots=2" in p]
    assert "needs epilogue='direct_store'" in why


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_pdl_is_a_launch_option_of_the_persistent_kernel(fake_gpu, arch):
    """``pdl=True`` reaches the compiled kernel as ``GemmConfig.pdl`` (its key, so the serial
    kernel stays apart); the kernels before the persistent one refuse it before anything is
    compiled."""
    fake_gpu.arch = arch
    A, W, offs = _inputs()
    grouped_gemm(A, W, offs, check=False, pdl=True)
    grouped_gemm(A, W, offs, check=False)
    (first, second) = fake_gpu.calls["compiled"]
    assert first[2].pdl and not second[2].pdl
    assert first[2].with_(pdl=False) == second[2]  # the same tile, only the launch differs
    with pytest.raises(ValueError, match=r"programmatic dependent launch.*arrives in stage 3"):
        grouped_gemm(A, W, offs, check=False, stage=2, pdl=True)
    with pytest.raises(ValueError, match="pdl must be True or False"):
        grouped_gemm(A, W, offs, check=False, pdl="no")
    assert len(fake_gpu.calls["compiled"]) == 2 and len(fake_gpu.calls["launched"]) == 2
