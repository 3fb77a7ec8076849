import pytest

from pearl_moe.hardware import B200, GPUS, H100, H200, detect_gpu, get_gpu


def test_specs_match_the_reference_table():
    assert (B200.sms, H200.sms, H100.sms) == (148, 132, 132)
    assert B200.tmem_lanes * B200.tmem_columns * 4 == 256 * 1024 == B200.tmem_bytes
    assert not H200.has_tmem and B200.has_tmem
    assert H200.smem_per_block == 232_448 and H200.l2_bytes == 62_914_560
    # FLOP/clk/SM x SMs x max clock lands just above the datasheet peak, which is quoted at a
    # somewhat lower sustained clock.
    for gpu in GPUS.values():
        derived = gpu.bf16_flop_per_clk_per_sm * gpu.sms * gpu.max_clock_hz
        assert gpu.bf16_dense_flops <= derived <= 1.1 * gpu.bf16_dense_flops, gpu.name


def test_ridge_point_is_lower_on_h200_than_h100():
    # Same math rate, more bandwidth: the H200 turns compute-bound at a lower intensity.
    assert H200.ridge_flop_per_byte < H100.ridge_flop_per_byte
    assert H200.ridge_flop_per_byte == pytest.approx(206, rel=0.01)


@pytest.mark.parametrize(
    "name, spec", [("b200", B200), ("NVIDIA H200", H200), ("H100 80GB HBM3", H100), (H200, H200)]
)
def test_lookup_by_name(name, spec):
    assert get_gpu(name) is spec


def test_unknown_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown GPU"):
        get_gpu("A100")


def test_detect_gpu_matches_torch():
    torch = pytest.importorskip("torch")
    found = detect_gpu()
    if not torch.cuda.is_available():
        assert found is None
    elif found is not None:
        assert found.name in torch.cuda.get_device_name()
