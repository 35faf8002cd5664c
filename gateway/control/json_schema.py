"""The JSON Schema of `models.yaml`, generated from the same structs that validate it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

import schemas
from schemas.config import GatewayConfig

SCHEMA_PATH = Path(schemas.__file__).parent / "models.schema.json"


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of a `models.yaml` file."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "mlx gateway models.yaml",
        **msgspec.json.schema(GatewayConfig),
    }


def render_schema() -> str:
    """The schema as committed: pretty-printed, sorted keys, trailing newline."""
    return json.dumps(config_json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schema(path: str | Path = SCHEMA_PATH) -> Path:
    """Write the schema to `path` (by default `schemas/models.schema.json`); return the path."""
    path = Path(path)
    path.write_text(render_schema(), encoding="utf-8")
    return path
