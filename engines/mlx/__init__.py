"""The MLX chat engine on mlx-lm: loading, the chat template, single-stream and batched decoding,
the platform path (BLAS, float32 on the CPU) and context sizing. May import mlx, mlx-lm, the
runtime in `engines/`, `engines.text`, `engines.sources` and `schemas`."""
