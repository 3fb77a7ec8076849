"""Per-expert TMA store descriptors in global memory: the host encodes, the device patches.

A TMA store clips its box at the bounds of its descriptor (a 128-byte ``CUtensorMap``). A grouped
GEMM that stores through one descriptor over all rows would spill a partial tile into the next
expert, so the sm_100a grouped stages store each expert's tiles through a descriptor of that
expert's rows only. The expert's rows are known only on the device (the offsets are never copied
to the host), so the descriptors are written on the device, by a one-warp-per-expert kernel
launched just before the GEMM, into a global workspace of ``experts x 128 B``.

How a descriptor is written (:func:`write_expert_descriptor`), as CUTLASS's grouped GEMM does:

1. **copy** the descriptor the host encoded for the whole output (the kernel's TMA atom, passed
   as a kernel parameter) into the expert's slot: every field the driver's encoder chose
   (element type, box, swizzle, interleave, L2 promotion, out-of-bounds fill) stays the host's.
   The DSL's ``copy_tensormap`` moves the first 64 bytes of the 128-byte ``CUtensorMap`` (as in
   NVIDIA's own CuTe DSL grouped GEMM); the rest of the slot keeps the zeros it was allocated
   with. The driver's ``cuTensorMapEncodeTiled`` sets two bits in those other 64 bytes; the H200
   check stores through slots without them, correctly;
2. **patch** only the base address, the extents and the strides with ``tensormap.replace``
   (``cpasync.update_tma_descriptor``) to the expert's ``(rows_e, n)`` view;
3. **release** the writes to the tensor-map proxy (``fence.proxy.tensormap::generic.release``);
   the GEMM's epilogue acquires them (``fence_tma_desc_acquire``) before its first store.

Nothing is *encoded* on the device: the earlier version built a new TMA atom inside the kernel,
which makes the DSL emit its own descriptor encoder (its choices for some fields depend on the
row count) that no hardware had run. The byte layout of a descriptor is the same on sm_90a and
sm_100a, so the H200 checks this path (:mod:`pearl_moe.diagnostics.descriptor_check`): device-patched
against host-encoded bytes, and clipped TMA stores through the patched descriptors.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync
from cutlass.tensor_utils import TensorMapManager, TensorMapUpdateMode

__all__ = [
    "TMA_DESCRIPTOR_BYTES",
    "descriptor_ptr",
    "expert_output_view",
    "workspace_bytes",
    "workspace_for",
    "workspace_gmem_ptr",
    "write_expert_descriptor",
]

#: A CUtensorMap is 128 bytes and must be 64-byte aligned (we keep 128).
TMA_DESCRIPTOR_BYTES = 128


def workspace_bytes(slots: int) -> int:
    """Global workspace for ``slots`` descriptors (one per expert in the grouped kernels)."""
    return slots * TMA_DESCRIPTOR_BYTES


@cute.jit
def descriptor_ptr(mWorkspace: cute.Tensor, slot, space=cute.AddressSpace.generic):
    """Pointer to descriptor ``slot`` (128 bytes) of a workspace of int64 words.

    Generic address for ``tma_desc_ptr`` of a TMA copy; global address for writing it.
    """
    # workspace: (slots * 16,) Int64 words, 128 B per slot
    word = mWorkspace.iterator + slot * (TMA_DESCRIPTOR_BYTES // 8)
    manager = TensorMapManager(TensorMapUpdateMode.GMEM, TMA_DESCRIPTOR_BYTES)
    return manager.get_tensormap_ptr(word, space)


@cute.jit
def expert_output_view(mC: cute.Tensor, start, rows):
    """``(rows, n)``: rows ``[start, start + rows)`` of the row-major output ``mC``.

    The element offset ``start * n`` is formed in 64 bits (in Int32 it wraps once
    ``start * n >= 2**31``: 524,288 rows at ``n = 4096``). A zero-row expert gets a one-row view:
    ``tensormap.replace`` needs a non-zero extent, and no tile ever stores through that slot.
    """
    return cute.make_tensor(
        mC.iterator + cutlass.Int64(start) * cutlass.Int64(mC.stride[0]),
        cute.make_layout((cutlass.max(rows, 1), mC.shape[1]), stride=mC.stride),
    )


@cute.jit
def write_expert_descriptor(tma_atom: cute.CopyAtom, mWorkspace: cute.Tensor, slot, view):
    """Write into ``slot`` the host's descriptor of ``tma_atom``, patched to cover ``view``.

    Called by one whole warp: one elected lane copies (64 bytes), and the DSL issues each
    ``tensormap.replace`` from one elected lane too. Only the base address, extents and strides
    change; every other
    field keeps the value the host's encoder gave it. The release fence makes the patched bytes
    visible to the tensor-map proxy of a later ``fence_tma_desc_acquire``.
    """
    gmem_ptr = descriptor_ptr(mWorkspace, slot, cute.AddressSpace.gmem)
    with cute.arch.elect_one():
        cpasync.copy_tensormap(tma_atom, gmem_ptr)
    cute.arch.sync_warp()
    # the copy's generic stores are ordered before the in-place patch of the same bytes
    cute.arch.fence_acq_rel_cta()
    cpasync.update_tma_descriptor(tma_atom, view, gmem_ptr)
    cute.arch.sync_warp()
    cpasync.fence_tma_desc_release()


#: (device index, stream handle, slots) -> int64 tensor of ``slots * 16`` words.
_WORKSPACES: dict = {}


def workspace_for(device, stream, slots: int):
    """The descriptor workspace (``slots x 128 B``) for launches on ``stream`` of ``device``.

    Allocated on first use and kept: the descriptor kernel rewrites it at every launch, before the
    GEMM of the same launch reads it, so launches in one stream may share it (stream order). It is
    one per stream because launches on two streams at once would overwrite each other's
    descriptors. (A CUDA graph keeps the workspace of the stream it was captured on: do not replay
    it on another stream while a launch with the same expert count runs on the capture stream.)
    """
    import torch

    device = torch.device(device)
    key = (device.index, int(stream), slots)
    ws = _WORKSPACES.get(key)
    if ws is None:
        # zero-filled, and this matters: the copy writes a slot's first 64 bytes only, so the
        # other 64 hold these zeros (never uninitialized memory)
        ws = torch.zeros(slots * TMA_DESCRIPTOR_BYTES // 8, dtype=torch.int64, device=device)
        if ws.data_ptr() % TMA_DESCRIPTOR_BYTES:
            raise RuntimeError("the TMA descriptor workspace is not 128-byte aligned")
        _WORKSPACES[key] = ws
    return ws


def workspace_gmem_ptr(ws):
    """A 128-byte-aligned global int64 pointer to a workspace from :func:`workspace_for`."""
    return cute.runtime.make_ptr(
        cutlass.Int64, ws.data_ptr(), cute.AddressSpace.gmem, assumed_align=TMA_DESCRIPTOR_BYTES
    )
