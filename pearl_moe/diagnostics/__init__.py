"""Diagnostics for a GPU the kernels have not run on. Not imported by the library.

* ``selftest``          ``python -m pearl_moe selftest``: a new GPU's first run, phase by phase
                        (``docs/first_run_b200.md``)
* ``gpu_cases``         the kernel cases the GPU suites, the selftest and the CPU compile check share
* ``watchdog``          the pytest plugin behind the selftest's per-test timeout
* ``descriptor_check``  the per-expert TMA store descriptors, patched on the device, stored through
                        with the GEMM's own C store
* ``tmem_lanes``        which TMEM lanes each sm_100a epilogue warp's ``tcgen05.ld`` reaches (PTX)
"""
