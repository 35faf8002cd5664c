"""The MLX toolkit below every MLX engine (`engines.llm`, `engines.vision`, `engines.embed`,
`engines.rerank`):
what they all do to an MLX model, once, knowing none of them.

`load` (the one load recipe: a source's weights held as the platform path wants, the window
sized), `weights` (how the weights are held and what they weigh), `sizing` (KV bytes per
token and the window the memory left affords), `platform` (asking mlx.core for the platform
path), `facts` (what a source says without loading it), `template` (a request through the
chat template), `encode` and `detokenize` (text to tokens and back), `sampling`,
`penalties` and `prepare` (what a generation starts from: budget, sampler, output parser),
`grammar` (the constraint mask on the logits), `logprobs`, `stream` (the single-stream
decode loop), `sequence` (one request of a batch, token by token), `memory` (giving MLX's
buffers back), `lookup` and `draft_model` (the drafts speculation verifies), `bert` (the
BERT encoder the embedder and the cross-encoder share), and `cache/`
(prefix reuse of parked caches, the disk tier's blocks and rates). The engines differ only
in what they pass in: mlx-lm's or mlx-vlm's model call and responses, the vision engine's
pictures. May import mlx, mlx-lm, the runtime in `engines/`, `engines.text`, `engines.cache`
and `schemas`; never an engine.
"""
