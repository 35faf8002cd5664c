"""The reranking engine on MLX: a cross-encoder (the MLX toolkit's BERT with a
classification head) scoring query-document pairs. A sibling of `engines.llm`,
`engines.vision` and `engines.embed`: imports only the MLX toolkit (`engines.mlx`), the
runtime in `engines/`, `engines.sources` and `schemas`."""
