"""CPU checks of the public grouped_gemm: every bad input is a ValueError raised before a launch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pearl_moe.config import GemmConfig  # noqa: E402
from pearl_moe.kernels import grouped_gemm  # noqa: E402
from pearl_moe.kernels.api import stage_module, validate  # noqa: E402
from pearl_moe.kernels.host import grouped_grid, schedule_tiles  # noqa: E402
from pearl_moe.kernels.sm90.common import can_implement  # noqa: E402


def _inputs(rows=10, k=64, n=32, experts=3):
    A = torch.randn(rows, k).to(torch.bfloat16)
    W = torch.randn(experts, n, k).to(torch.bfloat16)
    offs = torch.tensor([3, 3, rows], dtype=torch.int32)
    return A, W, offs


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


def test_stage_and_config_errors():
    A, W, offs = _inputs()
    with pytest.raises(ValueError, match="stage"):
        grouped_gemm(A, W, offs, stage=9)
    with pytest.raises(ValueError, match="GemmConfig"):
        grouped_gemm(A, W, offs, config="fast")
    with pytest.raises(ValueError, match="stage"):
        stage_module("sm_90a", 0)


def test_can_implement_sm90():
    assert can_implement(GemmConfig(arch="sm_90a"), 4096, 6144) == []
    assert can_implement(GemmConfig(arch="sm_90a", tile_m=256), 4096, 6144)
    assert can_implement(GemmConfig(arch="sm_90a", epilogue="direct_store"), 4096, 6144)
    assert can_implement(GemmConfig(arch="sm_90a"), 4100, 6144)


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
