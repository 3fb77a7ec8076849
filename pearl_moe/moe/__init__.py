"""The whole MoE layer on the grouped GEMMs: the router's choice, routing metadata on the device,
the gather, gate+up, the gated activation, down, and a deterministic weighted combine
(:mod:`pearl_moe.moe.layer`), checked against a float32 reference layer
(:mod:`pearl_moe.moe.reference`). Hugging Face MoE blocks convert with
:func:`pearl_moe.moe.hf.from_hf` (imported on its own: a model that builds the layer itself
never loads it)."""

from .layer import BACKENDS, MoE, combine, moe_forward
from .reference import ACTIVATIONS, reference_moe, torch_composition
from .routing import Routing, local_ids, route_and_gather, route_topk, select_experts

__all__ = [
    "ACTIVATIONS",
    "BACKENDS",
    "MoE",
    "Routing",
    "combine",
    "local_ids",
    "moe_forward",
    "reference_moe",
    "route_and_gather",
    "route_topk",
    "select_experts",
    "torch_composition",
]
