"""The embedding engine and the BERT encoder it runs on MLX. May import mlx, tokenizers,
the runtime in `engines/` and `schemas`."""
