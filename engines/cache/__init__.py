"""The disk tier under prefix reuse: KV cache blocks in files, shared by every model.

`blockfile` writes and checks one block; `store` keeps a directory of them under its byte
limit and writes off the model's thread. What a block holds (MLX arrays) is the engine's
business (engines/mlx/cache/disk.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CacheDir:
    """Where blocks live and how many bytes they may take (`server.cache`)."""

    path: Path
    max_bytes: int
