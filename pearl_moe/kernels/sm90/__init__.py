"""sm_90a (Hopper) kernels of the course: stage 1 plain GEMM, stage 2 grouped, stage 3 persistent."""
