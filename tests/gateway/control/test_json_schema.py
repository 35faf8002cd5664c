"""The JSON Schema of models.yaml: generated from the config structs, committed, never stale."""

import json
from pathlib import Path

from gateway.control.json_schema import SCHEMA_PATH, config_json_schema, write_schema


def test_committed_schema_matches_the_structs():
    committed = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert committed == config_json_schema(), (
        "schemas/models.schema.json is stale: run `gateway schema --write`"
    )


def test_write_schema(tmp_path: Path):
    path = write_schema(tmp_path / "s.json")
    text = path.read_text(encoding="utf-8")
    assert text == SCHEMA_PATH.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert json.loads(text)["$schema"].startswith("https://json-schema.org/")
