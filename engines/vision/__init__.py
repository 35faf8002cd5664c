"""Vision-language models on mlx-vlm: the engine (`engine`; `batch` and `single` decode),
checkpoint checks and sizes (`checkpoint`), the pixel budget (`budget`), image prompts and
cache keys (`prompt`), parked conversations (`sessions`), and the demo checkpoint builder
(`demo`). May import mlx, mlx-vlm, Pillow, the runtime in `engines/`, `engines.mlx`,
`engines.text`, `engines.sources` and `schemas`; nothing HTTP."""
