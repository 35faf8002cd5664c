"""The MLX text engine on mlx-lm: loading (`loading`), what a request prefills from
(`prepared`), continuous batching (`batch`) and the single-sequence path (`single`), drafts
verified (`speculate`), a model in its own process (`isolated`, `isolated_child`) and a model
sharded over MLX's collectives (`distributed/`). A sibling of `engines.vision`,
`engines.embed` and `engines.rerank`: imports only the MLX toolkit (`engines.mlx`), the
runtime in `engines/`, `engines.text`, `engines.sources` and `schemas`."""
