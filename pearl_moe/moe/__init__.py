"""The whole MoE layer on the grouped GEMMs: routing metadata on the device, the gather, gate+up,
the gated activation, down, and a deterministic weighted combine (:mod:`pearl_moe.moe.layer`),
checked against a float32 reference layer (:mod:`pearl_moe.moe.reference`)."""

from .layer import BACKENDS, MoE, combine, moe_forward
from .reference import ACTIVATIONS, reference_moe, torch_composition
from .routing import Routing, route_topk, select_experts

__all__ = [
    "ACTIVATIONS",
    "BACKENDS",
    "MoE",
    "Routing",
    "combine",
    "moe_forward",
    "reference_moe",
    "route_topk",
    "select_experts",
    "torch_composition",
]
