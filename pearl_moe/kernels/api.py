"""The public grouped GEMM: validation, dispatch by GPU architecture and stage, compile cache."""

from __future__ import annotations

from ..config import GemmConfig, unknown_activation
from ..workloads import check_dims, check_offsets
from . import autotune, compile_cache
from .dispatch import KERNEL_FAMILIES, StageKernel, can_implement, stage_module
from .gated_layout import gate_up_rows_problem
from .ladder import KERNEL_STAGES, LAST_STAGE, stage_config
from .targets import gpu_target, persistent_ctas

__all__ = [
    "arch_of",
    "compiled_kernel",
    "grouped_gemm",
    "with_activation",
    "with_gather",
    "default_choice",
    "validate",
    "can_implement",
    "default_config",
    "stage_module",
    "StageKernel",
    "KERNEL_FAMILIES",
    "STAGE_NAMES",
]

#: Stage number -> kernel module name inside ``pearl_moe.kernels.<arch>`` (the same names on both
#: architectures; stages 3-7 share ``stage3_persistent``).
STAGE_NAMES = {n: s.module for n, s in KERNEL_STAGES.items()}

_COMPILED: dict = {}


def default_config(arch: str, stage: int = 3) -> GemmConfig:
    """The configuration ``stage`` runs with when the caller gives none (the course's ladder,
    :func:`pearl_moe.kernels.ladder.stage_config`, with the deepest ring that fits)."""
    return stage_config(arch, stage).resolved()


def arch_of(device) -> str:
    """The kernel family of ``device`` (``sm_90a`` or ``sm_100a``); a ``ValueError`` for a GPU
    the kernels have no target for, or a ``CUTE_DSL_ARCH`` that names another target than the
    GPU's (:func:`pearl_moe.kernels.targets.gpu_target`)."""
    return gpu_target(device)[0]


def _overlap(a, b) -> bool:
    """Whether two contiguous tensors share any byte of memory."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1 = a0 + a.numel() * a.element_size()
    b1 = b0 + b.numel() * b.element_size()
    return a.numel() > 0 and b.numel() > 0 and a0 < b1 and b0 < a1


def validate(
    A,
    W,
    offsets,
    out=None,
    check: bool = True,
    device_type: str = "cuda",
    activation=None,
    a_index=None,
):
    """Raise ``ValueError`` for anything the kernels cannot run.

    Returns ``(rows, n, k, experts, host_offsets)``; ``host_offsets`` is the list of E end offsets
    when ``check`` is true, else None. With ``check=False`` the offsets' *values* are not inspected
    (that needs a device-to-host copy, which a CUDA graph cannot capture); their dtype, device and
    length still are. ``device_type`` is the device every tensor must be on ("cuda" for a launch;
    CPU tests pass "cpu").

    With ``a_index`` (A's rows through an index, ``gather_a``), ``A`` is ``x`` with any number of
    rows and the problem has ``rows = a_index.shape[0]`` rows: ``a_index`` must be a 1-D int32
    tensor on A's device with one entry per row (the offsets end at ``rows``); with ``check`` its
    values are copied to the host and must lie in ``[0, x.shape[0])``.
    """
    import torch

    for name, t in (("A", A), ("W", W)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.bfloat16:
            raise ValueError(f"{name} must be bfloat16, got {t.dtype}")
        if t.device.type != device_type:
            raise ValueError(f"{name} must be on a {device_type.upper()} device, got {t.device}")
    if A.dim() != 2:
        raise ValueError(f"A must be 2-D (rows, k), got shape {tuple(A.shape)}")
    if W.dim() != 3:
        raise ValueError(f"W must be 3-D (experts, n, k), got shape {tuple(W.shape)}")
    rows, k = A.shape
    if a_index is not None:
        rows = _check_a_index(a_index, A)
    experts, n, wk = W.shape
    if wk != k:
        raise ValueError(f"W's k ({wk}) differs from A's k ({k})")
    if experts < 1:
        raise ValueError("W has no experts")
    check_dims(k, n)
    if rows >= 2**31:
        raise ValueError(f"A has {rows} rows; the kernels take the row count as a 32-bit Int32")
    if W.device != A.device:
        raise ValueError(f"A is on {A.device} but W on {W.device}")
    for name, t in (("A", A), ("W", W)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (row-major, k innermost)")
        if t.data_ptr() % 16:
            raise ValueError(f"{name}'s data pointer is not 16-byte aligned (TMA needs it)")
    if not isinstance(offsets, torch.Tensor):
        raise ValueError("offsets must be a torch.Tensor of int32 on A's device")
    if offsets.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"offsets must be int32 (or int64), got {offsets.dtype}")
    if offsets.device != A.device:
        raise ValueError(f"offsets are on {offsets.device} but A on {A.device}")
    if offsets.dim() != 1 or offsets.numel() not in (experts, experts + 1):
        raise ValueError(
            f"expected {experts} end offsets or {experts + 1} cu_seqlens for W's {experts} "
            f"experts, got shape {tuple(offsets.shape)}"
        )
    if problem := unknown_activation(activation):
        raise ValueError(problem)
    if activation is not None and (problem := gate_up_rows_problem(n, "W")):
        raise ValueError(f"a fused {activation}: {problem}")
    n_out = n // 2 if activation is not None else n
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.dtype != torch.bfloat16:
            raise ValueError("out must be a bfloat16 torch.Tensor")
        if tuple(out.shape) != (rows, n_out):
            raise ValueError(f"out must have shape {(rows, n_out)}, got {tuple(out.shape)}")
        if out.device != A.device:
            raise ValueError(f"out is on {out.device} but A on {A.device}")
        if not out.is_contiguous() or out.data_ptr() % 16:
            raise ValueError("out must be contiguous with a 16-byte aligned data pointer")
        for name, t in (("A", A), ("W", W), ("a_index", a_index)):
            if t is not None and _overlap(out, t):
                raise ValueError(f"out overlaps {name} in memory: the kernel would read its output")
    host_offsets = None
    if check:
        if a_index is None:
            host_offsets = check_offsets(offsets.detach().cpu(), rows, experts)
        else:
            host_offsets = _check_a_index_values(a_index, A.shape[0], offsets, rows, experts)
    return rows, n, k, experts, host_offsets


def _check_a_index(a_index, A) -> int:
    """The problem's row count, ``a_index.shape[0]``, after the checks that need no copy."""
    import torch

    if not isinstance(a_index, torch.Tensor):
        raise ValueError(f"a_index must be a torch.Tensor of int32, got {type(a_index).__name__}")
    if a_index.dtype != torch.int32:
        raise ValueError(f"a_index must be int32 (one row of A per row), got {a_index.dtype}")
    if a_index.dim() != 1:
        raise ValueError(
            f"a_index must be 1-D (one entry per row), got shape {tuple(a_index.shape)}"
        )
    if a_index.device != A.device:
        raise ValueError(f"a_index is on {a_index.device} but A on {A.device}")
    if not a_index.is_contiguous() or a_index.data_ptr() % 4:
        raise ValueError("a_index must be contiguous with a 4-byte aligned data pointer")
    if a_index.shape[0] >= 2**31:
        raise ValueError(f"a_index has {a_index.shape[0]} rows; the kernels count rows in Int32")
    return a_index.shape[0]


def _check_a_index_values(a_index, a_rows: int, offsets, rows: int, experts: int) -> list[int]:
    """Host copies of the offsets and of ``a_index``: the offsets end at ``rows`` (the index's
    length) and every index lies in ``[0, a_rows)``. Returns the end offsets."""
    host = offsets.detach().cpu()
    try:
        host_offsets = check_offsets(host, rows, experts)
    except ValueError as err:
        if host.numel() and int(host[-1]) != rows:
            raise ValueError(
                f"offsets end at row {int(host[-1])} but a_index has {rows} entries (one per "
                "row of the problem)"
            ) from None
        raise err
    if rows:
        values = a_index.detach().cpu()
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= a_rows:
            bad = low if low < 0 else high
            raise ValueError(f"a_index holds {bad}, outside [0, {a_rows}): A (x) has {a_rows} rows")
    return host_offsets


def compiled_kernel(
    arch: str, stage: int, config: GemmConfig, n: int, k: int, experts: int, sms: int
):
    """The compiled kernel of ``stage`` for this configuration and shape: from this process's
    memory, else from the disk cache (:mod:`pearl_moe.kernels.compile_cache`: a new process loads
    in milliseconds what an earlier one compiled), else compiled now and stored there."""
    key = (arch, stage, config, n, k, experts, sms, "bf16")
    fn = _COMPILED.get(key)
    if fn is None:
        module = stage_module(arch, stage)
        fn = compile_cache.get_or_compile(
            arch,
            stage,
            config,
            n,
            k,
            experts,
            sms,
            lambda: module.compile_kernel(config, n, k, experts, sms),
        )
        _COMPILED[key] = fn
    return fn


def with_activation(
    config: GemmConfig, activation: str, n: int | None = None, k: int | None = None
) -> GemmConfig:
    """``config`` with a fused gated ``activation``, changed as little as the option needs: the
    direct store, tokens as rows (no ``swap_ab``), a tile width the fused epilogue takes (a
    multiple of 32 on sm_90a, of 64 on sm_100a; :func:`autotune.activation_ready`). Given
    ``n`` (and ``k``), also what the shape needs: on sm_100a a thread stores its run of outputs
    whole, so where ``n / 2`` does not split into whole runs the epilogue takes 16 columns a
    step (runs of 8 outputs)."""
    width = autotune.fused_tile_multiple(config.arch)
    tile_n = (
        config.tile_n if config.tile_n % width == 0 else max(width, config.tile_n // width * width)
    )
    changes = dict(activation=activation, epilogue="direct_store", swap_ab=False, tile_n=tile_n)
    if config.swap_ab and config.tile_m < 64:
        changes["shift_a_box"] = True  # keep short A boxes inside A, as the swapped tile did
    adapted = config.with_(**changes, ring_depth=None).resolved()
    if n is None or config.arch != "sm_100a":
        return adapted
    for candidate in (adapted, adapted.with_(epi_tile_n=16)):
        try:
            autotune.stage_for(candidate, n, k)
        except ValueError:
            continue
        return candidate
    return adapted  # the caller's can_implement says why it cannot run


def with_gather(config: GemmConfig, n: int, k: int, stage: int | None = None) -> GemmConfig:
    """``config`` with A's rows read through an index (``with_(gather_a=True)``) where the
    option combines with it at ``(n, k)`` (and at ``stage``, if given); else, for a tile of 128
    or more rows, the same tile without what the gather cannot take (B entries over two K tiles,
    clusters, the shifted A box); else a plain 128 x 128 tile with the gather, the direct store
    (the TMA store at stage 3) and ``config``'s activation.

    Keeping the tile matters at prefill: on the H200 the GLM 5.3 layer at 4096 tokens took
    4592 us with the 128 x 128 gather tile (``git show 7ca988e:results/H200/moe_layer.json.gz``)
    and 3913 us with the pick's 128 x 256 tile (``results/H200/moe_layer.json.gz``), 0.977x the
    same layer on the gathered copy. A 64-row pick is not kept: Kimi K3's 1024-token layer, whose
    fused pick is a 64 x 256 split-accumulator tile, took 1.36x the copy's time on the fallback tile."""
    at = LAST_STAGE if stage is None else stage
    tries = [dict(gather_a=True)]
    if config.tile_m >= 128:
        tries.append(dict(gather_a=True, b_k_tiles=1, cluster_n=1, cluster_m=1,
                          shift_a_box=False, ring_depth=None))  # fmt: skip
    for changes in tries:
        try:
            candidate = config.with_(**changes).resolved()
        except ValueError:
            continue
        if not can_implement(candidate, at, n, k):
            return candidate
    epilogue = "tma_store" if at == 3 and config.activation is None else "direct_store"
    return GemmConfig(
        arch="sm_90a", tile_m=128, tile_n=128, tile_k=64, epilogue=epilogue,
        activation=config.activation, gather_a=True,
    ).resolved()  # fmt: skip


def default_choice(
    arch: str, n: int, k: int, experts: int, rows: int, gpu: str | None = None,
    activation: str | None = None, gather: bool = False,
) -> tuple[int, GemmConfig]:  # fmt: skip
    """The ``(stage, config)`` that :func:`grouped_gemm` runs when given neither: the tuned pick
    (:func:`autotune.pick_config`, a fused one for an ``activation``), adapted to the
    activation (:func:`with_activation`) and to the gather of A (:func:`with_gather`). A pure
    function of its arguments (what the host knows without a sync): the layer benchmark records
    it beside each time."""
    if gather and arch != "sm_90a":
        raise ValueError(
            f"the gather of A (gather_a) is implemented by the sm_90a kernels only, not {arch}"
        )
    stage, config = autotune.pick_config(
        arch, n, k, experts, rows, gpu, fused=activation is not None
    )
    if activation is not None:
        config = with_activation(config, activation, n, k)
        stage = autotune.stage_for(config, n, k)
    config = config.resolved()
    if gather and not config.gather_a:
        config = with_gather(config, n, k)
        stage = autotune.stage_for(config, n, k)
    return stage, config


def grouped_gemm(
    A,
    W,
    offsets,
    config=None,
    out=None,
    stage: int | None = None,
    check: bool = True,
    host_offsets=None,
    activation: str | None = None,
    a_index=None,
    pdl: bool = False,
):
    """``out[rows_e] = A[rows_e] @ W[e]^T`` for every expert ``e``.

    Which kernel runs (``stage``, ``config``):

    * neither given (the default): the tuned choice for this GPU and shape,
      :func:`pearl_moe.kernels.autotune.pick` (the GPU's measured table, or the one it borrows,
      else a heuristic). It is made from what the host knows without a sync (arch, n, k, experts
      and ``rows / experts`` from ``A.shape``), so the call stays capturable in a CUDA graph;
    * ``stage=N`` alone: the course's kernel stage N with its configuration,
      :func:`default_config` ``(arch, N)``;
    * ``config`` alone: the first stage from 3 on that runs it (:func:`autotune.stage_for`);
    * both: that stage with that configuration.

    A (rows, k) bf16, W (E, n, k) bf16, offsets: E int32 end offsets (torch ``grouped_mm``) or
    E + 1 ``cu_seqlens`` with a leading 0. Returns ``out`` (rows, n) bf16. Every problem is a
    ``ValueError`` raised before anything is launched. ``check=False`` skips the offsets' value
    check (no device-to-host copy: the call can be captured in a CUDA graph). Stage 1, the
    per-expert loop, needs the offsets on the host: pass them as ``host_offsets`` (a list, e.g.
    from the router; validated on the host, no device copy) or let the call copy them.

    ``activation="swiglu"`` (or ``"geglu"``) fuses ``act(gate) * up`` into the epilogue of a
    gate+up projection: ``W``'s ``n = 2 x intermediate`` rows must be interleaved in blocks of 8
    (:func:`pearl_moe.kernels.interleave_gate_up` converts the common ``[gate; up]`` layout) and
    ``out`` is ``(rows, n / 2)``. The default configuration is the table's fastest timed tile
    that the fused epilogue runs as measured (``autotune.pick(..., fused=True)``), adapted to it
    (:func:`with_activation`); a given ``config`` must carry it.

    ``a_index`` (sm_90a): A's rows through an index, ``out[r] = A[a_index[r]] @ W[e]^T`` for row
    ``r`` of expert ``e`` (an MoE layer's token gather without the ``A[a_index]`` copy). ``A`` may
    then have any number of rows; ``a_index`` is int32 on A's device with one entry per row
    (``out`` has ``a_index.shape[0]`` rows, and the offsets end there); with ``check`` its values
    are checked to lie in ``[0, A.shape[0])`` on the host before the launch (with
    ``check=False`` an index outside A is an out-of-bounds read). The kernel is the persistent one
    with ``gather_a``: a given ``config`` must carry it; the default is :func:`with_gather` of the
    tuned choice.

    ``pdl=True``: launch the kernel as a programmatic dependent of the kernel before it
    on the stream (:attr:`GemmConfig.pdl`): its launch and prologue overlap that kernel's end, and
    the next programmatic dependent (the layer's second GEMM) may launch as soon as this one has
    waited. The result is the same; a given ``config`` may carry it instead.
    """
    import torch

    if not isinstance(pdl, bool):
        raise ValueError(f"pdl must be True or False, got {pdl!r}")
    if stage is not None and stage not in STAGE_NAMES:
        raise ValueError(f"stage must be one of {sorted(STAGE_NAMES)}, got {stage!r}")
    stage_given = stage
    if config is not None and not isinstance(config, GemmConfig):
        raise ValueError(f"config must be a GemmConfig, got {type(config).__name__}")
    rows, n, k, experts, checked_host = validate(
        A, W, offsets, out, check, activation=activation, a_index=a_index
    )
    if host_offsets is not None:
        host_offsets = check_offsets(host_offsets, rows, experts)
        if checked_host is not None and checked_host != host_offsets:
            raise ValueError("host_offsets differ from the offsets tensor")
    arch = arch_of(A.device)
    if config is not None and config.arch != arch:
        raise ValueError(f"config is for {config.arch} but the GPU is {arch}")
    if config is not None and config.activation != activation:
        raise ValueError(
            f"config fuses activation={config.activation!r} but the call asks for {activation!r}"
        )
    gather = a_index is not None
    if gather and arch != "sm_90a":
        raise ValueError(
            f"a_index (gather_a) is implemented by the sm_90a kernels only, not {arch}"
        )
    if config is not None and config.gather_a != gather:
        raise ValueError(
            "config reads A through an index (gather_a) but no a_index was given"
            if config.gather_a
            else "a_index given: the config must carry gather_a=True (see with_gather)"
        )
    if stage is None and config is None:
        gpu = autotune.gpu_name(A.device)
        stage, config = default_choice(arch, n, k, experts, rows, gpu, activation, gather)
    elif stage is None:
        stage = autotune.stage_for(config.resolved(), n, k)
    if config is None and activation is not None:
        config = with_activation(default_config(arch, stage), activation, n, k)
    config = (config or default_config(arch, stage)).resolved()
    if gather and not config.gather_a:  # the picked or the stage's configuration
        config = with_gather(config, n, k, stage_given)
        if stage_given is None:
            stage = autotune.stage_for(config, n, k)
    if pdl:
        config = config.with_(pdl=True)
    problems = can_implement(config, stage, n, k)
    if problems:
        raise ValueError(
            f"{config.describe()} cannot run as {arch} stage {stage}: " + "; ".join(problems)
        )
    if out is not None and out.data_ptr() % config.output_alignment:
        raise ValueError(
            f"out's data pointer must be {config.output_alignment}-byte aligned for "
            f"{config.describe()} (GemmConfig.output_alignment), got "
            f"{out.data_ptr() % 256} bytes past a 256-byte boundary"
        )
    if stage == 1 and host_offsets is None:
        host_offsets = checked_host or check_offsets(offsets.detach().cpu(), rows, experts)
    from .host import cuda_stream, device_end_offsets

    if out is None:
        out = torch.empty(rows, config.output_columns(n), dtype=torch.bfloat16, device=A.device)
    if rows == 0:
        return out
    end_offsets = device_end_offsets(offsets, experts)
    sms = torch.cuda.get_device_properties(A.device).multi_processor_count
    # the persistent grid: one CTA per SM, or 2 x the clusters of two that fit at once (2-CTA)
    ctas = persistent_ctas(arch, config, sms, A.device)
    fn = compiled_kernel(arch, stage, config, n, k, experts, ctas)
    gathered = {} if a_index is None else {"a_index": a_index}  # only gather_a kernels take it
    stage_module(arch, stage).launch(
        fn, A, W, end_offsets, out, host_offsets, cuda_stream(A.device), **gathered
    )
    return out
