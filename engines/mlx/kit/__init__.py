"""The MLX toolkit below the text and vision engines: what both do to an MLX model, once.

`weights` (how the weights are held and what they weigh), `sizing` (KV bytes per token and
the window the memory left affords), `template` (a request through the chat template),
`sampling` and `prepare` (what a generation starts from: budget, sampler, output parser),
`stream` (the single-stream decode loop), `sequence` (one request of a batch, token by
token), `memory` (giving MLX's buffers back) and `prefix` (how long two token sequences
run alike); `lookup` and `draft_model` propose the drafts speculation verifies. The
engines differ only in what they pass in: mlx-lm's or mlx-vlm's model call and responses,
and the vision engine's pictures.
"""
