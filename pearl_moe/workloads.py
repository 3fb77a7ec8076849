"""MoE workloads: model shapes, the expert-parallel split, routing, and the grouped problem.

A grouped GEMM multiplies, for every local expert ``e``, the rows routed to it, ``A[rows_e]`` of
shape ``(m_e, k)``, by that expert's weight ``W[e]`` (stored ``(n, k)`` as in ``nn.Linear``) into
``out[rows_e]`` of shape ``(m_e, n)``. Rows are sorted by expert, so an expert's rows are one
contiguous range given by offsets. Two offset conventions are in use:

* torch ``grouped_mm``: ``E`` cumulative *end* offsets, ``offs[e]`` = one past expert ``e``'s last row;
* ``cu_seqlens`` (quack, FlashAttention varlen): ``E + 1`` offsets with a leading 0.

Both are produced here and both are validated with clear ``ValueError`` messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "MoEModel",
    "MODELS",
    "PUBLIC_MODELS",
    "LAYER_MODELS",
    "ROUTINGS",
    "get_model",
    "GroupedProblem",
    "make_problem",
    "route",
    "token_choices",
    "counts_to_offsets",
    "counts_to_cu_seqlens",
    "offsets_to_counts",
    "check_offsets",
    "check_dims",
    "dim_problems",
    "TMA_ALIGN_ELEMS",
]

#: TMA needs every non-innermost stride to be a multiple of 16 bytes: 8 bf16 elements.
TMA_ALIGN_ELEMS = 8
#: TMA global dimensions are 32-bit.
TMA_MAX_DIM = 2**32 - 1


@dataclass(frozen=True)
class MoEModel:
    """Shapes of one MoE layer. ``gate_up`` is (k=hidden, n=2*intermediate); ``down`` the reverse."""

    name: str
    hidden: int
    intermediate: int  # moe_intermediate_size; the fused gate+up projection is twice as wide
    experts: int  # routed experts
    top_k: int
    shared_experts: int
    public_name: str
    source: str

    def shape(self, projection: str = "gate_up") -> tuple[int, int]:
        """(k, n) of one expert's GEMM for ``projection`` ("gate_up" or "down")."""
        if projection == "gate_up":
            return self.hidden, 2 * self.intermediate
        if projection == "down":
            return self.intermediate, self.hidden
        raise ValueError(f"projection must be 'gate_up' or 'down', got {projection!r}")

    def local_experts(self, ep: int) -> int:
        """Experts each GPU holds under expert parallelism of degree ``ep``."""
        if ep < 1 or self.experts % ep:
            raise ValueError(f"EP degree {ep} does not divide {self.name}'s {self.experts} experts")
        return self.experts // ep


MODELS: dict[str, MoEModel] = {
    m.name: m
    for m in (
        MoEModel(
            "GLM 5.3", 6144, 2048, 256, 8, 1, "GLM-5", "the blog: (k, n) = (6144, 4096), top-8"
        ),
        MoEModel(
            "DeepSeek V4 Pro", 7168, 3072, 384, 6, 1, "DeepSeek-V4-Pro", "public config mirror"
        ),
        MoEModel("Kimi K3", 3584, 3072, 896, 16, 2, "Kimi K3", "FlashInfer docs (latent MoE)"),
    )
}

#: Other public MoE models, by the shapes of their released configs (``config.json`` on Hugging
#: Face: hidden size, the routed experts' intermediate size, routed experts, experts per token,
#: shared experts). Not the course's subjects: :mod:`pearl_moe.bench.shape_sets` splits them into the
#: layers the default configuration is tuned on and the layers it is judged on.
PUBLIC_MODELS: dict[str, MoEModel] = {
    m.name: m
    for m in (
        MoEModel("Qwen3-30B-A3B", 2048, 768, 128, 8, 0, "Qwen/Qwen3-30B-A3B", "config.json"),
        MoEModel("DeepSeek-V3", 7168, 2048, 256, 8, 1, "deepseek-ai/DeepSeek-V3", "config.json"),
        MoEModel(
            "Mixtral-8x7B", 4096, 14336, 8, 2, 0, "mistralai/Mixtral-8x7B-v0.1", "config.json"
        ),
        MoEModel("gpt-oss-120b", 2880, 2880, 128, 4, 0, "openai/gpt-oss-120b", "config.json"),
        MoEModel("OLMoE-1B-7B", 2048, 1024, 64, 8, 0, "allenai/OLMoE-1B-7B-0924", "config.json"),
        MoEModel("DBRX", 6144, 10752, 16, 4, 0, "databricks/dbrx-base", "config.json"),
        MoEModel("Qwen3-235B-A22B", 4096, 1536, 128, 8, 0, "Qwen/Qwen3-235B-A22B", "config.json"),
        MoEModel(
            "Mixtral-8x22B", 6144, 16384, 8, 2, 0, "mistralai/Mixtral-8x22B-v0.1", "config.json"
        ),
        MoEModel("GLM-4.5-Air", 4096, 1408, 128, 8, 1, "zai-org/GLM-4.5-Air", "config.json"),
        MoEModel(
            "Phi-3.5-MoE", 4096, 6400, 16, 2, 0, "microsoft/Phi-3.5-MoE-instruct", "config.json"
        ),
        MoEModel("MiniMax-M2", 3072, 1536, 256, 8, 0, "MiniMaxAI/MiniMax-M2", "config.json"),
        MoEModel(
            "Llama-4-Scout", 5120, 8192, 16, 1, 1, "meta-llama/Llama-4-Scout-17B-16E", "config.json"
        ),
        MoEModel("Qwen2-57B-A14B", 3584, 2560, 64, 8, 1, "Qwen/Qwen2-57B-A14B", "config.json"),
        MoEModel(
            "DeepSeek-V2-Lite", 2048, 1408, 64, 6, 2, "deepseek-ai/DeepSeek-V2-Lite", "config.json"
        ),
    )
}

#: Public MoE models the layer bench times (:data:`pearl_moe.bench.layer.VLLM_LAYERS`) that are in
#: neither shape set of :mod:`pearl_moe.bench.shape_sets`: the default is not tuned on them, nor
#: judged on them as held-out layers. From their ``config.json``: Qwen1.5-MoE-A2.7B
#: (``hidden_size`` 2048, ``moe_intermediate_size`` 1408, ``num_experts`` 60,
#: ``num_experts_per_tok`` 4; one shared expert, ``shared_expert_intermediate_size`` 5632 behind a
#: sigmoid gate); DeepSeek-V2 (``hidden_size`` 5120, ``moe_intermediate_size`` 1536,
#: ``n_routed_experts`` 160, ``num_experts_per_tok`` 6, ``n_shared_experts`` 2).
LAYER_MODELS: dict[str, MoEModel] = {
    m.name: m
    for m in (
        MoEModel(
            "Qwen1.5-MoE-A2.7B", 2048, 1408, 60, 4, 1, "Qwen/Qwen1.5-MoE-A2.7B", "config.json"
        ),
        MoEModel("DeepSeek-V2", 5120, 1536, 160, 6, 2, "deepseek-ai/DeepSeek-V2", "config.json"),
    )
}

ROUTINGS = ("balanced", "random", "skewed")


#: Layers given by their shape alone (:func:`shape_model`), by name, so that a problem's
#: ``meta["model"]`` finds its layer again in this process.
SHAPE_MODELS: dict[str, MoEModel] = {}


def shape_model(n: int, k: int, experts: int, top_k: int = 8, ep: int = 8) -> MoEModel:
    """An MoE layer known only by the grouped GEMM one GPU runs: ``experts`` local experts of
    ``(n, k)`` gate+up weights (``n`` = 2 x the intermediate size), ``top_k`` experts per token,
    under EP=``ep`` (so ``ep * experts`` routed experts in all). For tuning a model that is not in
    :data:`MODELS` (``python -m pearl_moe tune --shape n,k,experts``)."""
    for name, value in (("n", n), ("k", k), ("experts", experts), ("top_k", top_k), ("ep", ep)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if n % 2:
        raise ValueError(f"n={n}: a gate+up projection is two halves, so n must be even")
    check_dims(k, n)
    name = f"shape n={n} k={k} E={experts} top{top_k}"
    model = MoEModel(name, k, n // 2, experts * ep, top_k, 0, name, "given by its shape")
    SHAPE_MODELS[name] = model
    return model


def get_model(name: str | MoEModel) -> MoEModel:
    """Look a model up by name, forgiving case, spaces and dashes ("glm", "v4-pro", "kimi k3"):
    the course's :data:`MODELS` first, then :data:`PUBLIC_MODELS` and :data:`LAYER_MODELS` (an
    exact name there, else a unique partial match), or a layer made by :func:`shape_model` by its
    exact name."""
    if isinstance(name, MoEModel):
        return name
    if name in SHAPE_MODELS:
        return SHAPE_MODELS[name]
    key = "".join(ch for ch in name.lower() if ch.isalnum())

    def squash(model: MoEModel) -> str:
        return "".join(ch for ch in model.name.lower() if ch.isalnum())

    for model in MODELS.values():
        full = squash(model)
        if key == full or (key and full.startswith(key)) or (key and key in full):
            return model
    public = [*PUBLIC_MODELS.values(), *LAYER_MODELS.values()]
    exact = [m for m in public if squash(m) == key]
    partial = [m for m in public if key and key in squash(m)]
    if exact or len(partial) == 1:
        return (exact or partial)[0]
    known = ", ".join([*MODELS, *PUBLIC_MODELS, *LAYER_MODELS])
    if len(partial) > 1:
        names = ", ".join(m.name for m in partial)
        raise ValueError(f"model {name!r} is ambiguous: {names}")
    raise ValueError(f"unknown model {name!r}; known: {known}")


# ---------------------------------------------------------------------------- offsets
def _as_int_list(values, what: str) -> list[int]:
    if hasattr(values, "detach"):  # torch tensor
        values = values.detach().cpu().tolist()
    elif isinstance(values, np.ndarray):
        values = values.tolist()
    out = []
    for v in values:
        if isinstance(v, float) and not v.is_integer():
            raise ValueError(f"{what} must be integers, got {v!r}")
        out.append(int(v))
    return out


def counts_to_offsets(counts: Sequence[int]) -> list[int]:
    """Per-expert row counts -> torch ``grouped_mm`` end offsets (no leading 0)."""
    counts = _as_int_list(counts, "row counts")
    for e, c in enumerate(counts):
        if c < 0:
            raise ValueError(f"row count of expert {e} is negative ({c})")
    return np.cumsum(counts, dtype=np.int64).tolist() if counts else []


def counts_to_cu_seqlens(counts: Sequence[int]) -> list[int]:
    """Per-expert row counts -> ``cu_seqlens`` (E + 1 entries, leading 0)."""
    return [0, *counts_to_offsets(counts)]


def check_offsets(
    offsets, rows: int, experts: int | None = None, convention: str = "auto"
) -> list[int]:
    """Validate offsets and return them as end offsets (torch ``grouped_mm`` convention).

    ``convention`` is ``"end"`` (E entries), ``"cu_seqlens"`` (E + 1 entries, leading 0) or
    ``"auto"``: with ``experts`` given, the length decides; without it, a leading 0 means cu_seqlens.
    Raises ``ValueError`` if offsets are negative, decrease, or do not end at ``rows``.
    """
    offs = _as_int_list(offsets, "offsets")
    if convention not in ("auto", "end", "cu_seqlens"):
        raise ValueError(f"convention must be 'auto', 'end' or 'cu_seqlens', got {convention!r}")
    if convention == "auto":
        if experts is not None:
            if len(offs) == experts + 1 and offs and offs[0] == 0:
                convention = "cu_seqlens"
            elif len(offs) == experts:
                convention = "end"
            else:
                raise ValueError(
                    f"expected {experts} end offsets or {experts + 1} cu_seqlens for {experts} "
                    f"experts, got {len(offs)} offsets"
                )
        else:
            convention = "cu_seqlens" if len(offs) > 1 and offs[0] == 0 else "end"
    if convention == "cu_seqlens":
        if not offs or offs[0] != 0:
            raise ValueError("cu_seqlens must start with 0")
        offs = offs[1:]
    if experts is not None and len(offs) != experts:
        raise ValueError(f"expected offsets for {experts} experts, got {len(offs)}")
    if not offs:
        raise ValueError("offsets are empty: a grouped GEMM needs at least one expert")
    previous = 0
    for e, end in enumerate(offs):
        if end < previous:
            raise ValueError(
                f"offsets are not monotone: expert {e} ends at row {end}, before row {previous}"
            )
        previous = end
    if offs[-1] != rows:
        raise ValueError(f"offsets end at row {offs[-1]} but A has {rows} rows")
    return offs


def offsets_to_counts(end_offsets: Sequence[int]) -> list[int]:
    """End offsets -> per-expert row counts (inverse of :func:`counts_to_offsets`)."""
    offs = _as_int_list(end_offsets, "offsets")
    return [b - a for a, b in zip([0, *offs[:-1]], offs, strict=True)]


def dim_problems(k: int, n: int) -> list[str]:
    """What TMA cannot address in ``k`` and ``n`` (16-byte strides, 32-bit extents); empty: both
    are fine. The kernels' ``can_implement`` and :func:`check_dims` ask this one rule."""
    problems = []
    for name, value in (("k", k), ("n", n)):
        if value <= 0:
            problems.append(f"{name} must be positive, got {value}")
        elif value % TMA_ALIGN_ELEMS:
            problems.append(
                f"{name}={value} is not a multiple of {TMA_ALIGN_ELEMS}: TMA needs 16-byte aligned "
                "row strides for bf16 tensors"
            )
        elif value > TMA_MAX_DIM:
            problems.append(f"{name}={value} exceeds TMA's 32-bit dimension limit")
    return problems


def check_dims(k: int, n: int) -> None:
    """Raise ``ValueError`` for dimensions TMA cannot address (:func:`dim_problems`)."""
    problems = dim_problems(k, n)
    if problems:
        raise ValueError("; ".join(problems))


# ---------------------------------------------------------------------------- routing
def token_choices(
    tokens: int, experts: int, top_k: int, routing: str = "balanced", seed: int = 0
) -> np.ndarray:
    """The ``top_k`` distinct experts each of ``tokens`` tokens picks: ``(tokens, top_k)`` ints.

    * ``balanced``: token ``t`` takes experts ``t * top_k + j`` (mod ``experts``), so the
      ``tokens * top_k`` rows spread as evenly as possible;
    * ``random``: every token picks ``top_k`` distinct experts uniformly at random;
    * ``skewed``: expert popularity follows a Zipf-like law (a few hot experts, many cold ones,
      some with no rows), each token picking ``top_k`` distinct experts by popularity.
    """
    if tokens < 0:
        raise ValueError(f"tokens must be non-negative, got {tokens}")
    if experts < 1:
        raise ValueError(f"experts must be positive, got {experts}")
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be between 1 and the {experts} experts, got {top_k}")
    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
    if routing == "balanced":
        return (np.arange(tokens * top_k).reshape(tokens, top_k) % experts).astype(np.int64)
    rng = np.random.default_rng(seed)
    if routing == "random":
        logits = np.zeros(experts)
    else:
        ranks = rng.permutation(experts) + 1
        logits = -1.2 * np.log(ranks)  # popularity ~ rank^-1.2
    # Gumbel top-k draws top_k distinct experts per token with the given popularity.
    gumbel = rng.gumbel(size=(tokens, experts))
    return np.argsort(-(logits + gumbel), axis=1)[:, :top_k].astype(np.int64)


def route(tokens: int, experts: int, top_k: int, routing: str = "balanced", seed: int = 0):
    """Rows per expert when ``tokens`` tokens each pick ``top_k`` of ``experts`` experts
    (:func:`token_choices`; balanced: as even as possible, the first experts one row more)."""
    chosen = token_choices(tokens, experts, top_k, routing, seed)
    return np.bincount(chosen.ravel(), minlength=experts).astype(int).tolist()


# ---------------------------------------------------------------------------- problem
@dataclass(frozen=True)
class GroupedProblem:
    """One grouped GEMM: per-expert rows of A (rows, k) times W (E, n, k) into out (rows, n)."""

    k: int
    n: int
    counts: tuple[int, ...]
    name: str = ""
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        check_dims(self.k, self.n)
        counts = tuple(_as_int_list(self.counts, "row counts"))
        if not counts:
            raise ValueError("a grouped problem needs at least one expert")
        for e, c in enumerate(counts):
            if c < 0:
                raise ValueError(f"row count of expert {e} is negative ({c})")
        object.__setattr__(self, "counts", counts)

    @property
    def experts(self) -> int:
        return len(self.counts)

    @property
    def rows(self) -> int:
        return sum(self.counts)

    @property
    def offsets(self) -> list[int]:
        """torch ``grouped_mm`` end offsets."""
        return counts_to_offsets(self.counts)

    @property
    def cu_seqlens(self) -> list[int]:
        return counts_to_cu_seqlens(self.counts)

    @property
    def active_experts(self) -> int:
        """Experts with at least one row: only their weights must be read."""
        return sum(1 for c in self.counts if c > 0)

    @property
    def flops(self) -> int:
        return 2 * self.rows * self.k * self.n

    def bytes_moved(self, dtype_bytes: int = 2) -> int:
        """Fewest bytes a kernel must move: weights of active experts, A once, out once."""
        weights = self.active_experts * self.n * self.k
        return dtype_bytes * (weights + self.rows * self.k + self.rows * self.n)

    def floor_seconds(self, read_bytes_per_s: float, flops_per_s: float) -> float:
        """max(bytes / bandwidth, FLOPs / peak): no kernel runs much faster than this."""
        return max(self.bytes_moved() / read_bytes_per_s, self.flops / flops_per_s)

    def label(self) -> str:
        return self.name or f"{self.experts}x({self.rows} rows) k={self.k} n={self.n}"


def make_problem(
    model: str | MoEModel,
    tokens_per_gpu: int,
    ep: int = 8,
    routing: str = "balanced",
    projection: str = "gate_up",
    seed: int = 0,
) -> GroupedProblem:
    """The grouped GEMM one GPU runs for ``model`` with ``tokens_per_gpu`` tokens under EP=``ep``.

    Each GPU holds ``experts / ep`` experts and receives ``tokens_per_gpu * top_k`` routed rows,
    the blog's simplification of DP + EP serving (GLM 5.3, 64 tokens, EP=8: 32 experts, 512 rows).
    """
    m = get_model(model)
    k, n = m.shape(projection)
    local = m.local_experts(ep)
    counts = route(tokens_per_gpu, local, min(m.top_k, local), routing, seed)
    meta = dict(
        model=m.name,
        tokens_per_gpu=tokens_per_gpu,
        ep=ep,
        routing=routing,
        projection=projection,
        seed=seed,
    )
    name = f"{m.name} {projection} {tokens_per_gpu} tok/GPU EP{ep} {routing}"
    return GroupedProblem(k=k, n=n, counts=tuple(counts), name=name, meta=meta)
