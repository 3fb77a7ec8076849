"""The whole MoE layer, checked and then timed like the grouped GEMMs.

    python -m pearl_moe layer --models all --tokens 1,16,64,256,1024,4096 --skewed-tokens 64 \\
        --impls pearl,torch,quack --out results/H200/moe_layer.json

A layer problem (:class:`LayerProblem`) is one model's routed experts on one GPU under EP: ``x``
``(tokens, hidden)``, each token's ``top_k`` choices among the local experts and their router
weights, and both weight sets, ``w_gate_up`` ``(experts, 2 x intermediate, hidden)`` as ``[gate;
up]`` and ``w_down`` ``(experts, hidden, intermediate)``. Every implementation computes the layer's
output ``(tokens, hidden)`` from them (the router's own GEMM is the same for all and left out):

* ``pearl``: :func:`pearl_moe.moe.moe_forward` on this package's grouped GEMMs;
* ``pearl-fused``: the same with ``act(gate) * up`` computed in the gate+up GEMM's epilogue;
* ``pearl-gather``: ``pearl-fused`` whose gate+up kernel also reads the routed rows of ``x``
  through the gather index (``moe_forward(..., gather="kernel")``): no gathered copy;
* ``torch``: the composition a user writes today (:func:`pearl_moe.moe.torch_composition`);
* ``quack``: quack's pieces composed as SonicMoE composes them: its gated GEMM reading the routed
  rows of ``x`` through an index (``A_idx``) and storing ``silu(gate) * up``, its varlen GEMM for
  the down projection, then the weighted gather-sum (:func:`pearl_moe.moe.combine`);
* ``sonic``: SonicMoE itself, in its own environment and run (``scripts/layer_runs.sh sonic``).

Where the time goes (``--steps-tokens``): each step of our forward (router, routing metadata,
gather, gate+up, activation, down, combine, and the fused gate+up that replaces gate+up and
activation) in a CUDA graph of its own on the previous step's output, all timed together in
interleaved rounds (:func:`time_layer_steps`); recorded as implementations ``step:<name>``.

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
import os
import shlex
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..results import LAYER_SCHEMA
from ..workloads import MODELS, ROUTINGS, get_model, token_choices
from . import compare as _compare
from .harness import tolerance_for
from .registry import Implementation, ImplementationUnavailable, Prepared
from .verify import relative_error

__all__ = [
    "LayerProblem",
    "LAYER_SCHEMA",
    "LAYER_IMPLS",
    "layer_summary",
    "layer_impl",
    "make_layer_inputs",
    "reference_layer",
    "check_layer",
    "time_layers",
    "layer_problems",
    "main",
]


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


def layer_problems(models, tokens, routings=("balanced",), skewed_tokens=(), ep: int = 8):
    """Every model at every token count and routing (plus skewed routing at ``skewed_tokens``)."""
    cases = [(t, r) for r in routings for t in tokens] + [(t, "skewed") for t in skewed_tokens]
    return [LayerProblem(get_model(m).name, t, ep, r) for m in models for t, r in cases]


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


# ------------------------------------------------------------------------------ impls
#: The glue of runs that do not record one (before the Triton kernels, all were torch's).
TORCH_GLUE = "routing metadata and combine: torch operations"


def _glue() -> str:
    """How the routing metadata and the combine ran (recorded with each implementation that uses
    this package's: ours and the quack composition; the torch composition has its own)."""
    from ..moe import glue_kernels

    if glue_kernels.available():
        return (
            "routing metadata and combine: Triton kernels (pearl_moe.moe.glue_kernels; the "
            f"metadata up to {glue_kernels.MAX_KERNEL_ROWS} routed rows, torch beyond)"
        )
    return TORCH_GLUE


def _gemm_choices(inputs: dict, fused: bool, gather: bool = False) -> dict:
    """The kernels the layer's two grouped GEMMs run by default (:func:`kernels.api.default_choice`,
    ``"s<stage> <config>"``), recorded with each of our implementations' times; empty where no
    CUDA device is there to ask."""
    from ..kernels import api, autotune

    x, w_up, w_down = inputs["x"], inputs["w_gate_up"], inputs["w_down"]
    if x.device.type != "cuda":
        return {}
    rows, experts = inputs["topk_ids"].numel(), w_up.shape[0]

    def label(n, k, activation=None, gather=False):
        arch, gpu = api.arch_of(x.device), autotune.gpu_name(x.device)
        stage, config = api.default_choice(arch, n, k, experts, rows, gpu, activation, gather)
        epi = f" epi_tile_n={config.epi_tile_n}" if arch == "sm_100a" and config.epi_tile_n else ""
        return f"s{stage} {config.describe()}{epi}"

    calls = {"gate_up_kernel": (*w_up.shape[1:], "swiglu" if fused else None, gather),
             "down_kernel": tuple(w_down.shape[1:])}  # fmt: skip
    kernels = {}
    for key, args in calls.items():
        try:
            kernels[key] = label(*args)
        except Exception as exc:  # bookkeeping must not cost the measurement: say what failed
            kernels[key] = f"not recorded: {type(exc).__name__}: {exc}"[:300]
    return kernels


def _pearl(inputs: dict) -> Prepared:
    from ..moe import moe_forward

    def run():
        return moe_forward(
            inputs["x"], inputs["w_gate_up"], inputs["w_down"], topk_ids=inputs["topk_ids"],
            topk_weights=inputs["topk_weights"], backend="pearl", check=False,
        )  # fmt: skip

    return Prepared(run, {"backend": "pearl", "fused": "none (gather, activation, combine apart)",
                          "glue": _glue(), **_gemm_choices(inputs, fused=False)})  # fmt: skip


def _pearl_fused(inputs: dict, gather: str = "copy") -> Prepared:
    from ..kernels import interleave_gate_up
    from ..moe import moe_forward

    w_fused = interleave_gate_up(inputs["w_gate_up"])  # once, as a checkpoint loader would

    def run():
        return moe_forward(
            inputs["x"], w_fused, inputs["w_down"], topk_ids=inputs["topk_ids"],
            topk_weights=inputs["topk_weights"], backend="pearl", check=False,
            gate_up_layout="interleaved", gather=gather,
        )  # fmt: skip

    fused, fuses = "activation in the gate+up epilogue", True
    if gather == "copy":
        from ..moe.layer import fuses_activation

        rows = inputs["topk_ids"].numel()
        fuses = fuses_activation(inputs["x"].device, rows, w_fused)
        if not fuses:
            fused = ("activation as a pass of its own on the interleaved weights "
                     "(autotune.fuse_activation: the fused tiles lose more than the pass costs)")  # fmt: skip
    if gather == "kernel":
        fused += "; x read through the gather index by the gate+up kernel (no gathered copy)"
    kernels = _gemm_choices(inputs, fuses, gather == "kernel")
    return Prepared(run, {"backend": "pearl", "fused": fused, "glue": _glue(), **kernels})


def _pearl_gather(inputs: dict) -> Prepared:
    return _pearl_fused(inputs, gather="kernel")


def _torch(inputs: dict) -> Prepared:
    from ..moe import torch_composition

    def run():
        return torch_composition(
            inputs["x"], inputs["w_gate_up"], inputs["w_down"], inputs["topk_ids"],
            inputs["topk_weights"],
        )  # fmt: skip

    return Prepared(run, {"composition": "index_select, _grouped_mm, silu*mul, index_add_"})


def count_dsl_as_installed(identity, dsl_root: str) -> None:
    """Make quack fingerprint CuTe DSL's functions by name, wherever the DSL is unpacked.

    quack keys its compile cache on a fingerprint of the epilogue function: it recurses into what
    the function calls and stops at installed code, which it recognises by a ``site-packages`` or
    ``dist-packages`` folder in the file's path (``identity._is_extern_function``). The device
    bundle unpacks the DSL under ``/tmp/site``, so quack recursed into the DSL's own internals and
    refused their ``ContextVar`` (``epilogue fn depends on <ContextVar name='_LOC_TRANSFORMS'>``):
    ``gemm_gated`` could not compile. Files under ``dsl_root`` count as installed too, as they
    would in a pip install. Idempotent."""
    check = identity._is_extern_function
    if getattr(check, "dsl_root", None) == dsl_root:
        return
    root = os.path.join(os.path.abspath(dsl_root), "")

    def is_extern_function(fn, _check=check):
        code = getattr(fn, "__code__", None)
        if code is not None and os.path.abspath(code.co_filename).startswith(root):
            return True
        return _check(fn)

    is_extern_function.dsl_root = dsl_root
    identity._is_extern_function = is_extern_function


def _dsl_root() -> str:
    """The folder that holds the ``cutlass`` package (``.../nvidia_cutlass_dsl``)."""
    import cutlass

    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(cutlass.__file__))))


def _quack(inputs: dict) -> Prepared:
    try:
        from quack.gemm_interface import gemm, gemm_gated
    except ImportError as exc:
        raise ImplementationUnavailable(f"quack is not installed ({exc})") from None
    import torch

    try:  # quack >= 0.6 fingerprints epilogues; older releases have no such module
        import quack.gemm_runtime.identity as identity
    except ImportError:
        pass
    else:
        count_dsl_as_installed(identity, _dsl_root())

    from ..moe import combine, route_topk

    experts = inputs["w_gate_up"].shape[0]
    b_up = inputs["w_gate_up"].mT  # (E, hidden, 2I): [gate; up] along N
    b_down = inputs["w_down"].mT  # (E, I, hidden)

    def run():
        routing = route_topk(inputs["topk_ids"], inputs["topk_weights"], experts, check=False)
        cu = torch.nn.functional.pad(routing.offsets, (1, 0))
        _, a = gemm_gated(
            inputs["x"], b_up, activation="swiglu", cu_seqlens_m=cu,
            A_idx=routing.token_of_row.to(torch.int32), store_preact=False,
            concat_layout=("B",), tuned=True,
        )  # fmt: skip
        y = gemm(a, b_down, cu_seqlens_m=cu, tuned=True)
        return combine(y, routing)

    return Prepared(
        run,
        {
            "composition": "gemm_gated (A_idx gather, swiglu), varlen gemm, gather-sum",
            "glue": _glue(),
        },  # fmt: skip
    )


def _sonic(inputs: dict) -> Prepared:
    """SonicMoE's forward from given top-k choices (``moe_general_routing_inputs``: its routing
    metadata, its gated up projection gathering ``x`` rows, its down projection with the weighted
    combine). It needs its own environment (it pins CuTe DSL 4.4.2; ours is 4.8.1), so it runs in
    a process of its own: ``bash .device_sonic/run.sh python3 -m pearl_moe layer --impls sonic``
    (:file:`scripts/sonic_bundle.sh` builds that folder), and its times compare with the other
    implementations' across runs only."""
    try:
        import sonicmoe
        from sonicmoe.enums import ActivationType
        from sonicmoe.functional import moe_general_routing_inputs
    except ImportError as exc:
        raise ImplementationUnavailable(
            f"sonic-moe is not importable here ({exc}); it runs in its own environment: "
            "bash .device_sonic/run.sh python3 -m pearl_moe layer --impls sonic"
        ) from None
    import torch

    w = inputs["w_gate_up"]
    experts, two_i, hidden = w.shape
    half = two_i // 2
    # SonicMoE's default layout interleaves gate and up rows one by one: converted once, as a
    # checkpoint loader would (not timed), like pearl-fused's blocks of 8
    w1 = torch.stack((w[:, :half], w[:, half:]), dim=2).reshape(experts, two_i, hidden)
    w1 = w1.permute(1, 2, 0)  # (2I, H, E): SonicMoE's view of the expert weights
    w2 = inputs["w_down"].permute(1, 2, 0)  # (H, I, E)
    ids, weights = inputs["topk_ids"], inputs["topk_weights"]
    tokens, top_k = ids.shape
    # the token of every (token, choice) pair, ascending: a function of the shape alone
    token_of_pair = torch.arange(tokens, device=ids.device).repeat_interleave(top_k).int()

    def run():
        out, _ = moe_general_routing_inputs(
            inputs["x"], weights.reshape(-1).float(), token_of_pair, ids.reshape(-1).int(),
            w1, None, w2, None, experts, torch.cuda.current_stream().cuda_stream,
            ActivationType.SWIGLU, is_inference_mode_enabled=True,
        )  # fmt: skip
        return out

    return Prepared(run, {
        "composition": "SonicMoE moe_general_routing_inputs (interleaved gate/up rows)",
        "sonic_moe": getattr(sonicmoe, "__version__", "?"),
        "environment": "its own: CuTe DSL 4.4.2 and quack 0.3.x (times compare across runs)",
    })  # fmt: skip


#: name -> (prepare(inputs) -> Prepared, what it is)
LAYER_IMPLS = {
    "pearl": (_pearl, "moe_forward on pearl-moe's grouped GEMMs (unfused steps between them)"),
    "pearl-fused": (
        _pearl_fused,
        "moe_forward on pearl-moe's grouped GEMMs, the activation fused into the gate+up epilogue "
        "where autotune.fuse_activation says so",
    ),
    "pearl-gather": (
        _pearl_gather,
        "pearl-fused with the token gather in the gate+up kernel's producer (no gathered copy)",
    ),
    "torch": (_torch, "torch composition: index_select, _grouped_mm, silu*mul, index_add_"),
    "quack": (_quack, "quack gemm_gated with gathered A + varlen gemm + gather-sum (SonicMoE's)"),
    "sonic": (_sonic, "SonicMoE itself (its own environment and run: compare across runs)"),
}


def layer_impl(name: str) -> Implementation:
    if name not in LAYER_IMPLS:
        raise ValueError(f"unknown layer implementation {name!r}; known: {', '.join(LAYER_IMPLS)}")
    prepare, about = LAYER_IMPLS[name]
    return Implementation(name, prepare, {}, about)


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


def _layer_input_sets(problem: LayerProblem, device, seed: int) -> list[dict]:
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


def time_layers(
    impls: dict, problem: LayerProblem, rounds: int = 6, reps: int = 5, launches: int = 10,
    device="cuda", seed: int = 100, warmup_replays: int = 1,
) -> dict:  # fmt: skip
    """Time the layer implementations together: each in its own CUDA graph over rotating input
    sets (enough to cycle 4x the L2), interleaved rounds (:func:`harness.run_rounds`), outputs
    checked after the replays. ``{name: (Timing or exception, config)}``."""
    inputs = _layer_input_sets(problem, device, seed)
    sets = len(inputs)

    def builder(impl):
        def build():
            runs = [impl.prepare(inp) for inp in inputs]
            return (lambda i: runs[i % sets].run()), runs[0].config

        return build

    timers, timings, failed = _time_graphs(
        {name: builder(impl) for name, impl in impls.items()}, problem, inputs,
        max(launches, sets), rounds, reps, warmup_replays, device, problem.id,
    )  # fmt: skip
    results = {name: (exc, {}) for name, exc in failed.items()}
    refs = [reference_layer(inp) for inp in inputs] if timers else []
    for name, timer in timers.items():
        timing = timings[name]
        bad = [s for s, (out, ref) in enumerate(zip(timer.outputs, refs, strict=True))
               if relative_error(out, ref) > 0.02]  # fmt: skip
        timing.outputs_ok = not bad
        timing.outputs_message = (f"input sets {bad} wrong after the replays" if bad else
                                  f"{sets} input set(s) checked after the timed replays")  # fmt: skip
        results[name] = (timing, timer.config)
    return {name: results[name] for name in impls}


# ------------------------------------------------------------------------------ steps
#: The steps of our forward (:func:`step_calls`), in order; ``gate+up (fused)`` stands for
#: ``gate+up`` and ``activation`` together when the activation is fused into the epilogue.
STEPS = ("router", "metadata", "gather", "gate+up", "activation", "down", "combine",
         "gate+up (fused)")  # fmt: skip


def step_calls(inputs: dict, backend: str = "pearl") -> dict:
    """Every step of one forward on ``inputs`` as a call of its own, ``{step: call() -> tensor}``
    in :data:`STEPS` order, each on the previous step's output (computed once, here): what
    :func:`pearl_moe.moe.moe_forward` does, cut at its passes over memory. The router is
    ``x @ router_w^T`` and the softmax top-k; ``gate+up (fused)`` needs the pearl backend."""
    import torch
    import torch.nn.functional as F

    from ..moe import combine, route_topk, select_experts
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
    return calls


def time_layer_steps(
    problem: LayerProblem, rounds: int = 6, reps: int = 5, launches: int = 10, device="cuda",
    seed: int = 200, backend: str = "pearl", warmup_replays: int = 1,
) -> dict:  # fmt: skip
    """Where the time of our forward goes: each step of :func:`step_calls` in a CUDA graph of its
    own over as many rotating input sets as the whole layer's timing uses, all steps timed
    together in interleaved rounds. ``{step: Timing or exception}``. A step that reads few bytes
    (the router, the metadata) finds them in L2 across the sets, as it would inside the layer."""
    inputs = _layer_input_sets(problem, device, seed)
    sets = len(inputs)
    per_set = [step_calls(inp, backend) for inp in inputs]

    def builder(step):
        config = {"step": step, "backend": backend}
        return lambda: ((lambda i: per_set[i % sets][step]()), config)

    _, timings, failed = _time_graphs(
        {step: builder(step) for step in per_set[0]}, problem, inputs, max(launches, sets),
        rounds, reps, warmup_replays, device, f"{problem.id} steps", label=lambda s: f"step:{s}",
    )  # fmt: skip
    results = {**failed, **timings}
    return {step: results[step] for step in per_set[0]}


# ------------------------------------------------------------------------------ records, CLI
def _record(problem: LayerProblem, name: str, status: str, ceilings: dict, **fields) -> dict:
    rec = {"problem": problem.id, "impl": name, "status": status, **fields}
    timing = fields.get("time")
    if timing and ceilings and not name.startswith("step:"):  # a step is not the layer
        floor = problem.floor_seconds(ceilings["read_bytes_per_s"], ceilings["bf16_flops_per_s"])
        rec["metrics"] = {"floor_us": floor * 1e6,
                          "pct_of_floor": 100.0 * floor / (timing["median_us"] * 1e-6)}  # fmt: skip
    return rec


def validate_layer_run(run: dict) -> dict:
    """Raise ``ValueError`` unless ``run`` is a layer run every record of which names a problem."""
    if run.get("schema") != LAYER_SCHEMA:
        raise ValueError(f"not a {LAYER_SCHEMA} run (schema={run.get('schema')!r})")
    for key in ("env", "ceilings", "problems", "records"):
        if key not in run:
            raise ValueError(f"layer run lacks {key!r}")
    ids = {p["id"] for p in run["problems"]}
    for rec in run["records"]:
        if rec.get("problem") not in ids:
            raise ValueError(
                f"record {rec.get('impl')} names an unknown problem {rec.get('problem')}"
            )
        if rec.get("status") == "ok" and "time" not in rec:
            raise ValueError(f"ok record {rec['impl']} on {rec['problem']} has no time")
    return run


#: The layer benchmark's goals: at decode (up to DECODE_TOKENS tokens per GPU) the fused layer
#: within FLOOR_GOAL x its floor and at least TORCH_GOAL x faster than the torch composition;
#: over every shape a geometric mean of at most QUACK_GEOMEAN_GOAL against quack's composition,
#: and no shape above TIE (what one run resolves, :data:`pearl_moe.bench.compare.TIE`).
DECODE_TOKENS = 256
FLOOR_GOAL = 1.10
TORCH_GOAL = 1.5
QUACK_GEOMEAN_GOAL = 0.95
TIE = _compare.TIE


def layer_summary(run: dict, ours: str = "pearl-fused") -> dict:
    """Per problem, ``ours`` against the floor and against each other implementation (ratios
    paired round by round, :func:`pearl_moe.bench.compare.paired_ratio`), and the goals judged
    over the run. ``{"rows": [...], "goals": {...}, "impls": [...]}``; a goal is None where the
    run has nothing to judge it on."""
    from .compare import geomean, paired_ratio

    ok = {(r["problem"], r["impl"]): r for r in run["records"] if r.get("status") == "ok"}
    others = sorted({i for _, i in ok if i != ours and not i.startswith("step:")})
    rows = []
    for p in run["problems"]:
        mine = ok.get((p["id"], ours))
        row = {"problem": p["id"], "model": p["model"], "tokens": p["tokens_per_gpu"],
               "routing": p["routing"], "floor_us": p.get("floor_us"), "us": {}, "vs": {}}  # fmt: skip
        for impl in [ours, *others]:
            rec = ok.get((p["id"], impl))
            if rec is not None:
                row["us"][impl] = rec["time"]["median_us"]
                if mine is not None and impl != ours:
                    row["vs"][impl] = paired_ratio(mine, rec)
        if mine is not None and row["floor_us"]:
            row["of_floor"] = mine["time"]["median_us"] / row["floor_us"]
        rows.append(row)
    decode = [r for r in rows if r["tokens"] <= DECODE_TOKENS and "of_floor" in r]
    vs_quack = [r["vs"]["quack"]["ratio"] for r in rows if "quack" in r["vs"]]
    vs_torch = [r["vs"]["torch"]["ratio"] for r in decode if "torch" in r["vs"]]
    goals = {
        "decode_worst_of_floor": max((r["of_floor"] for r in decode), default=None),
        "quack_geomean": geomean(vs_quack) if vs_quack else None,
        "quack_worst": max(vs_quack, default=None),
        "quack_above_tie": sum(v > TIE for v in vs_quack),
        "quack_shapes": len(vs_quack),
        "decode_speedup_over_torch": 1 / geomean(vs_torch) if vs_torch else None,
        "missing": [r["problem"] for r in rows if ours not in r["us"]],
    }
    g = goals
    goals["met"] = {
        "floor": None if g["decode_worst_of_floor"] is None
        else g["decode_worst_of_floor"] <= FLOOR_GOAL,
        "quack": None if g["quack_geomean"] is None
        else g["quack_geomean"] <= QUACK_GEOMEAN_GOAL and g["quack_above_tie"] == 0,
        "torch": None if g["decode_speedup_over_torch"] is None
        else g["decode_speedup_over_torch"] >= TORCH_GOAL,
    }  # fmt: skip
    return {"rows": rows, "goals": goals, "impls": [ours, *others], "ours": ours}


def load_layer_run(
    gpu: str = "H200", root: Path | None = None, name: str = "moe_layer"
) -> dict | None:
    """The layer run ``results/<gpu>/<name>.json`` (a run of this machine's) or else the
    committed ``<name>.json.gz``, validated; None when there is neither (the order
    :func:`pearl_moe.results.load_run` reads bench runs in). ``name="moe_layer_sonic"`` is
    SonicMoE's run of its own."""
    from ..results import read_json, run_path

    path = run_path(gpu, name, root)
    return validate_layer_run(read_json(path)) if path.exists() else None


def cross_run_ratios(run: dict, other: dict, impl: str, ours: str = "pearl-fused") -> list[dict]:
    """Per problem both runs measured, ``ours`` in ``run`` against ``impl`` in ``other`` (a run
    in another environment, such as SonicMoE's): the ratio of the two medians. Not paired round
    by round, so it resolves less than a ratio within one run (the same kernel moved up to 7% between
    batches of runs on the H200, ``experiments/reproducibility``); each row also gives the ratios
    of the two runs' read and bf16 ceilings, what the machine did between them. Runs on different
    GPUs are refused."""

    def times(r, name):
        return {rec["problem"]: rec["time"]["median_us"] for rec in r["records"]
                if rec["impl"] == name and rec.get("status") == "ok"}  # fmt: skip

    if run["env"].get("gpu") != other["env"].get("gpu"):
        raise ValueError(
            f"runs on different GPUs ({run['env'].get('gpu')} and {other['env'].get('gpu')}): "
            "their times do not compare"
        )
    mine, theirs = times(run, ours), times(other, impl)
    ceilings = {key: other["ceilings"][key] / run["ceilings"][key]
                for key in ("read_bytes_per_s", "bf16_flops_per_s")}  # fmt: skip
    return [{"problem": p["id"], "model": p["model"], "tokens": p["tokens_per_gpu"],
             "routing": p["routing"], "ours_us": mine[p["id"]], "theirs_us": theirs[p["id"]],
             "ratio": mine[p["id"]] / theirs[p["id"]],
             "read_ceiling_ratio": ceilings["read_bytes_per_s"],
             "bf16_ceiling_ratio": ceilings["bf16_flops_per_s"]}
            for p in run["problems"] if p["id"] in mine and p["id"] in theirs]  # fmt: skip


def problem_rank(entry: dict) -> tuple:
    """Where a problem entry sits in a layer run's table: the models in :data:`MODELS`' order,
    each model's balanced problems by tokens, then its skewed ones (the order
    :func:`layer_problems` makes them in); a model outside :data:`MODELS` after those."""
    names = list(MODELS)
    model = names.index(entry["model"]) if entry["model"] in names else len(names)
    return (model, entry["routing"] != "balanced", entry["routing"], entry["tokens_per_gpu"])


def in_order(run: dict) -> dict:
    """Sort ``run``'s problems (:func:`problem_rank`) and its records by their problem's place,
    so a problem measured in a later part (or measured again) takes its place in the table,
    whatever problems that part's command covered."""
    run["problems"].sort(key=problem_rank)
    place = {p["id"]: i for i, p in enumerate(run["problems"])}
    run["records"].sort(key=lambda r: place[r["problem"]])  # stable within a problem
    return run


def write_layer_run(run: dict, path: Path) -> Path:
    """Validate and write ``run`` in the bench's compact form (one problem or record a line)."""
    from ..results import dumps_run

    validate_layer_run(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_run(run))
    return path


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pearl_moe layer",
                                description="Check, then time, whole MoE layers on this GPU.")  # fmt: skip
    p.add_argument("--models", default="all", help="comma list of model names, or 'all'")
    p.add_argument("--tokens", default="1,16,64,256,1024,4096", help="tokens per GPU")
    p.add_argument("--skewed-tokens", default="64", help="also skewed routing at these counts")
    p.add_argument(
        "--steps-tokens",
        default="1,64,4096",
        help="at these token counts (balanced routing) also time each step of our forward "
        "(records step:<name>); empty for none",
    )
    p.add_argument("--ep", type=int, default=8)
    p.add_argument("--impls", default="pearl,pearl-fused,pearl-gather,torch,quack")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument(
        "--out", default=None, help="output .json (default results/<GPU>/moe_layer.json)"
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
    return p.parse_args(argv)


def _glue_of(run: dict) -> str:
    """How a run's routing metadata and combine ran (``env.glue``; runs before it was recorded
    used torch's)."""
    return run["env"].get("glue", TORCH_GLUE)


def _check_remeasure(path: Path, ids: list[str], why: str, glue: str) -> None:
    """Raise ``ValueError`` unless the run at ``path`` exists, can be resumed with this glue
    (:func:`resume_layer_run`), holds every id and ``why`` is given (``--remeasure``)."""
    from ..results import read_json

    if not path.exists():
        raise ValueError(f"--remeasure: no run at {path} to resume")
    old = validate_layer_run(read_json(path))
    if _glue_of(old) != glue:
        raise ValueError(
            f"--remeasure: {path} was measured with other glue ({_glue_of(old)}): it is not "
            "resumed, so nothing in it can be measured again"
        )
    _check_dropped(old, ids, why)


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
    run["problems"] = [p for p in run["problems"] if p["id"] not in ids]
    run["records"] = [r for r in run["records"] if r["problem"] not in ids]
    return run


def resume_layer_run(path: Path, run: dict) -> dict:
    """The layer run recorded at ``path``, continued by ``run`` (this command's head: env and
    probed ceilings). The first part's ceilings stay the run's, so every problem's floor uses the
    same ones; ``env.parts`` lists each part (date, command, probed ceilings, problems). A run
    whose ``env.glue`` differs from this one's (the routing metadata and the combine ran another
    way) is not continued: ``run`` is returned as it is, and the run starts again."""
    import json

    old = validate_layer_run(json.loads(path.read_text()))
    if old["env"].get("gpu") != run["env"].get("gpu"):
        raise ValueError(
            f"--resume: {path} was measured on {old['env'].get('gpu')}, this GPU is "
            f"{run['env'].get('gpu')}"
        )
    if _glue_of(old) != _glue_of(run):
        # the routing metadata and the combine ran another way there: its times do not mix
        print(f"--resume: {path} was measured with other glue ({_glue_of(old)}); starting a new "
              "run", flush=True)  # fmt: skip
        return run
    first = {"date": old["env"].get("date"), "command": old["env"].get("command"),
             "ceilings": old["ceilings"], "problems": [p["id"] for p in old["problems"]]}  # fmt: skip
    parts = old["env"].get("parts") or [first]
    env = dict(run["env"])
    env["parts"] = [*parts, {"date": env.get("date"), "command": env.get("command"),
                             "ceilings": run["ceilings"], "problems": []}]  # fmt: skip
    if old["env"].get("faults"):  # what faulted in earlier parts stays on record
        env["faults"] = list(old["env"]["faults"])
    if old["env"].get("skipped_problems"):  # left for later until a part measures them
        env["skipped_problems"] = list(old["env"]["skipped_problems"])
    if old["env"].get("edits"):  # what was changed by hand or dropped stays on record
        env["edits"] = list(old["env"]["edits"])
    return {**run, "env": env, "ceilings": old["ceilings"], "problems": old["problems"],
            "records": old["records"]}  # fmt: skip


def main(argv=None) -> int:
    args = parse_args(argv)
    models = list(MODELS) if args.models == "all" else args.models.split(",")
    ints = lambda s: [int(t) for t in s.split(",") if t.strip()]  # noqa: E731
    problems = layer_problems(models, ints(args.tokens), ("balanced",), ints(args.skewed_tokens),
                              args.ep)  # fmt: skip
    steps_tokens = set(ints(args.steps_tokens))
    covered = {p.id for p in problems}
    remeasure = [i for i in args.remeasure.split(",") if i]
    if remeasure and not args.resume:
        raise ValueError("--remeasure drops problems of the run it resumes: it needs --resume")
    uncovered = [i for i in remeasure if i not in covered]
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
    from ..results import environment
    from .cli import default_out
    from .harness import measure_ceilings

    impls = {name: layer_impl(name) for name in args.impls.split(",")}
    out = Path(args.out) if args.out else default_out(torch.cuda.get_device_name(), "moe_layer")
    glue = _glue()
    if remeasure:  # refused before the ceilings are probed and anything is timed
        _check_remeasure(out, remeasure, args.why, glue)
    t0 = time.monotonic()
    env = environment(shlex.join(["python", "-m", "pearl_moe", "layer", *(argv or sys.argv[1:])]))
    env["glue"] = glue
    ceilings = measure_ceilings()
    run = {"schema": LAYER_SCHEMA, "kind": "moe_layer", "env": env, "ceilings": ceilings,
           "method": __doc__.split("Method, as")[1].strip(), "impls": {n: LAYER_IMPLS[n][1]
           for n in impls}, "problems": [], "records": []}  # fmt: skip
    if args.resume and out.exists():
        run = resume_layer_run(out, run)
        if remeasure:
            run = drop_for_remeasure(run, remeasure, args.why)
        done = {p["id"] for p in run["problems"]}
        problems = [p for p in problems if p.id not in done]
        if done:
            print(f"resuming {out}: {len(done)} problems done, {len(problems)} to go", flush=True)
    ceilings = run["ceilings"]  # on a resumed run, the first part's: one floor for all problems
    # the step breakdown times our forward's steps: only in a run that times ours (a SonicMoE run
    # has its own environment, where our kernels do not compile)
    ours = any(name.startswith("pearl") for name in impls)
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
            checks = check_layer(impls, problem)
            good = {n: impls[n] for n, (ok, _, _) in checks.items() if ok}
            for n, (ok, message, _) in checks.items():
                if not ok:
                    status = "unavailable" if ok is None else "incorrect"
                    run["records"].append(_record(problem, n, status, ceilings, message=message))
            timed = time_layers(good, problem, args.rounds, args.reps) if good else {}
            steps = {}
            if ours and problem.routing == "balanced" and problem.tokens in steps_tokens:
                steps = time_layer_steps(problem, args.rounds, args.reps)
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
            write_layer_run(run, out)
            if fault.impl and fault.impl.startswith("step:"):
                advice = "with --steps-tokens '' (no step breakdown)"
            else:
                culprit = fault.impl or "the implementation at fault (several graphs replayed)"
                advice = f"without {culprit} (--impls) to time the others"
            print(f"error: {fault}\nwrote {out} up to here; run again with --resume {advice}",
                  file=sys.stderr)  # fmt: skip
            return 3
        for n, (timing, config) in timed.items():
            if isinstance(timing, Exception):
                run["records"].append(
                    _record(
                        problem,
                        n,
                        "error",
                        ceilings,
                        message=f"{type(timing).__name__}: {timing}"[:300],
                    )
                )
                continue  # fmt: skip
            status = "ok" if timing.outputs_ok else "incorrect"
            run["records"].append(_record(
                problem, n, status, ceilings, time=timing.as_dict(), config=config,
                correctness={"rel_err": checks[n][2], "message": checks[n][1]},
            ))  # fmt: skip
        for step, timing in steps.items():
            if isinstance(timing, Exception):
                run["records"].append(_record(problem, f"step:{step}", "error", ceilings,
                                              message=f"{type(timing).__name__}: {timing}"[:300]))  # fmt: skip
            else:
                run["records"].append(_record(problem, f"step:{step}", "ok", ceilings,
                                              time=timing.as_dict(), config={"step": step}))  # fmt: skip
        torch.cuda.empty_cache()
        in_order(run)
        write_layer_run(run, out)
        print(f"{problem.name}: " + ", ".join(
            f"{r['impl']} {r['time']['median_us']:.1f} us" if r["status"] == "ok"
            else f"{r['impl']} {r['status']}" for r in run["records"] if r["problem"] == problem.id
        ), flush=True)  # fmt: skip
    run["env"]["elapsed_s"] = round(time.monotonic() - t0, 1)
    write_layer_run(run, out)
    print(f"wrote {out}")
    return 0
