"""Which GPUs the kernels accept, the exact target each is compiled for, and the persistent grid."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import pytest

from pearl_moe.config import GemmConfig
from pearl_moe.kernels import compile_cache, targets
from pearl_moe.kernels.ladder import stage_config


@pytest.mark.parametrize(
    "capability, expected",
    [((9, 0), ("sm_90a", "sm_90a")), ((10, 0), ("sm_100a", "sm_100a")),
     ((10, 3), ("sm_100a", "sm_103a"))],
)  # fmt: skip
def test_supported_capabilities(capability, expected):
    assert targets.target_for_capability(*capability) == expected


@pytest.mark.parametrize("capability", [(8, 0), (9, 1), (10, 1), (11, 0), (12, 0)])
def test_other_gpus_are_refused_with_the_reason(capability):
    with pytest.raises(ValueError, match=f"this GPU is {capability[0]}.{capability[1]}"):
        targets.target_for_capability(*capability)


def _fake_gpu(monkeypatch, capability):
    torch = pytest.importorskip("torch")
    targets._capability.cache_clear()
    monkeypatch.setattr(targets, "_capability", lambda index: capability)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_a_b300_compiles_the_sm100a_kernels_for_sm103a(monkeypatch):
    _fake_gpu(monkeypatch, (10, 3))
    monkeypatch.delenv("CUTE_DSL_ARCH", raising=False)
    assert targets.gpu_target("cuda:0") == ("sm_100a", "sm_103a")
    assert targets.compile_target("sm_100a") == "sm_103a"
    assert targets.compile_target("sm_90a") == "sm_90a"  # not this GPU's family
    # a forced target that is not the GPU's is refused before anything is compiled
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_100a")
    with pytest.raises(ValueError, match="this GPU needs sm_103a"):
        targets.gpu_target("cuda:0")


def test_cache_keys_name_the_compile_target(monkeypatch):
    config = stage_config("sm_100a", 3).resolved()
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_100a")
    b200 = compile_cache.kernel_key("sm_100a", 3, config, 4096, 2048, 8, 148)
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_103a")
    b300 = compile_cache.kernel_key("sm_100a", 3, config, 4096, 2048, 8, 148)
    assert b200 != b300, "a B200's cubin must never be loaded on a B300"


def test_persistent_grid_without_a_device():
    one_cta = GemmConfig(tile_m=128, tile_n=128)
    pair = GemmConfig(tile_m=256, tile_n=256, cta_group=2)
    assert targets.persistent_ctas("sm_100a", one_cta, 148) == 148
    assert targets.persistent_ctas("sm_100a", pair, 148) == 148
    assert targets.persistent_ctas("sm_100a", pair, 147) == 146  # whole clusters only
    assert targets.persistent_ctas("sm_90a", GemmConfig(arch="sm_90a"), 132) == 132
    clustered = GemmConfig(arch="sm_90a", cluster_n=2)  # sm_90a clusters of two along N
    assert targets.persistent_ctas("sm_90a", clustered, 132) == 132
    assert targets.persistent_ctas("sm_90a", clustered, 131) == 130
    along_m = GemmConfig(arch="sm_90a", cluster_m=2)
    assert targets.persistent_ctas("sm_90a", along_m, 131) == 130


def test_persistent_grid_asks_the_driver_for_clusters(monkeypatch):
    """A GPU whose floor-sweeping leaves fewer SM pairs than sms // 2 gets one wave of clusters."""
    _fake_gpu(monkeypatch, (10, 0))
    monkeypatch.setattr(targets, "max_active_clusters", lambda index, size: 70)
    pair = GemmConfig(tile_m=256, tile_n=256, cta_group=2)
    assert targets.persistent_ctas("sm_100a", pair, 148, "cuda:0") == 140
    one_cta = GemmConfig(tile_m=128, tile_n=128)
    assert targets.persistent_ctas("sm_100a", one_cta, 148, "cuda:0") == 148
    monkeypatch.setattr(targets, "max_active_clusters", lambda index, size: 60)
    clustered = GemmConfig(arch="sm_90a", cluster_n=2)
    assert targets.persistent_ctas("sm_90a", clustered, 132, "cuda:0") == 120
    assert targets.persistent_ctas("sm_90a", GemmConfig(arch="sm_90a"), 132, "cuda:0") == 132


def test_grouped_gemm_launches_the_clusters_that_fit(monkeypatch):
    torch = pytest.importorskip("torch")
    from pearl_moe.kernels import api

    seen = {}
    monkeypatch.setattr(
        api,
        "validate",
        lambda A, W, o, out, check, activation=None, a_index=None: (
            10,
            64,
            64,
            2,
            [5, 10] if check else None,
        ),
    )
    monkeypatch.setattr(api, "arch_of", lambda device: "sm_100a")
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda d: types.SimpleNamespace(multi_processor_count=148),
    )
    monkeypatch.setattr(api, "persistent_ctas", lambda arch, cfg, sms, dev: 140)
    monkeypatch.setattr(api, "compiled_kernel", lambda *key: seen.setdefault("key", key))
    monkeypatch.setattr(
        api, "stage_module", lambda arch, st: types.SimpleNamespace(launch=lambda *a: None)
    )
    import pearl_moe.kernels.host as host

    monkeypatch.setattr(host, "cuda_stream", lambda device=None: None)
    monkeypatch.setattr(host, "device_end_offsets", lambda offs, e: offs)
    A = torch.zeros(10, 64, dtype=torch.bfloat16)
    W = torch.zeros(2, 64, 64, dtype=torch.bfloat16)
    pair = stage_config("sm_100a", 3).with_(tile_m=256, tile_n=256, cta_group=2)
    api.grouped_gemm(A, W, torch.tensor([5, 10], dtype=torch.int32), config=pair, stage=3)
    assert seen["key"][-1] == 140


def test_sm103a_compiles_the_blackwell_stages(tmp_path):
    """The B300 target: the same kernels, built for sm_103a (tcgen05 MMAs in the SASS)."""
    code = textwrap.dedent(
        """
        from pearl_moe.kernels.api import stage_module
        from pearl_moe.kernels.ladder import stage_config
        for st in (3, 7):
            mod = stage_module("sm_100a", st)
            c = mod.compile_fake(stage_config("sm_100a", st).resolved(), 0, 4096, 2048, 8)
            targets = [ln for ln in c.artifacts.PTX.splitlines() if ln.startswith(".target")]
            print(st, targets, "UTC" in c.artifacts.SASS and "MMA" in c.artifacts.SASS)
        """
    )
    env = dict(os.environ, CUTE_DSL_ARCH="sm_103a", CUTE_DSL_KEEP="ptx,sass")
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600,
        cwd=tmp_path,  # the kept PTX and SASS land there, not in the checkout
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    assert lines == ["3 ['.target sm_103a'] True", "7 ['.target sm_103a'] True"], res.stdout
