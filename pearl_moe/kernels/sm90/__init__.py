"""sm_90a (Hopper) kernels of the course: stage 1 plain GEMM, stage 2 grouped, stage 3 persistent."""

STAGE_MODULES = {1: "stage1_gemm", 2: "stage2_grouped", 3: "stage3_persistent"}
