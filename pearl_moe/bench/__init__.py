"""The bench: measure the kernels and the layer on a GPU, and tune the default. Not imported by the
library.

* ``harness``         check on fresh inputs, then time in CUDA graphs, interleaved rounds
* ``registry``        the implementations a run can time (ours, quack, Triton, torch), grouped
                      GEMMs and whole layers
* ``baselines``       the grouped GEMMs' adapters; ``triton_grouped`` the Triton grouped GEMM
* ``layer_impls``     the whole layer's implementations (ours, torch, quack, SonicMoE)
* ``compare``         geomeans and verdicts of a run (grouped GEMMs or layers), the step profile
* ``cli``             ``python -m pearl_moe bench``
* ``tune``            ``python -m pearl_moe tune``: time candidates, write ``tuning/<GPU>.json``
* ``shape_sets``      the tuning set and the held-out set of public MoE layers
* ``layer``           ``python -m pearl_moe layer``: whole MoE layers against their floor, and
                      (``--steps``) where their time goes at decode
* ``verify``          the GPU tests' correctness check (NaN-poisoned output, float32 reference)
"""
