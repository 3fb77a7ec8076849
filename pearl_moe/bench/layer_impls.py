"""The whole MoE layer's implementations, registered in :mod:`pearl_moe.bench.registry` under
``kind="layer"`` (the grouped GEMMs' are in :mod:`pearl_moe.bench.baselines`): each
``prepare(inputs) -> Prepared`` takes the dict of :func:`pearl_moe.bench.layer.make_layer_inputs`
and returns the call that computes the layer's output from it. What they are:
:mod:`pearl_moe.bench.layer`'s docstring.
"""

from __future__ import annotations

import functools
import os

from .registry import Implementation, ImplementationUnavailable, Prepared, register

__all__ = ["TORCH_GLUE", "glue", "gemm_choices", "count_dsl_as_installed"]

#: The glue of runs that do not record one (before the Triton kernels, all were torch's).
TORCH_GLUE = "routing metadata and combine: torch operations"


def glue() -> str:
    """How the routing metadata and the combine ran (recorded with each implementation that uses
    this package's: ours and the quack composition; the torch composition has its own)."""
    from ..moe import glue_kernels

    if glue_kernels.available():
        return (
            "routing metadata and combine: Triton kernels (pearl_moe.moe.glue_kernels; the "
            f"metadata up to {glue_kernels.MAX_KERNEL_ROWS} routed rows, torch beyond)"
        )
    return TORCH_GLUE


def gemm_choices(inputs: dict, fused: bool, gather: bool = False) -> dict:
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


def gather_label(inputs: dict) -> str:
    """How our forward's gathered copy of x is made on these inputs (recorded with each time)."""
    from ..moe.routing import gathers_in_one_launch

    if gathers_in_one_launch(inputs["topk_ids"]):
        return ONE_LAUNCH_GATHER
    return "index_select after the routing metadata"


#: :func:`gather_label` where the routing metadata's one launch also copies x's routed rows.
ONE_LAUNCH_GATHER = "in the routing metadata's launch (route_and_gather)"


def _pearl(inputs: dict) -> Prepared:
    from ..moe import moe_forward

    def run():
        return moe_forward(
            inputs["x"], inputs["w_gate_up"], inputs["w_down"], topk_ids=inputs["topk_ids"],
            topk_weights=inputs["topk_weights"], backend="pearl", check=False,
        )  # fmt: skip

    return Prepared(run, {"backend": "pearl", "fused": "none (activation and combine apart)",
                          "gather": gather_label(inputs), "glue": glue(),
                          **gemm_choices(inputs, fused=False)})  # fmt: skip


def _pearl_fused(inputs: dict, gather: str = "copy", pdl: bool | None = None) -> Prepared:
    from ..kernels import interleave_gate_up
    from ..moe import moe_forward

    w_fused = interleave_gate_up(inputs["w_gate_up"])  # once, as a checkpoint loader would

    def run():
        return moe_forward(
            inputs["x"], w_fused, inputs["w_down"], topk_ids=inputs["topk_ids"],
            topk_weights=inputs["topk_weights"], backend="pearl", check=False,
            gate_up_layout="interleaved", gather=gather, pdl=pdl,
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
    kernels = gemm_choices(inputs, fuses, gather == "kernel")
    how = gather_label(inputs) if gather == "copy" else "in the gate+up kernel (a_index)"
    return Prepared(run, {"backend": "pearl", "fused": fused, "gather": how, "glue": glue(),
                          "launches": launches_label(inputs, pdl), **kernels})  # fmt: skip


def launches_label(inputs: dict, pdl: bool | None) -> str:
    """How our forward launches its kernels on these inputs (recorded with each time)."""
    from ..moe.layer import programmatic_launches

    x = inputs["x"]
    if x.is_cuda and programmatic_launches(pdl, "pearl", inputs["topk_ids"].numel(), x.device):
        return "GEMMs and combine as programmatic dependent launches (pdl)"
    return "each kernel after the one before it completes"


def _pearl_serial(inputs: dict) -> Prepared:
    return _pearl_fused(inputs, pdl=False)


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
            "glue": glue(),
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


#: The layer implementations: name -> (prepare(inputs) -> Prepared, what it is), registered in
#: :mod:`pearl_moe.bench.registry` under ``kind="layer"``.
for _name, _prepare, _about in (
    ("pearl", _pearl, "moe_forward on pearl-moe's grouped GEMMs (unfused steps between them)"),
    ("pearl-fused", _pearl_fused, "moe_forward on pearl-moe's grouped GEMMs, the activation fused "
     "into the gate+up epilogue where autotune.fuse_activation says so"),
    ("pearl-serial", _pearl_serial, "pearl-fused with no programmatic dependent launch (pdl=False): "
     "every kernel starts after the one before it completes"),
    ("pearl-gather", _pearl_gather, "pearl-fused with the token gather in the gate+up kernel's "
     "producer (no gathered copy)"),
    ("torch", _torch, "torch composition: index_select, _grouped_mm, silu*mul, index_add_"),
    ("quack", _quack, "quack gemm_gated with gathered A + varlen gemm + gather-sum (SonicMoE's)"),
    ("sonic", _sonic, "SonicMoE itself (its own environment and run: compare across runs)"),
):  # fmt: skip
    register(_name, functools.partial(Implementation, _name, _prepare, {}, _about), kind="layer")
