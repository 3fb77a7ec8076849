"""The MoE layers the default configuration is tuned on, and the ones it is judged on.

A default tuned and judged on the same shapes says little about a user's model. So the public MoE
models of :data:`pearl_moe.workloads.PUBLIC_MODELS` are split, model by model, into two sets that
share no layer:

* ``tuning``: what ``python -m pearl_moe tune --set tuning`` measures, and so what the picker
  (:func:`pearl_moe.kernels.autotune.pick`) learns from, together with the course's models;
* ``held-out``: never given to the tuner; ``python -m pearl_moe bench --set held-out`` times the
  default call on it against every baseline (``results/<GPU>/compare_general.json``);
* ``course``: the course's three models (:data:`pearl_moe.workloads.MODELS`), gate+up under EP=8,
  the 21 shapes of ``results/<GPU>/compare.json`` (six token counts, and 64 tokens skewed).

Each model is split under the expert-parallel degrees of :data:`LAYOUTS` (EP=8 for many experts,
EP=1 where there are at most 16, and EP=1 for a few large ones too, so one GPU holds 8-256
experts), with the gate+up and the down
projection, at the token counts of each set. The two public sets span similar ranges (tuning:
``n`` 1.5k-28.7k, ``k`` 0.8k-14.3k, top-k 2-8; held-out: ``n`` 2.0k-32.8k, ``k`` 1.4k-16.4k,
top-k 1-8; both 8-256 local experts), so a held-out layer has tuned neighbours within about an
octave in each dimension (a test checks it) without being any of them. The tuner never sees a
held-out model: ``tune`` refuses its layers for the package's table under any EP degree.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..workloads import MODELS, PUBLIC_MODELS, GroupedProblem, get_model, make_problem

__all__ = [
    "LayerCase",
    "SETS",
    "TUNING_MODELS",
    "HELD_OUT_MODELS",
    "LAYOUTS",
    "TUNING_TOKENS",
    "TUNING_PREFILL_TOKENS",
    "HELD_OUT_TOKENS",
    "HELD_OUT_DOWN_TOKENS",
    "cases",
    "problems",
    "set_of",
]

#: Models whose layers the tuner measures.
TUNING_MODELS = (
    "Qwen3-30B-A3B",
    "DeepSeek-V3",
    "Mixtral-8x7B",
    "gpt-oss-120b",
    "OLMoE-1B-7B",
    "DBRX",
)
#: Models the tuner never sees: the default is judged on them.
HELD_OUT_MODELS = (
    "Qwen3-235B-A22B",
    "Mixtral-8x22B",
    "GLM-4.5-Air",
    "Phi-3.5-MoE",
    "MiniMax-M2",
    "Llama-4-Scout",
    "Qwen2-57B-A14B",
    "DeepSeek-V2-Lite",
)
#: Expert-parallel degree(s) each public model is split under: (EP, ...) giving 8-256 local experts.
LAYOUTS = {
    "Qwen3-30B-A3B": (8, 1),
    "DeepSeek-V3": (8, 1),
    "Mixtral-8x7B": (1,),
    "gpt-oss-120b": (8,),
    "OLMoE-1B-7B": (1,),
    "DBRX": (1,),
    "Qwen3-235B-A22B": (8, 1),
    "Mixtral-8x22B": (1,),
    "GLM-4.5-Air": (8,),
    "Phi-3.5-MoE": (1,),
    "MiniMax-M2": (8, 1),
    "Llama-4-Scout": (1,),
    "Qwen2-57B-A14B": (8,),
    "DeepSeek-V2-Lite": (1,),
}
TUNING_TOKENS = (1, 16, 64, 256, 1024, 4096)
#: Token counts the tuning set also takes (not the course's set): at 4096 tokens its layers reach
#: 2048 rows per expert, the held-out set's 4096 (Qwen2-57B-A14B under EP=8: top-8 over 8 local
#: experts) and with large n and k only 1024; at 8192 its large layers (DeepSeek-V3, Mixtral-8x7B,
#: gpt-oss-120b, DBRX) reach 2048 and Qwen3-30B-A3B 4096, so that a prefill shape's rows per
#: expert have tuned neighbours within an octave (a test checks it) and the picker interpolates.
TUNING_PREFILL_TOKENS = (8192,)
#: The held-out token counts of the gate+up layers: the decode sizes where a fixed cost shows
#: (1, 16), prefill (4096), and 512, a count no table entry was measured at; the down layers are
#: judged at 16 and 4096 (60 held-out shapes, about two device calls beside the course's 21).
HELD_OUT_TOKENS = (1, 16, 512, 4096)
HELD_OUT_DOWN_TOKENS = (16, 4096)
PROJECTIONS = ("gate_up", "down")
SETS = ("course", "tuning", "held-out")


@dataclass(frozen=True)
class LayerCase:
    """One grouped GEMM of a set: a model's projection under EP=``ep`` at ``tokens`` per GPU."""

    model: str
    projection: str
    ep: int
    tokens: int
    routing: str = "balanced"

    @property
    def id(self) -> str:
        """The bench's problem id (``model|projection|tokens|EPn|routing``)."""
        return f"{self.model}|{self.projection}|{self.tokens}|EP{self.ep}|{self.routing}"

    def problem(self, seed: int = 0) -> GroupedProblem:
        return make_problem(self.model, self.tokens, self.ep, self.routing, self.projection, seed)

    def shape(self) -> tuple[int, int, int]:
        """``(n, k, local experts)`` of the layer."""
        m = get_model(self.model)
        k, n = m.shape(self.projection)
        return n, k, m.local_experts(self.ep)


def cases(name: str, tokens=None, projections=PROJECTIONS) -> list[LayerCase]:
    """The layers of set ``name`` ("course", "tuning", "held-out"), token count by token count in
    the order of ``tokens`` (the set's own by default), so that a run cut short by a deadline has
    covered every layer at the first counts."""
    explicit = tokens is not None
    if name not in SETS:
        raise ValueError(f"unknown shape set {name!r}; the sets are {', '.join(SETS)}")
    if name == "course":
        tokens = tuple(tokens or TUNING_TOKENS)
        layers = [(m, "gate_up", 8) for m in MODELS]
        skewed = [LayerCase(m, "gate_up", 8, 64, "skewed") for m in MODELS if 64 in tokens]
        return [LayerCase(m, p, ep, t) for t in tokens for m, p, ep in layers] + skewed
    else:
        models = TUNING_MODELS if name == "tuning" else HELD_OUT_MODELS
        own = TUNING_TOKENS + TUNING_PREFILL_TOKENS if name == "tuning" else HELD_OUT_TOKENS
        tokens = tuple(tokens or own)
        layers = [(m, p, ep) for m in models for ep in LAYOUTS[m] for p in projections]
    if name == "held-out" and not explicit:
        return [
            LayerCase(m, p, ep, t)
            for t in tokens
            for m, p, ep in layers
            if p == "gate_up" or t in HELD_OUT_DOWN_TOKENS
        ]
    return [LayerCase(m, p, ep, t) for t in tokens for m, p, ep in layers]


def problems(name: str, tokens=None, projections=PROJECTIONS) -> list[GroupedProblem]:
    """:func:`cases` as bench problems."""
    return [c.problem() for c in cases(name, tokens, projections)]


def set_of(model: str) -> str | None:
    """Which set a model's layers belong to ("course", "tuning", "held-out"), None if none."""
    name = get_model(model).name
    if name in MODELS:
        return "course"
    if name in TUNING_MODELS:
        return "tuning"
    if name in HELD_OUT_MODELS:
        return "held-out"
    return None


def _check_split() -> None:
    """The sets are disjoint and name only known models (run at import: a typo is an error)."""
    tuning, held = set(TUNING_MODELS), set(HELD_OUT_MODELS)
    if tuning & held:
        raise AssertionError(f"models in both sets: {sorted(tuning & held)}")
    unknown = (tuning | held | set(LAYOUTS)) - set(PUBLIC_MODELS)
    if unknown or set(LAYOUTS) != tuning | held:
        raise AssertionError(f"shape sets and PUBLIC_MODELS disagree: {sorted(unknown)}")


_check_split()
