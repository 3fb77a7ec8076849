"""The default call on layers no one tuned: every held-out layer of ``pearl_moe.bench.shape_sets`` runs
the configuration the picker chose for it (the vote of the nearest measured shapes), checked
against a float32 reference on fresh random inputs with a poisoned output (``pytest -m gpu``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
        reason="needs a Hopper (sm_90) GPU",
    ),
]

from pearl_moe.bench import shape_sets  # noqa: E402
from pearl_moe.bench.verify import random_inputs, run_checked  # noqa: E402
from pearl_moe.kernels import autotune, grouped_gemm  # noqa: E402

#: Every held-out layer once, at one of the decode, mid and prefill-ish token counts in turn, and
#: skewed routing at 16 tokens (where some experts get many more rows than the picker assumed).
LAYERS = list(dict.fromkeys((c.model, c.projection, c.ep) for c in shape_sets.cases("held-out")))
CASES = [
    shape_sets.LayerCase(model, projection, ep, tokens, routing)
    for i, (model, projection, ep) in enumerate(LAYERS)
    for tokens, routing in [((1, "balanced"), (16, "skewed"), (512, "balanced"))[i % 3]]
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_default_call_is_right_on_held_out_layers(case):
    problem = case.problem(seed=case.tokens)
    choice = autotune.pick("sm_90a", problem.n, problem.k, problem.experts, problem.rows,
                           autotune.gpu_name("cuda"))  # what grouped_gemm picks on this GPU  # fmt: skip
    assert not choice.source.startswith("heuristic"), choice.source
    torch.cuda.empty_cache()
    A, W, offs = random_inputs(problem.counts, problem.n, problem.k, seed=case.tokens)
    res = run_checked(lambda A, W, o, out: grouped_gemm(A, W, o, out=out), A, W, offs,
                      list(problem.offsets))  # fmt: skip
    assert res["ok"], (choice.config.describe(), res)
