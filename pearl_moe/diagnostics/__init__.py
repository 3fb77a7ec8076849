"""Diagnostics for a GPU the kernels have not run on. Not imported by the library.

* ``selftest``          ``python -m pearl_moe selftest``: a new GPU's first run, phase by phase
* ``descriptor_check``  the per-expert TMA store descriptors, patched on the device, byte for byte
* ``tmem_lanes``        which TMEM lanes each sm_100a epilogue warp's ``tcgen05.ld`` reaches (PTX)
"""
