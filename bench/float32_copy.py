"""Write a float32 copy of a model, as the gateway runs it on the CPU, for mlx-lm's server.

    python bench/float32_copy.py SOURCE OUT_DIR

SOURCE is a config `source:` string (resolved with the gateway's `resolve_source`); the
weights are expanded with the gateway's `expand_quantized` and written with mlx-lm's own
`save_model`; config.json loses its quantization block; tokenizer files are copied as they
are. Without this, `mlx_lm server` loads the 4-bit weights as stored, which MLX's CPU
kernels run slower: the comparison would measure the weight format, not the server.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def write_float32_copy(source: str, out: Path) -> Path:
    """The directory of the float32 copy of `source` (written once, then reused)."""
    import mlx.core as mx
    import mlx_lm
    from mlx_lm.utils import save_model

    from engines.mlx.weights import expand_quantized
    from engines.sources.resolve import resolve_source

    if (out / "config.json").exists():
        return out
    path = resolve_source("bench", source)
    model, _ = mlx_lm.load(str(path))
    expand_quantized(model)
    mx.eval(model.parameters())
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    save_model(partial, model)
    config = json.loads((path / "config.json").read_text())
    config.pop("quantization", None)
    config.pop("quantization_config", None)
    (partial / "config.json").write_text(json.dumps(config, indent=2))
    for file in path.iterdir():
        if file.name.startswith("tokenizer") or file.name.endswith((".jinja", ".txt")):
            shutil.copy(file, partial / file.name)
    partial.rename(out)  # only a complete copy ever carries the final name
    return out


if __name__ == "__main__":
    print(write_float32_copy(sys.argv[1], Path(sys.argv[2])))
