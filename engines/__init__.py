"""Engines and the runtime they share. Here: the Engine protocol (`base`), the runner with its
FIFO queue (`runner`, `job`, `batch`), the memory budget (`residency`), `factory`, the one
exception tree (`errors`) and the event door (`log`); the scripted engine (`scripted`).
Subpackages: `mlx/` (the MLX chat engine), `embed/` (embeddings), `sources/` (model sources),
`text/` (output parsing), `policy/` (guardrails, repair, truncation). Layers: `schemas` ←
`engines` ← `gateway`; nothing here knows HTTP."""
