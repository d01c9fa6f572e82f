"""Code generators for the CUDA kernels (python3 -m scripts.gen.gen_wgmma)."""
