"""The models: what a configuration should cost, read without a GPU. Not imported by the library.

* ``occupancy``  tiles, CTAs and waves of a grouped GEMM: the SM x time map of a call
* ``roofline``   the roofline of a grouped GEMM, with the measured ceilings
* ``perfmodel``  the latency model of the course's kernels (bytes in flight, the floor, the power cap)
* ``calibrate``  ``python -m pearl_moe calibrate``: the model against every committed measurement
"""
