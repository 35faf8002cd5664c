"""The embedding engine on the MLX toolkit's BERT (`engines.mlx.bert`); it also reranks, by
cosine similarity. May import mlx, tokenizers, the MLX toolkit, the runtime in `engines/`
and `schemas`; never a sibling engine."""
