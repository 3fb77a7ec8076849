"""The whole MoE layer, checked and then timed like the grouped GEMMs.

    python -m pearl_moe layer --models all --tokens 1,16,64,256,1024,4096 --skewed-tokens 64 \\
        --impls pearl,torch,quack --out results/H200/moe_layer.json
    python -m pearl_moe layer --steps            # where the time goes at decode (moe_layer_steps)

A layer problem (:class:`LayerProblem`) is one model's routed experts on one GPU under EP: ``x``
``(tokens, hidden)``, each token's ``top_k`` choices among the local experts and their router
weights, and both weight sets, ``w_gate_up`` ``(experts, 2 x intermediate, hidden)`` as ``[gate;
up]`` and ``w_down`` ``(experts, hidden, intermediate)``. Every implementation computes the layer's
output ``(tokens, hidden)`` from them (the router's own GEMM is the same for all and left out;
so are shared experts, a dense MLP beside the routed ones). The layers (:data:`LAYERS`): the
course's three under EP=8 and the five of the comparison with vLLM's ``fused_moe``
(:data:`VLLM_LAYERS`, GLM-5 under EP=8 being the course's GLM 5.3).

The implementations are registered in :mod:`pearl_moe.bench.registry` (``kind="layer"``;
:func:`layer_impl` looks one up):

* ``pearl``: :func:`pearl_moe.moe.moe_forward` on this package's grouped GEMMs;
* ``pearl-fused``: the same with ``act(gate) * up`` computed in the gate+up GEMM's epilogue;
* ``pearl-gather``: ``pearl-fused`` whose gate+up kernel also reads the routed rows of ``x``
  through the gather index (``moe_forward(..., gather="kernel")``): no gathered copy;
* ``torch``: the composition a user writes today (:func:`pearl_moe.moe.torch_composition`);
* ``quack``: quack's pieces composed as SonicMoE composes them: its gated GEMM reading the routed
  rows of ``x`` through an index (``A_idx``) and storing ``silu(gate) * up``, its varlen GEMM for
  the down projection, then the weighted gather-sum (:func:`pearl_moe.moe.combine`);
* ``sonic``: SonicMoE itself, in its own environment and run (``scripts/layer_runs.sh sonic``).

Where the time goes (``--steps-tokens`` in a layer run; ``--steps``, a run of its own): each step
of our forward (router, routing metadata, gather, gate+up, activation, down, combine, and the fused
gate+up that replaces gate+up and activation) in a CUDA graph of its own on the previous step's
output, all timed together in interleaved rounds (:func:`time_layer_steps`); recorded as
implementations ``step:<name>``. ``--steps`` also times the whole ``pearl-fused`` forward in one
graph in the same rounds, and profiles two replays of every graph (:func:`graph_trace`: the
kernels each launches and the idle time between them), so the sum of the steps, the whole layer
and their difference (what the launches cost) sit side by side
(:func:`pearl_moe.bench.compare.step_profile`).

Runs are read and written by :mod:`pearl_moe.results` (schema ``pearl-moe-layer/1``), resumed as
the grouped-GEMM bench's are (:func:`pearl_moe.bench.cli.resume_run`) and summarized by
:mod:`pearl_moe.bench.compare` (``python -m pearl_moe bench --summarize FILE`` on any machine).

Method, as for the grouped GEMMs (:mod:`pearl_moe.bench.harness`): each implementation is first
checked on fresh random inputs against a float32 layer (within twice the torch composition's own
bf16 error, plus a floor); then all are captured in CUDA graphs over rotating input sets and timed
together in interleaved rounds (:func:`pearl_moe.bench.harness.run_rounds`), outputs checked again
after the replays. The floor is ``max(bytes / read ceiling, FLOPs / bf16 ceiling)`` with bytes =
both weight sets of the experts some token picked, ``x`` and the output: what a fully fused layer
must move at least.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..results import LAYER_SCHEMA
from ..workloads import ROUTINGS, get_model, token_choices
from . import layer_impls
from .compare import (  # noqa: F401 - the notebooks' and README tables' names for them
    DECODE_TOKENS,
    FLOOR_GOAL,
    QUACK_GEOMEAN_GOAL,
    TIE,
    TORCH_GOAL,
    cross_run_ratios,
    layer_summary,
)
from .harness import tolerance_for
from .layer_impls import TORCH_GLUE
from .registry import Implementation, ImplementationUnavailable, get_impl
from .verify import relative_error

__all__ = [
    "LayerProblem",
    "LAYER_SCHEMA",
    "LAYERS",
    "COURSE_LAYERS",
    "VLLM_LAYERS",
    "layer_summary",
    "layer_impl",
    "make_layer_inputs",
    "layer_input_sets",
    "reference_layer",
    "check_layer",
    "time_layers",
    "time_layer_steps",
    "step_calls",
    "graph_trace",
    "layer_problems",
    "load_layer_run",
    "main",
]

#: The layers the bench times, ``(model, EP)``: the course's three under EP=8, then the five of
#: issue 40's comparison with vLLM's fused_moe at decode (GLM-5 under EP=8 is the course's GLM
#: 5.3; the others from their public ``config.json``, :data:`pearl_moe.workloads.PUBLIC_MODELS`
#: and :data:`pearl_moe.workloads.LAYER_MODELS`): Qwen3-30B-A3B's 128 experts, Qwen1.5-MoE-A2.7B's
#: 60 (its shared expert is left out, as every shared expert is) and Mixtral-8x7B's 8 on one GPU,
#: DeepSeek-V2's 160 under EP=8 (20 a GPU). None of the public four is in the held-out set
#: (:mod:`pearl_moe.bench.shape_sets`); Qwen3-30B-A3B and Mixtral-8x7B are in the tuning set.
COURSE_LAYERS = (("GLM 5.3", 8), ("DeepSeek V4 Pro", 8), ("Kimi K3", 8))
VLLM_LAYERS = (("Qwen3-30B-A3B", 1), ("Qwen1.5-MoE-A2.7B", 1), ("DeepSeek-V2", 8), ("GLM 5.3", 8),
               ("Mixtral-8x7B", 1))  # fmt: skip
LAYERS = tuple(dict.fromkeys(COURSE_LAYERS + VLLM_LAYERS))
#: ``--models`` names for groups of :data:`LAYERS`.
LAYER_GROUPS = {"all": LAYERS, "course": COURSE_LAYERS, "vllm": VLLM_LAYERS}


@dataclass(frozen=True)
class LayerProblem:
    """One MoE layer's routed experts on one GPU: ``model`` under EP=``ep``, ``tokens`` per GPU."""

    model: str
    tokens: int
    ep: int = 8
    routing: str = "balanced"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {ROUTINGS}, got {self.routing!r}")
        if not isinstance(self.tokens, int) or self.tokens < 1:
            raise ValueError(f"tokens must be a positive integer, got {self.tokens!r}")
        get_model(self.model).local_experts(self.ep)  # raises on an EP that does not divide

    @property
    def hidden(self) -> int:
        return get_model(self.model).hidden

    @property
    def intermediate(self) -> int:
        return get_model(self.model).intermediate

    @property
    def experts(self) -> int:
        return get_model(self.model).local_experts(self.ep)

    @property
    def top_k(self) -> int:
        return min(get_model(self.model).top_k, self.experts)

    @property
    def name(self) -> str:
        return (
            f"{get_model(self.model).name} layer {self.tokens} tok/GPU EP{self.ep} {self.routing}"
        )

    @property
    def id(self) -> str:
        return f"{get_model(self.model).name}|layer|{self.tokens}|EP{self.ep}|{self.routing}"

    def choices(self):
        """``(tokens, top_k)`` expert ids (:func:`pearl_moe.workloads.token_choices`)."""
        return token_choices(self.tokens, self.experts, self.top_k, self.routing, self.seed)

    @property
    def active_experts(self) -> int:
        return len(set(self.choices().ravel().tolist()))

    @property
    def rows(self) -> int:
        return self.tokens * self.top_k

    @property
    def flops(self) -> int:
        """Both GEMMs: ``2 rows hidden 2I`` for gate+up and ``2 rows I hidden`` for down."""
        return 6 * self.rows * self.hidden * self.intermediate

    def bytes_moved(self, dtype_bytes: int = 2) -> int:
        """Fewest bytes a fused layer moves: both weight sets of every active expert, ``x`` in,
        the output out."""
        weights = self.active_experts * 3 * self.hidden * self.intermediate
        return dtype_bytes * (weights + 2 * self.tokens * self.hidden)

    def floor_seconds(self, read_bytes_per_s: float, flops_per_s: float) -> float:
        return max(self.bytes_moved() / read_bytes_per_s, self.flops / flops_per_s)

    def step_bytes(self, fused_activation: bool = False, dtype_bytes: int = 2) -> dict:
        """HBM bytes each step of the layer reads and writes, counting every tensor once per
        pass (no cache reuse across passes): ``{step: bytes}``. ``fused_activation``: the
        gate+up GEMM stores ``act(gate) * up`` and the activation pass is gone.

        gather: ``x`` rows in, the routed copy ``A`` out; gate+up: its weights, ``A`` in, ``h``
        (``2 I`` wide) or the activation (``I`` wide) out; activation: ``h`` in, ``I`` wide out;
        down: its weights, the activation in, ``y`` out; combine: ``y`` and the router weights
        in, the output out."""
        b = dtype_bytes
        rows, tokens, h, i = self.rows, self.tokens, self.hidden, self.intermediate
        weights = self.active_experts * h * i * b  # one weight set of one projection, per I
        steps = {
            "gather": rows * h * b * 2,
            "gate+up GEMM": 2 * weights + rows * h * b + rows * (i if fused_activation else 2 * i) * b,
        }  # fmt: skip
        if not fused_activation:
            steps["activation"] = rows * 2 * i * b + rows * i * b
        steps["down GEMM"] = weights + rows * i * b + rows * h * b
        steps["combine"] = rows * h * b + rows * 4 + tokens * h * b
        return steps

    def entry(self, ceilings: dict | None = None) -> dict:
        out = {
            "id": self.id, "model": get_model(self.model).name, "tokens_per_gpu": self.tokens,
            "ep": self.ep, "routing": self.routing, "seed": self.seed, "hidden": self.hidden,
            "intermediate": self.intermediate, "experts": self.experts, "top_k": self.top_k,
            "rows": self.rows, "active_experts": self.active_experts,
            "bytes_moved": self.bytes_moved(), "flops": self.flops,
        }  # fmt: skip
        if ceilings:
            out["floor_us"] = 1e6 * self.floor_seconds(
                ceilings["read_bytes_per_s"], ceilings["bf16_flops_per_s"]
            )
        return out


def layers_of(models, ep: int | None = None) -> list[tuple[str, int]]:
    """``(model, EP)`` of each entry of ``models`` (a comma list or a list): a group of
    :data:`LAYER_GROUPS` (``all``, ``course``, ``vllm``), a model's name (``glm``,
    ``qwen3-30b``, ``(model, EP)``) under its EP in :data:`LAYERS` (else 8), or ``name@EP``;
    ``ep`` overrides every EP."""
    if isinstance(models, str):
        models = [m.strip() for m in models.split(",") if m.strip()]
    known = dict(LAYERS)
    out = []
    for spec in models:
        if isinstance(spec, tuple):
            name, at = spec
        elif spec in LAYER_GROUPS:
            out += [(m, ep or e) for m, e in LAYER_GROUPS[spec]]
            continue
        else:
            name, _, at = spec.partition("@")
            at = int(at) if at else None
        name = get_model(name).name
        out.append((name, ep or at or known.get(name, 8)))
    return list(dict.fromkeys(out))


def layer_problems(models, tokens, routings=("balanced",), skewed_tokens=(), ep: int | None = None):
    """Every layer of ``models`` (:func:`layers_of`) at every token count and routing (plus
    skewed routing at ``skewed_tokens``)."""
    cases = [(t, r) for r in routings for t in tokens] + [(t, "skewed") for t in skewed_tokens]
    return [LayerProblem(m, t, e, r) for m, e in layers_of(models, ep) for t, r in cases]


# ------------------------------------------------------------------------------ inputs
def make_layer_inputs(problem: LayerProblem, device="cuda", seed: int = 0) -> dict:
    """One input set: ``x ~ N(0, 1)``, weights ``~ N(0, 1 / fan_in)`` (bf16), the problem's
    choices as ``topk_ids`` and softmax-normalized random router weights (float32), and a router
    weight ``router_w`` ``(experts, hidden)`` for the step breakdown."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    h, i, e, t, k = (problem.hidden, problem.intermediate, problem.experts, problem.tokens,
                     problem.top_k)  # fmt: skip

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device=device) * scale).to(torch.bfloat16)

    ids = torch.as_tensor(problem.choices(), device=device)
    weights = torch.softmax(torch.randn(t, k, generator=g, device=device), dim=-1)
    inputs = {
        "x": randn(t, h),
        "w_gate_up": randn(e, 2 * i, h, scale=h**-0.5),
        "w_down": randn(e, h, i, scale=i**-0.5),
        "topk_ids": ids,
        "topk_weights": weights,
    }
    # the router's weight, drawn last (the tensors above stay as they were for a seed); only the
    # step breakdown times the router (its GEMM is the same for every implementation)
    inputs["router_w"] = randn(e, h, scale=h**-0.5)
    return inputs


def reference_layer(inputs: dict):
    """The layer in float32, expert by expert (a boolean mask per expert; shares no code with
    the layer under test)."""
    import torch

    from ..moe.reference import gated

    x, ids, w = inputs["x"], inputs["topk_ids"], inputs["topk_weights"]
    out = torch.zeros(x.shape[0], inputs["w_down"].shape[1], dtype=torch.float32, device=x.device)
    for e in range(inputs["w_gate_up"].shape[0]):
        token, slot = torch.nonzero(ids == e, as_tuple=True)
        if token.numel() == 0:
            continue
        h = x[token].float() @ inputs["w_gate_up"][e].float().T
        y = gated(h) @ inputs["w_down"][e].float().T
        out.index_add_(0, token, y * w[token, slot].float().unsqueeze(1))
    return out


def layer_impl(name: str) -> Implementation:
    """The layer implementation registered as ``name`` (:mod:`pearl_moe.bench.layer_impls`;
    KeyError for an unknown name)."""
    return get_impl(name, kind="layer")


# ------------------------------------------------------------------------------ check, time
def check_layer(impls: dict, problem: LayerProblem, device="cuda", seed: int = 1) -> dict:
    """``{name: (ok, message, error)}``: each implementation's output on one fresh input set
    against :func:`reference_layer`, within twice the torch composition's error plus a floor."""
    import torch

    from ..moe import torch_composition

    inputs = make_layer_inputs(problem, device, seed)
    ref = reference_layer(inputs)
    base = torch_composition(inputs["x"], inputs["w_gate_up"], inputs["w_down"],
                             inputs["topk_ids"], inputs["topk_weights"])  # fmt: skip
    tol = tolerance_for(relative_error(base, ref))
    out = {}
    for name, impl in impls.items():
        try:
            got = impl.prepare(inputs).run()
            if device != "cpu":
                torch.cuda.synchronize(device)
        except ImplementationUnavailable as exc:
            out[name] = (None, f"unavailable: {exc}", None)
            continue
        except Exception as exc:
            if device_fault(exc, device):  # nothing after this can run in this process
                raise _fault(name, problem, exc) from exc
            out[name] = (False, f"error: {type(exc).__name__}: {exc}"[:300], None)
            continue
        if tuple(got.shape) != tuple(ref.shape) or not torch.isfinite(got).all():
            out[name] = (False, f"output {tuple(got.shape)} not finite or of the wrong shape", None)
            continue
        err = relative_error(got, ref)
        out[name] = (err <= tol, f"rel err {err:.2e} (tolerance {tol:.2e})", err)
    return out


class DeviceFault(RuntimeError):
    """A kernel faulted (an illegal address, say): the CUDA context is lost for this process, so
    the run stops, naming the implementation that faulted (``impl``; None when the fault came
    while several implementations' graphs replayed in turn)."""

    impl: str | None = None


#: Words of the sticky CUDA errors, as torch ("CUDA error: an illegal memory access ..."), CuTe
#: DSL ("CUDA_ERROR_ILLEGAL_ADDRESS") and Triton word them.
STICKY_ERRORS = ("illegal memory access", "illegal address", "illegal instruction",
                 "misaligned address", "unspecified launch failure", "device-side assert",
                 "CUDA_ERROR_")  # fmt: skip


def device_fault(exc: BaseException, device=None) -> bool:
    """Whether ``exc`` left the CUDA context unusable (every later CUDA call of the process
    fails), as opposed to an error of one implementation the run can record and go on from: its
    text names a sticky error (:data:`STICKY_ERRORS`), or, given ``device``, a sync and a small
    kernel there fail too (the fault surfaced under another name)."""
    text = str(exc)
    if any(word in text for word in STICKY_ERRORS):
        return True
    return device is not None and str(device) != "cpu" and context_lost(device)


def context_lost(device) -> bool:
    """Whether a sync and a one-element kernel on ``device`` fail (a sticky error is pending)."""
    import torch

    try:
        torch.cuda.synchronize(device)
        torch.ones(1, device=device).add_(1).item()
    except Exception:
        return True
    return False


def _fault(name: str | None, problem, exc: BaseException) -> DeviceFault:
    where = f"{name}'s" if name else "an implementation's"
    fault = DeviceFault(f"{where} kernels faulted on {problem.id}: {type(exc).__name__}: {exc}")
    fault.impl = name
    return fault


def layer_input_sets(problem: LayerProblem, device, seed: int) -> list[dict]:
    """Enough input sets that cycling through them moves 4x the L2 (a problem that fits in L2 is
    then not timed from cache), each from :func:`make_layer_inputs`."""
    import torch

    from .harness import input_sets_for

    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    sets = input_sets_for(problem.bytes_moved(), l2)
    return [make_layer_inputs(problem, device, seed + s) for s in range(sets)]


def _time_graphs(
    builders: dict, problem: LayerProblem, inputs: list, launches: int, rounds: int, reps: int,
    warmup_replays: int, device, order_key: str, label=lambda name: name,
):  # fmt: skip
    """Capture each ``builders[name]() -> (call(i), config)`` in a CUDA graph of ``launches``
    calls over the input sets (:func:`harness.graph_of`), then time all graphs together in
    interleaved rounds (:func:`harness.run_rounds`, round order seeded by ``order_key``). Returns
    ``(timers, timings, failed)``: ``failed`` holds the builders that raised an ordinary error. A
    sticky CUDA error raises :class:`DeviceFault`, naming ``label(name)`` when one capture faulted."""
    from .harness import GraphTimer, graph_of, run_rounds, sync

    sets = len(inputs)
    timers, failed = {}, {}
    for name, build in builders.items():
        try:
            call, config = build()
            graph, outputs = graph_of(call, sets, launches, device)
            timers[name] = GraphTimer(name, graph, launches, sets, inputs, outputs, config,
                                      keep=call)  # fmt: skip
        except Exception as exc:
            if device_fault(exc, device):  # the context is lost: nothing after this can run
                raise _fault(label(name), problem, exc) from exc
            failed[name] = exc
            sync(device)
    try:
        timings = run_rounds(timers, rounds, reps, warmup_replays,
                             zlib.crc32(order_key.encode()), device)  # fmt: skip
    except Exception as exc:  # the graphs replay interleaved: the culprit is one of them
        if device_fault(exc, device):
            raise _fault(None, problem, exc) from exc
        raise
    return timers, timings, failed


def _whole_layer(impl, inputs: list):
    """A builder for :func:`_time_graphs`: ``impl`` prepared on every input set, call ``i`` on
    set ``i % sets``."""

    def build():
        runs = [impl.prepare(inp) for inp in inputs]
        return (lambda i: runs[i % len(inputs)].run()), runs[0].config

    return build


def _check_replayed(timers: dict, timings: dict, inputs: list) -> None:
    """Set each timing's ``outputs_ok``: every input set's output the graph left behind within
    2% of the float32 layer (:func:`reference_layer`)."""
    refs = [reference_layer(inp) for inp in inputs] if timers else []
    for name, timer in timers.items():
        bad = [s for s, (out, ref) in enumerate(zip(timer.outputs, refs, strict=True))
               if relative_error(out, ref) > 0.02]  # fmt: skip
        timings[name].outputs_ok = not bad
        timings[name].outputs_message = (
            f"input sets {bad} wrong after the replays" if bad
            else f"{len(inputs)} input set(s) checked after the timed replays"
        )  # fmt: skip


def time_layers(
    impls: dict, problem: LayerProblem, rounds: int = 6, reps: int = 5, launches: int = 10,
    device="cuda", seed: int = 100, warmup_replays: int = 1,
) -> dict:  # fmt: skip
    """Time the layer implementations together: each in its own CUDA graph over rotating input
    sets (enough to cycle 4x the L2), interleaved rounds (:func:`harness.run_rounds`), outputs
    checked after the replays. ``{name: (Timing or exception, config)}``."""
    inputs = layer_input_sets(problem, device, seed)
    timers, timings, failed = _time_graphs(
        {name: _whole_layer(impl, inputs) for name, impl in impls.items()}, problem, inputs,
        max(launches, len(inputs)), rounds, reps, warmup_replays, device, problem.id,
    )  # fmt: skip
    _check_replayed(timers, timings, inputs)
    results = {name: (exc, {}) for name, exc in failed.items()}
    results.update({name: (timings[name], timer.config) for name, timer in timers.items()})
    return {name: results[name] for name in impls}


# ------------------------------------------------------------------------------ steps
#: The steps of our forward (:func:`step_calls`), in order; ``gate+up (fused)`` stands for
#: ``gate+up`` and ``activation`` together when the activation is fused into the epilogue, and
#: ``metadata+gather`` for ``metadata`` and ``gather`` when the routing's one launch copies the
#: rows (:func:`pearl_moe.moe.route_and_gather`, at decode).
STEPS = ("router", "metadata", "gather", "gate+up", "activation", "down", "combine",
         "gate+up (fused)", "metadata+gather")  # fmt: skip
#: The steps the step profile (``--steps``) times: the layer's own (the router is not the layer's:
#: every implementation is given its choices).
PROFILE_STEPS = STEPS[1:]


def step_calls(inputs: dict, backend: str = "pearl") -> dict:
    """Every step of one forward on ``inputs`` as a call of its own, ``{step: call() -> tensor}``
    in :data:`STEPS` order, each on the previous step's output (computed once, here): what
    :func:`pearl_moe.moe.moe_forward` does, cut at its passes over memory. The router is
    ``x @ router_w^T`` and the softmax top-k; ``gate+up (fused)`` needs the pearl backend."""
    import torch
    import torch.nn.functional as F

    from ..moe import combine, route_and_gather, route_topk, select_experts
    from ..moe.layer import grouped
    from ..moe.reference import gated

    x, ids, weights = inputs["x"], inputs["topk_ids"], inputs["topk_weights"]
    w_up, w_down, router_w = inputs["w_gate_up"], inputs["w_down"], inputs["router_w"]
    experts, top_k = w_up.shape[0], ids.shape[1]
    routing = route_topk(ids, weights, experts, check=False)
    A = x.index_select(0, routing.token_of_row)
    h = grouped(A, w_up, routing.offsets, backend)
    a = gated(h).to(torch.bfloat16)
    y = grouped(a, w_down, routing.offsets, backend)
    calls = {
        "router": lambda: select_experts(F.linear(x, router_w), top_k)[1],
        "metadata": lambda: route_topk(ids, weights, experts, check=False).token_of_row,
        "gather": lambda: x.index_select(0, routing.token_of_row),
        "gate+up": lambda: grouped(A, w_up, routing.offsets, backend),
        "activation": lambda: gated(h).to(torch.bfloat16),
        "down": lambda: grouped(a, w_down, routing.offsets, backend),
        "combine": lambda: combine(y, routing),
    }
    if backend == "pearl":
        from ..kernels import grouped_gemm, interleave_gate_up

        w_fused = interleave_gate_up(w_up)
        calls["gate+up (fused)"] = lambda: grouped_gemm(
            A, w_fused, routing.offsets, check=False, activation="swiglu"
        )
    calls["metadata+gather"] = lambda: route_and_gather(ids, weights, experts, x, check=False)[1]
    return calls


def time_layer_steps(
    problem: LayerProblem, rounds: int = 6, reps: int = 5, launches: int = 10, device="cuda",
    seed: int = 200, backend: str = "pearl", warmup_replays: int = 1, steps=None,
    impls: dict | None = None, trace: bool = False,
) -> dict:  # fmt: skip
    """Where the time of our forward goes: each step of :func:`step_calls` (those in ``steps``,
    default all) in a CUDA graph of its own over as many rotating input sets as the whole layer's
    timing uses, and each of ``impls`` (whole layers, outputs checked after the replays as in
    :func:`time_layers`) in a graph of its own, all timed together in interleaved rounds.
    ``{name: Timing or exception}``, the steps first; a whole layer's timing also carries its
    prepared call's config (``timing.config``). With ``trace``, each timing also carries the
    kernels one call of its graph launches and the idle time between them (:func:`graph_trace`,
    as ``timing.trace``). A step that reads few bytes (the router, the
    metadata) finds them in L2 across the sets, as it would inside the layer."""
    inputs = layer_input_sets(problem, device, seed)
    sets = len(inputs)
    per_set = [step_calls(inp, backend) for inp in inputs]
    names = [s for s in per_set[0] if steps is None or s in steps]

    def builder(step):
        config = {"step": step, "backend": backend}
        return lambda: ((lambda i: per_set[i % sets][step]()), config)

    builders = {step: builder(step) for step in names}
    builders.update({name: _whole_layer(impl, inputs) for name, impl in (impls or {}).items()})

    def label_of(name):
        return name if name in (impls or {}) else f"step:{name}"

    timers, timings, failed = _time_graphs(
        builders, problem, inputs, max(launches, sets), rounds, reps, warmup_replays, device,
        f"{problem.id} steps", label=label_of,
    )  # fmt: skip
    layers = {n: t for n, t in timers.items() if n in (impls or {})}
    _check_replayed(layers, timings, inputs)
    for name, timer in layers.items():
        timings[name].config = timer.config
    for name, timer in timers.items() if trace else ():
        try:
            timings[name].trace = graph_trace(timer.graph, timer.launches)
        except Exception as exc:  # the profiler's bookkeeping must not cost the measurement
            if device_fault(exc, device):
                raise _fault(label_of(name), problem, exc) from exc
            timings[name].trace = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    results = {**failed, **timings}
    return {name: results[name] for name in builders}


def graph_kernels(graph, replays: int = 2) -> list[tuple[str, float, float]]:
    """``(name, start_us, duration_us)`` of every kernel, memset and copy that ``replays``
    replays of the captured ``graph`` ran on the GPU, in start order: a ``torch.profiler``
    session (CUPTI's activity records; clocks left free) after one untimed replay."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    ran = [(e.name, e.time_range.start, e.time_range.elapsed_us()) for e in prof.events()
           if e.device_type.name == "CUDA"]  # fmt: skip
    return sorted(ran, key=lambda e: e[1])


def call_trace(events: list, calls: int) -> dict:
    """What one call of a graph launched, from the ``events`` (:func:`graph_kernels`) of
    ``calls`` calls in a row: ``launches`` (kernels, memsets and copies a call), per launch its
    name and median duration (``kernels``) and the median idle time from its end to the next
    launch's start (``gaps_us``; the last: to the next call's first), and their sums per call,
    ``busy_us`` and ``idle_us``. Where the events do not split into equal calls of the same
    launches (``launches`` None), only the totals per call."""
    n = len(events)
    busy = sum(e[2] for e in events)
    ends = [(events[i + 1][1] - events[i][1] - events[i][2]) for i in range(n - 1)]
    out = {"calls": calls, "busy_us": busy / max(calls, 1), "idle_us": sum(ends) / max(calls, 1)}
    k = n // calls if calls and n % calls == 0 else 0
    names = [e[0] for e in events[:k]]
    if not k or any([e[0] for e in events[c * k : (c + 1) * k]] != names for c in range(calls)):
        return {"launches": None, **out}
    dur = [statistics.median(events[c * k + i][2] for c in range(calls)) for i in range(k)]
    gaps = [statistics.median([ends[c * k + i] for c in range(calls) if c * k + i < n - 1])
            for i in range(k) if calls > 1 or i < k - 1]  # fmt: skip
    return {"launches": k, "calls": calls, "busy_us": sum(dur), "idle_us": sum(gaps),
            "kernels": [{"name": name[:80], "us": us} for name, us in zip(names, dur, strict=True)],
            "gaps_us": gaps}  # fmt: skip


def graph_trace(graph, launches: int, replays: int = 2) -> dict:
    """:func:`call_trace` of ``replays`` profiled replays of ``graph``, which holds ``launches``
    calls: the kernels one call launches and the idle time between them inside the graph."""
    return call_trace(graph_kernels(graph, replays), replays * launches)


# ------------------------------------------------------------------------------ records, CLI
def _record(problem: LayerProblem, name: str, status: str, ceilings: dict, **fields) -> dict:
    rec = {"problem": problem.id, "impl": name, "status": status, **fields}
    timing = fields.get("time")
    if timing and ceilings and not name.startswith("step:"):  # a step is not the layer
        floor = problem.floor_seconds(ceilings["read_bytes_per_s"], ceilings["bf16_flops_per_s"])
        rec["metrics"] = {"floor_us": floor * 1e6,
                          "pct_of_floor": 100.0 * floor / (timing["median_us"] * 1e-6)}  # fmt: skip
    return rec


def _timed_record(problem, name: str, timing, config: dict, ceilings: dict, check=None) -> dict:
    """The record of one timed graph (a layer's, or a step's: ``name`` ``step:<step>``): an
    error where it raised; incorrect where its outputs failed the check after the replays;
    its kernel trace where it was profiled (``trace``)."""
    if isinstance(timing, Exception):
        return _record(problem, name, "error", ceilings,
                       message=f"{type(timing).__name__}: {timing}"[:300])  # fmt: skip
    fields = {"time": timing.as_dict(), "config": config}
    if check is not None:
        fields["correctness"] = {"rel_err": check[2], "message": check[1]}
    if getattr(timing, "trace", None):
        fields["trace"] = timing.trace
    return _record(problem, name, "incorrect" if timing.outputs_ok is False else "ok", ceilings,
                   **fields)  # fmt: skip


def _checked(impls: dict, problem: LayerProblem, ceilings: dict) -> tuple[dict, dict, list]:
    """``(checks, good, records)``: :func:`check_layer` of every implementation, those that
    passed, and the records of those that did not (unavailable or incorrect)."""
    checks = check_layer(impls, problem)
    good = {n: impls[n] for n, (ok, _, _) in checks.items() if ok}
    records = [_record(problem, n, "unavailable" if ok is None else "incorrect", ceilings,
                       message=message) for n, (ok, message, _) in checks.items() if not ok]  # fmt: skip
    return checks, good, records


def measure_problem(problem, impls: dict, args, ceilings: dict, steps_tokens=()) -> list[dict]:
    """A layer run's records of one problem: every implementation checked, then those that
    passed timed together (:func:`time_layers`); at ``steps_tokens`` (balanced routing, in a run
    that times ours) also each step of our forward (:func:`time_layer_steps`)."""
    checks, good, records = _checked(impls, problem, ceilings)
    timed = time_layers(good, problem, args.rounds, args.reps) if good else {}
    steps = {}
    ours = any(name.startswith("pearl") for name in impls)  # SonicMoE's run has no forward of ours
    if ours and problem.routing == "balanced" and problem.tokens in steps_tokens:
        steps = time_layer_steps(problem, args.rounds, args.reps)
    for n, (timing, config) in timed.items():
        records.append(_timed_record(problem, n, timing, config, ceilings, checks[n]))
    for step, timing in steps.items():
        records.append(_timed_record(problem, f"step:{step}", timing, {"step": step}, ceilings))
    return records


def profile_problem(problem, impls: dict, args, ceilings: dict, steps_tokens=()) -> list[dict]:
    """A step profile's records of one problem (``--steps``): the implementations checked, then
    each step of our forward and each whole layer that passed in a CUDA graph of its own, timed
    together, and one replay of every graph profiled (:func:`time_layer_steps` with
    ``trace``)."""
    checks, good, records = _checked(impls, problem, ceilings)
    timed = time_layer_steps(problem, args.rounds, args.reps, steps=PROFILE_STEPS, impls=good,
                             trace=True)  # fmt: skip
    for name, timing in timed.items():
        if name in good:
            config = getattr(timing, "config", {})
            records.append(_timed_record(problem, name, timing, config, ceilings, checks[name]))
        else:
            records.append(_timed_record(problem, f"step:{name}", timing, {"step": name},
                                         ceilings))  # fmt: skip
    return records


def problem_rank(entry: dict) -> tuple:
    """Where a problem entry sits in a layer run's table: the layers in :data:`LAYERS`' order
    (a layer outside it after those), each layer's balanced problems by tokens, then its skewed
    ones (the order :func:`layer_problems` makes them in)."""
    layers = list(LAYERS)
    at = (entry["model"], entry["ep"])
    return (layers.index(at) if at in layers else len(layers), entry["routing"] != "balanced",
            entry["routing"], entry["tokens_per_gpu"])  # fmt: skip


def in_order(run: dict) -> dict:
    """Sort ``run``'s problems (:func:`problem_rank`) and its records by their problem's place,
    so a problem measured in a later part (or measured again) takes its place in the table,
    whatever problems that part's command covered."""
    run["problems"].sort(key=problem_rank)
    place = {p["id"]: i for i, p in enumerate(run["problems"])}
    run["records"].sort(key=lambda r: place[r["problem"]])  # stable within a problem
    return run


def load_layer_run(
    gpu: str = "H200", root: Path | None = None, name: str = "moe_layer"
) -> dict | None:
    """The layer run ``results/<gpu>/<name>.json`` (a run of this machine's) or else the
    committed ``<name>.json.gz``, validated; None when there is neither
    (:func:`pearl_moe.results.load_run`). ``name="moe_layer_sonic"`` is SonicMoE's run of its
    own, ``"moe_layer_steps"`` the step profile."""
    from ..results import load_run

    return load_run(gpu, name, root, missing_ok=True)


#: What a layer run defaults to, and a step profile (``--steps``).
LAYER_DEFAULTS = {"tokens": "1,16,64,256,1024,4096", "skewed_tokens": "64",
                  "impls": "pearl,pearl-fused,pearl-serial,pearl-gather,torch,quack"}  # fmt: skip
STEP_DEFAULTS = {"tokens": "1,16,256", "skewed_tokens": "", "impls": "pearl-fused"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pearl_moe layer",
                                description="Check, then time, whole MoE layers on this GPU.")  # fmt: skip
    p.add_argument(
        "--steps",
        action="store_true",
        help="the step profile instead: each step of our forward and the whole pearl-fused layer "
        "in CUDA graphs of their own, timed together and profiled (run kind moe_layer_steps; "
        "defaults: --tokens 1,16,256 --skewed-tokens '' --impls pearl-fused)",
    )
    p.add_argument(
        "--models",
        default="all",
        help="comma list: all, course, vllm (groups of LAYERS) or model names, each at its EP in "
        "LAYERS (else --ep, else 8) or as NAME@EP",
    )
    p.add_argument("--tokens", default=None, help=f"tokens per GPU ({LAYER_DEFAULTS['tokens']})")
    p.add_argument("--skewed-tokens", default=None, help="also skewed routing at these counts (64)")
    p.add_argument(
        "--steps-tokens",
        default="1,64,4096",
        help="in a layer run: at these token counts (balanced routing) also time each step of "
        "our forward (records step:<name>); empty for none",
    )
    p.add_argument("--ep", type=int, default=None, help="one EP degree for every layer")
    p.add_argument("--impls", default=None, help=f"comma list ({LAYER_DEFAULTS['impls']})")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument(
        "--out",
        default=None,
        help="output .json or .json.gz (default results/<GPU>/moe_layer.json, with --steps "
        "moe_layer_steps.json)",
    )
    p.add_argument("--deadline-s", type=float, default=None, help="start no problem after this")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run at --out: keep its problems and records, time the others",
    )
    p.add_argument(
        "--remeasure",
        default="",
        help="with --resume: comma list of problem ids whose records are dropped and measured "
        "again (what they had is listed in env.edits with --why)",
    )
    p.add_argument("--why", default="", help="why --remeasure measures them again (env.edits)")
    args = p.parse_args(argv)
    for key, value in (STEP_DEFAULTS if args.steps else LAYER_DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def _glue_of(run: dict) -> str:
    """How a run's routing metadata and combine ran (``env.glue``; runs before it was recorded
    used torch's)."""
    return run["env"].get("glue", TORCH_GLUE)


def _check_dropped(run: dict, ids: list[str], why: str) -> None:
    if not why:
        raise ValueError("--remeasure needs --why: the file lists why the records were replaced")
    known = {p["id"] for p in run["problems"]}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise ValueError(f"--remeasure: {unknown} not in the run (its problems: {sorted(known)})")


def drop_for_remeasure(run: dict, ids: list[str], why: str) -> dict:
    """``run`` without the problems ``ids`` (entries, records, their place in ``env.parts``), so
    that the resumed part measures them again; each drop is listed in ``env.edits`` with ``why``
    and the median times it had, so the file says what it replaced. Until the part measures a
    dropped problem it is also in ``env.skipped_problems`` (a deadline or a fault may come
    first)."""
    from .cli import drop_problems

    _check_dropped(run, ids, why)
    env = run["env"]
    for pid in ids:
        had = [f"{r['impl']} {r['time']['median_us']:.1f} us" for r in run["records"]
               if r["problem"] == pid and r.get("time")]  # fmt: skip
        env.setdefault("edits", []).append(
            f"Part {len(env.get('parts', []))} dropped {pid} to measure it again ({why}); it had: "
            + (", ".join(had) or "no timed record")
        )
        for part in env.get("parts", [])[:-1]:
            if pid in part["problems"]:
                part["problems"].remove(pid)
        skipped = env.setdefault("skipped_problems", [])
        if pid not in skipped:
            skipped.append(pid)
    return drop_problems(run, set(ids))


def _precompile(problems, impls: dict):
    """Compile the kernels our implementations' default calls run on ``problems`` (both GEMMs,
    the gate+up with and without the fused activation, and with the gather where
    ``pearl-gather`` runs; on :data:`pearl_moe.moe.layer.PDL_DEFAULT_ARCHS` up to
    :data:`~pearl_moe.moe.layer.PDL_MAX_ROWS` routed rows each also as a programmatic dependent
    launch) into the disk cache in the background; the thread, or None
    (none of ours runs, the cache is off, or the picks could not be asked: the run compiles
    them)."""
    ours = [n for n in impls if n.startswith("pearl")]
    if not ours:
        return None
    from .cli import pick_requests, precompile_in_background

    calls = []
    for p in problems:
        n, h, i, e, rows = 2 * p.intermediate, p.hidden, p.intermediate, p.experts, p.rows
        calls += [(n, h, e, rows, "swiglu"), (n, h, e, rows), (h, i, e, rows)]
        if "pearl-gather" in ours:
            calls.append((n, h, e, rows, "swiglu", True))

    from ..moe.layer import PDL_DEFAULT_ARCHS, PDL_MAX_ROWS

    decode = [c for c in calls if c[3] <= PDL_MAX_ROWS]  # where the default launches with pdl

    def requests():  # as the forward launches them with pdl there, and pearl-serial without
        twins = pick_requests(decode) if decode else []
        return pick_requests(calls) + [(a, s, c.with_(pdl=True), *rest) for a, s, c, *rest in twins
                                       if a in PDL_DEFAULT_ARCHS and s >= 3]  # fmt: skip

    try:
        return precompile_in_background(requests, "the layers'")
    except Exception as exc:  # bookkeeping must not cost the measurement
        print(f"not precompiling the layers' kernels: {type(exc).__name__}: {exc}"[:300])
        return None


#: What a step profile adds to the method (``method`` of a ``moe_layer_steps`` run).
PROFILE_METHOD = (
    "Step profile: each step of our forward (pearl_moe.bench.layer.step_calls, on the previous "
    "step's output) and each whole layer in a CUDA graph of its own over the same rotating input "
    "sets, all timed together in interleaved rounds; then two replays of every graph profiled "
    "(torch.profiler, CUPTI; clocks free): the kernels one call launches, their durations and "
    "the idle time between them. The gap is the whole layer's time less the sum of the steps it "
    "runs. "
)


def main(argv=None) -> int:
    args = parse_args(argv)
    ints = lambda s: [int(t) for t in s.split(",") if t.strip()]  # noqa: E731
    problems = layer_problems(args.models, ints(args.tokens), ("balanced",),
                              ints(args.skewed_tokens), args.ep)  # fmt: skip
    every = list(problems)
    steps_tokens = set(ints(args.steps_tokens))
    remeasure = [i for i in args.remeasure.split(",") if i]
    if remeasure and not args.resume:
        raise ValueError("--remeasure drops problems of the run it resumes: it needs --resume")
    uncovered = [i for i in remeasure if i not in {p.id for p in problems}]
    if uncovered:
        raise ValueError(
            f"--remeasure: {uncovered} are not among this "
            "command's problems (--models, --tokens, --skewed-tokens): they would be dropped "
            "and not measured again"
        )
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA GPU is visible: `layer` times MoE layers on a GPU", file=sys.stderr)
        return 2
    from ..results import environment, read_run, write_run
    from .cli import check_resumable, default_out, resume_run
    from .compare import format_step_profile, layer_text, step_profile
    from .harness import measure_ceilings

    impls = {name: layer_impl(name) for name in args.impls.split(",")}
    kind = "moe_layer_steps" if args.steps else "moe_layer"
    out = Path(args.out) if args.out else default_out(torch.cuda.get_device_name(), kind)
    glue = layer_impls.glue()
    recorded = read_run(out) if args.resume and out.exists() else None
    if remeasure and recorded is None:
        raise ValueError(f"--remeasure: no run at {out} to resume")
    if recorded is not None and _glue_of(recorded) != glue:
        if remeasure:  # refused before the ceilings are probed and anything is timed
            raise ValueError(
                f"--remeasure: {out} was measured with other glue ({_glue_of(recorded)}): it is "
                "not resumed, so nothing in it can be measured again"
            )
        # the routing metadata and the combine ran another way there: its times do not mix
        print(f"--resume: {out} was measured with other glue ({_glue_of(recorded)}); starting a "
              "new run", flush=True)  # fmt: skip
        recorded = None
    if remeasure:
        _check_dropped(recorded, remeasure, args.why)
    t0 = time.monotonic()
    env = environment(shlex.join(["python", "-m", "pearl_moe", "layer", *(argv or sys.argv[1:])]))
    env["glue"] = glue
    if recorded is not None:  # before anything is probed or written
        check_resumable(recorded, kind, env.get("gpu"), out)
    done = {p["id"] for p in recorded["problems"]} - set(remeasure) if recorded else set()
    ahead = _precompile([p for p in problems if p.id not in done], impls)  # while probing
    described = {n: getattr(impl, "description", "") for n, impl in impls.items()}
    method = __doc__.split("Method, as")[1].strip()
    run = {"schema": LAYER_SCHEMA, "kind": kind, "env": env, "ceilings": measure_ceilings(),
           "method": PROFILE_METHOD + method if args.steps else method, "impls": described,
           "problems": [], "records": []}  # fmt: skip
    if recorded is not None:
        run, problems = resume_run(out, run, problems, recorded,
                                   carry=("faults", "skipped_problems", "edits"))  # fmt: skip
        run["impls"] = {**run.get("impls", {}), **described}
        if remeasure:
            drop_for_remeasure(run, remeasure, args.why)
            done = {p["id"] for p in run["problems"]}
            problems = [p for p in every if p.id not in done]
        print(f"resuming {out}: {len(run['problems'])} problems done, {len(problems)} to go",
              flush=True)  # fmt: skip
    ceilings = run["ceilings"]  # on a resumed run, the first part's: one floor for all problems
    if ahead is not None:
        ahead.join()
    measure = profile_problem if args.steps else measure_problem
    for problem in problems:
        if args.deadline_s is not None and time.monotonic() - t0 > args.deadline_s:
            skipped = run["env"].setdefault("skipped_problems", [])
            if problem.id not in skipped:  # an earlier part may have left it already
                skipped.append(problem.id)
            continue
        run["problems"].append(problem.entry(ceilings))
        if problem.id in run["env"].get("skipped_problems", []):
            run["env"]["skipped_problems"].remove(problem.id)
        if run["env"].get("parts"):
            run["env"]["parts"][-1]["problems"].append(problem.id)
        try:
            records = measure(problem, impls, args, ceilings, steps_tokens)
        except DeviceFault as fault:  # this process can run nothing more: keep what was measured
            # the problem stays unmeasured (a --resume without the culprit times it); the fault is
            # kept in env.faults, which resumed parts carry on
            run["problems"] = [p for p in run["problems"] if p["id"] != problem.id]
            run["records"] = [r for r in run["records"] if r["problem"] != problem.id]
            if run["env"].get("parts"):
                run["env"]["parts"][-1]["problems"].remove(problem.id)
            run["env"].setdefault("faults", []).append(
                {"problem": problem.id, "impl": fault.impl, "impls": sorted(impls),
                 "message": str(fault)[:300]}
            )  # fmt: skip
            write_run(run, out)
            if fault.impl and fault.impl.startswith("step:"):
                advice = ("without this layer (--models)" if args.steps
                          else "with --steps-tokens '' (no step breakdown)")  # fmt: skip
            else:
                culprit = fault.impl or "the implementation at fault (several graphs replayed)"
                advice = f"without {culprit} (--impls) to time the others"
            print(f"error: {fault}\nwrote {out} up to here; run again with --resume {advice}",
                  file=sys.stderr)  # fmt: skip
            return 3
        run["records"] += records
        torch.cuda.empty_cache()
        write_run(in_order(run), out)
        print(f"{problem.name}: " + ", ".join(
            f"{r['impl']} {r['time']['median_us']:.1f} us" if r["status"] == "ok"
            else f"{r['impl']} {r['status']}" for r in run["records"] if r["problem"] == problem.id
        ), flush=True)  # fmt: skip
    run["env"]["elapsed_s"] = round(time.monotonic() - t0, 1)
    write_run(run, out)
    print()
    ours = next(iter(impls))  # the whole layer the step table puts beside the steps
    print(format_step_profile(step_profile(run, ours), ours) if args.steps else layer_text(run))
    print(f"wrote {out}")
    return 0
