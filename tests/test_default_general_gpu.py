"""The default call on layers no one tuned: every held-out layer of ``pearl_moe.bench.shape_sets`` runs
the configuration the picker chose for it, checked against a float32 reference on fresh random
inputs with a poisoned output (``pytest -m gpu``).

On Hopper the pick is the vote of the nearest measured shapes of the GPU's table; on a B200, whose
table does not exist yet (the selftest's tune phase writes it), the heuristic's pick: the call a
B200 user makes before any tuning. Each case runs on the GPU whose family it names; the sm_100a
picks are compiled on a CPU first (``tests/test_compile_gpu_cases.py``).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pearl_moe.bench.verify import random_inputs, run_checked  # noqa: E402
from pearl_moe.diagnostics import gpu_cases  # noqa: E402
from pearl_moe.kernels import autotune, grouped_gemm  # noqa: E402

pytestmark = pytest.mark.gpu
FAMILY = gpu_cases.gpu_family()
#: Every held-out layer once, at one of the decode, mid and prefill-ish token counts in turn, and
#: skewed routing at 16 tokens (where some experts get many more rows than the picker assumed).
CASES = gpu_cases.default_call_cases()


@pytest.mark.parametrize(
    "arch, case",
    [
        pytest.param(
            arch, case, id=f"{arch}-{case.id}",
            marks=pytest.mark.skipif(FAMILY != arch, reason=f"needs a GPU that runs {arch}"),
        )
        for arch in gpu_cases.ARCHS
        for case in CASES
    ],
)  # fmt: skip
def test_the_default_call_is_right_on_held_out_layers(arch, case):
    p = case.problem
    choice = autotune.pick(arch, p.n, p.k, p.experts, p.rows,
                           autotune.gpu_name("cuda"))  # what grouped_gemm picks on this GPU  # fmt: skip
    if arch == "sm_90a":  # the Hopper tables cover these shapes by their neighbours
        assert not choice.source.startswith("heuristic"), choice.source
    torch.cuda.empty_cache()
    A, W, offs = random_inputs(case.counts, case.n, case.k, seed=sum(case.counts) % 1000)
    res = run_checked(lambda A, W, o, out: grouped_gemm(A, W, o, out=out), A, W, offs,
                      offs.tolist())  # fmt: skip
    assert res["ok"], (choice.config.describe(), res)
