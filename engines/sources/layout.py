"""What a model directory in MLX/Hugging Face layout must hold, checked before a load: the
leaf that the source resolver and the hub's download check both read."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from engines.errors import SourceError

# What mlx_lm.load needs to build a tokenizer: any one of these.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the format's own limit


def check_model_dir(model_id: str, path: Path) -> None:
    """Check a directory holds config.json, model*.safetensors and tokenizer files."""
    try:
        names = {p.name for p in path.iterdir()}
    except OSError as e:
        raise SourceError(model_id, str(path), f"unreadable: {e.strerror or e}") from None
    weights = sorted(n for n in names if n.startswith("model") and n.endswith(".safetensors"))
    missing = []
    if "config.json" not in names:
        missing.append("config.json")
    if not weights:  # mlx_lm.load only globs model*.safetensors
        missing.append("model*.safetensors weights")
    if not names.intersection(TOKENIZER_FILES):
        missing.append("tokenizer files (tokenizer.json or tokenizer.model)")
    if missing:
        ggufs = sorted(n for n in names if n.lower().endswith(".gguf"))
        hint = f"; it holds {ggufs[0]}: point the source at that file" if ggufs else ""
        raise SourceError(model_id, str(path), f"missing {', '.join(missing)}{hint}")
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except OSError as e:
        raise SourceError(model_id, str(path), f"config.json unreadable: {e.strerror}") from None
    except ValueError as e:
        raise SourceError(model_id, str(path), f"config.json is not valid JSON: {e}") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise SourceError(model_id, str(path), "config.json has no model_type")
    for name in weights:
        _check_safetensors(model_id, path / name)


def _check_safetensors(model_id: str, file: Path) -> None:
    """Catch a truncated or corrupt weights file here, with its name, not deep in a load."""
    try:
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if not 0 < n <= min(size - 8, _MAX_SAFETENSORS_HEADER):
                raise SourceError(model_id, str(file), "truncated or corrupt safetensors header")
            header = json.loads(f.read(n))
    except OSError as e:
        raise SourceError(model_id, str(file), f"unreadable: {e.strerror or e}") from None
    except ValueError:
        raise SourceError(model_id, str(file), "corrupt safetensors header (not JSON)") from None
    ends = [
        t["data_offsets"][1]
        for k, t in header.items()
        if k != "__metadata__" and isinstance(t, dict) and len(t.get("data_offsets", ())) == 2
    ]
    need = 8 + n + max(ends, default=0)
    if need > size:
        raise SourceError(model_id, str(file), f"truncated: {size} bytes, tensors need {need}")
