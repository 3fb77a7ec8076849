"""The layer under ``torch.compile`` on the CPU: its experts are one custom op
(``torch.ops.pearl_moe.moe_experts``, with a fake implementation), so a model containing
:class:`~pearl_moe.moe.MoE` or a call of :func:`~pearl_moe.moe.moe_forward` compiles as one graph
(``fullgraph=True`` fails on any break) and gives the eager output. The ``aot_eager`` backend keeps
the test fast; the GPU suite compiles with the default backend."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pearl_moe.moe import MoE, moe_forward  # noqa: E402


class Block(torch.nn.Module):
    """A transformer block's MoE half: a norm, the layer (with a gated shared expert), residual."""

    def __init__(self, hidden=64):
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden, dtype=torch.bfloat16)
        self.moe = MoE(hidden, 32, 8, 2, backend="loop", shared_intermediate=16, shared_gate=True)

    def forward(self, x):
        return x + self.moe(self.norm(x))


def _ops(graph_module) -> list[str]:
    return [str(n.target) for n in graph_module.graph.nodes if n.op == "call_function"]


def test_a_model_with_the_layer_compiles_to_one_graph():
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(2, 5, 64).bfloat16()
    graphs = []

    def backend(gm, example_inputs):  # records the graph, then runs it as aot_eager does
        graphs.append(gm)
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(fw_compiler=lambda g, _: g)(gm, example_inputs)

    compiled = torch.compile(model, backend=backend, fullgraph=True)
    out = compiled(x)
    assert torch.equal(out, model(x))
    assert len(graphs) == 1 and "pearl_moe.moe_experts" in " ".join(_ops(graphs[0]))
    x2 = torch.randn(2, 5, 64).bfloat16()
    assert torch.equal(compiled(x2), model(x2))  # the same graph on new values


def test_moe_forward_compiles_with_its_routing_and_an_expert_map():
    g = torch.Generator().manual_seed(1)
    w13 = (torch.randn(4, 64, 32, generator=g) * 32**-0.5).bfloat16()
    w2 = (torch.randn(4, 32, 32, generator=g) * 32**-0.5).bfloat16()
    expert_map = torch.tensor([0, -1, 1, 2, -1, 3])
    x = torch.randn(7, 32, generator=g).bfloat16()
    logits = torch.randn(7, 6, generator=g)

    def f(x, logits):
        return moe_forward(x, w13, w2, router_logits=logits, top_k=2, expert_map=expert_map,
                           backend="loop", check=False)  # fmt: skip

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x, logits), f(x, logits))


def test_the_custom_op_passes_torch_library_opcheck():
    """The op's schema, fake implementation and dispatch registrations agree
    (``torch.library.opcheck``)."""
    g = torch.Generator().manual_seed(2)
    w13 = (torch.randn(4, 64, 32, generator=g) * 32**-0.5).bfloat16()
    w2 = (torch.randn(4, 32, 32, generator=g) * 32**-0.5).bfloat16()
    x = torch.randn(5, 32, generator=g).bfloat16()
    ids = torch.tensor([[0, 1], [2, -1], [3, 3], [1, 0], [-1, -1]])
    args = (x, w13, w2, ids, torch.rand(5, 2, generator=g), None, "swiglu", "loop", True,
            "concat", "copy", False)  # fmt: skip
    torch.library.opcheck(torch.ops.pearl_moe.moe_experts.default, args)
    out = torch.ops.pearl_moe.moe_experts(*args)
    assert out.shape == (5, 32) and (out[4] == 0).all()
