"""What can be told about an MLX model without loading it (for the model listings)."""

from __future__ import annotations

import json
from pathlib import Path

from engines.errors import GatewayError
from engines.sources.resolve import check_source
from schemas.config import ModelConfig


def source_chat_template(model: ModelConfig, base_dir: Path | None) -> str | None:
    """A model directory's chat template, read without loading; None for other sources."""
    try:
        path = check_source(model.id, model.source, base_dir=base_dir)
        if not path.is_dir():
            return None
        jinja = path / "chat_template.jinja"
        if jinja.is_file():
            return jinja.read_text(encoding="utf-8")
        config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (GatewayError, OSError, ValueError):
        return None
    template = config.get("chat_template") if isinstance(config, dict) else None
    return template if isinstance(template, str) else None
