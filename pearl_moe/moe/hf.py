"""A Hugging Face MoE block as a :class:`~pearl_moe.moe.layer.MoE`: :func:`from_hf`.

Converts ``MixtralSparseMoeBlock``, ``Qwen2MoeSparseMoeBlock`` / ``Qwen3MoeSparseMoeBlock`` and
DeepSeek-V3's ``DeepseekV3MoE`` (and blocks built like them), in the layout of transformers 5 (the
experts' ``gate_up_proj`` ``(experts, 2 x intermediate, hidden)`` and ``down_proj`` tensors) or of
transformers 4 (a ``ModuleList`` of expert MLPs, ``w1``/``w3``/``w2`` or
``gate_proj``/``up_proj``/``down_proj``), with the block's routing read from its router:

* Mixtral: softmax top-k, renormalised;
* Qwen2-MoE / Qwen3-MoE: softmax top-k, renormalised as ``norm_topk_prob`` says; Qwen2-MoE's
  shared expert and its sigmoid gate;
* DeepSeek-V3: sigmoid scores, grouped top-k (``n_group``, ``topk_group``) with
  ``e_score_correction_bias``, ``norm_topk_prob``, ``routed_scaling_factor``; the router in
  float32 as the block computes it; the shared experts.

The block is read through its attributes: this module imports nothing of transformers, and a
block built like these (the same attribute names and routing) converts too. A block whose router
has settings this module does not read (DeepSeek-V2's ``topk_method``: greedy or group-limited
top-k by the group's best score, no renormalisation) or that lacks what it reads is refused with
a ``ValueError``. The weights are held, not copied, where they already are in the layer's layout
(transformers 5's bf16 experts); otherwise they are converted once (:meth:`MoE.from_weights`).
"""

from __future__ import annotations

import torch

from .layer import MoE

__all__ = ["from_hf"]


def _attr(names, *owners, default=None):
    """The first of ``names`` that one of ``owners`` has (not None), else ``default``."""
    for owner in owners:
        for name in names:
            value = getattr(owner, name, None)
            if value is not None:
                return value
    return default


def _activation(act) -> str:
    """The gated activation whose ``act`` this is, told by its values: SiLU (SwiGLU) or the tanh
    GELU (GeGLU)."""
    probe = torch.linspace(-6.0, 6.0, 97)
    F = torch.nn.functional
    for name, want in (("swiglu", F.silu(probe)), ("geglu", F.gelu(probe, approximate="tanh"))):
        if torch.allclose(act(probe), want, atol=1e-6):
            return name
    raise ValueError(f"the activation {act!r} is neither SiLU (SwiGLU) nor the tanh GELU (GeGLU)")


def _mlp(mlp):
    """``(gate, up, down, act)`` of a gated MLP module (an expert or a shared expert)."""
    for g, u, d in (("gate_proj", "up_proj", "down_proj"), ("w1", "w3", "w2")):
        if hasattr(mlp, g):
            weights = (getattr(mlp, name).weight for name in (g, u, d))
            return (*weights, mlp.act_fn)
    raise ValueError(f"{type(mlp).__name__} is not a gated MLP (gate_proj/up_proj/down_proj)")


def _experts(experts):
    """``(gate_up, down, act)`` of the routed experts for :meth:`MoE.from_weights`: ``gate_up`` a
    tensor ``[gate; up]`` or a pair ``(gate, up)`` of tensors or per-expert lists."""
    if isinstance(experts, torch.nn.ModuleList):  # transformers 4: one MLP per expert
        gate, up, down, acts = zip(*(_mlp(m) for m in experts), strict=True)
        return (gate, up), down, acts[0]
    if getattr(experts, "has_bias", False) or not getattr(experts, "has_gate", True):
        raise ValueError("experts with biases or without a gate projection are not supported")
    gate_up, down = experts.gate_up_proj, experts.down_proj
    if getattr(experts, "is_transposed", False):  # (experts, hidden, 2 I): views, converted once
        gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
    if not getattr(experts, "is_concatenated", True):  # gate and up rows alternate
        gate_up = (gate_up[:, 0::2], gate_up[:, 1::2])
    return gate_up, down, experts.act_fn


def from_hf(
    block, *, backend: str = "auto", gate_up_layout: str = "concat",
    return_router_logits: bool | None = None,
) -> MoE:  # fmt: skip
    """The :class:`MoE` layer that computes what ``block`` does (see the module docstring).

    ``return_router_logits``: whether the layer returns ``(hidden, router_logits)`` as the block
    does in transformers 4 (Mixtral, Qwen-MoE) or only the hidden states; None (default): as
    ``block`` does, found by running it on one token. The router runs in the block's dtype (its
    router weight's; float32 for DeepSeek-V3), so the layer routes every token as the block does.
    """
    try:
        return _from_hf(block, backend, gate_up_layout, return_router_logits)
    except AttributeError as err:
        raise ValueError(
            f"{type(block).__name__} is not an MoE block from_hf reads: {err}"
        ) from err


#: Router settings of blocks whose routing the layer does not implement: (attribute, the values
#: it takes). DeepSeek-V2 scores a group by its best expert and never renormalises.
UNREAD = {"topk_method": ("noaux_tc",)}


def _from_hf(block, backend, gate_up_layout, return_router_logits) -> MoE:
    with torch.no_grad():
        gate = block.gate
        config = _attr(("config",), block, block.experts)
        for name, read in UNREAD.items():
            value = _attr((name,), gate, block, config)
            if value is not None and value not in read:
                raise ValueError(
                    f"{type(block).__name__}: {name}={value!r} routes in a way the layer does not "
                    f"implement (it implements {', '.join(map(repr, read))})"
                )
        gate_up, down, act = _experts(block.experts)
        activation = _activation(act)
        kwargs = dict(top_k=int(_attr(("top_k", "num_experts_per_tok"), gate, block, config)),
                      router_dtype=gate.weight.dtype, activation=activation)  # fmt: skip
        bias = getattr(gate, "e_score_correction_bias", None)
        if bias is not None:  # DeepSeek-V3's router
            kwargs.update(
                score="sigmoid", correction_bias=bias, router_dtype=torch.float32,
                n_group=int(_attr(("num_group", "n_group"), gate, config, default=1)),
                topk_group=int(_attr(("topk_group",), gate, config, default=1)),
                routed_scaling=float(_attr(("routed_scaling_factor",), gate, config, default=1.0)),
            )  # fmt: skip
        # Mixtral has no norm_topk_prob: it always renormalises
        kwargs["renormalize"] = bool(_attr(("norm_topk_prob",), gate, block, default=True))
        shared = _attr(("shared_experts", "shared_expert"), block)
        if shared is not None:
            g, u, d, shared_act = _mlp(shared)
            if _activation(shared_act) != activation:
                raise ValueError("the shared expert's activation differs from the experts'")
            kwargs.update(shared_gate_up=torch.cat([g, u]), shared_down=d)
            shared_gate = getattr(block, "shared_expert_gate", None)
            if shared_gate is not None:
                kwargs["shared_gate"] = shared_gate.weight
        if return_router_logits is None:
            hidden = gate.weight.shape[1]
            probe = torch.zeros(1, 1, hidden, dtype=down[0].dtype, device=down[0].device)
            return_router_logits = isinstance(block(probe), tuple)
        w = dict(w_gate_up=gate_up) if isinstance(gate_up, torch.Tensor) else dict(
            w_gate=gate_up[0], w_up=gate_up[1])  # fmt: skip
        return MoE.from_weights(gate.weight, down, **w, backend=backend,
                                gate_up_layout=gate_up_layout,
                                return_router_logits=return_router_logits, **kwargs)  # fmt: skip
