"""The image marker token is checked against the tokenizer at load: a checkpoint whose config
and tokenizer disagree fails its load with the numbers, not at its first image."""

from __future__ import annotations

import json

import pytest

from engines.errors import SourceError
from engines.platform import PlatformPath
from engines.vision.demo import build_demo_vlm
from engines.vision.engine import VisionEngine
from schemas.config import ModelConfig

STORED = PlatformPath(device="cpu", blas="reference", weights="stored", why="test")


def test_a_marker_the_tokenizer_does_not_agree_with_fails_the_load(tmp_path):
    demo = build_demo_vlm()
    for item in demo.iterdir():
        (tmp_path / item.name).symlink_to(item)
    config = json.loads((demo / "config.json").read_text())
    right = config["image_token_id"]
    config["image_token_id"] = 5  # an ordinary text token
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").write_text(json.dumps(config))
    engine = VisionEngine(ModelConfig(id="skewed", source=str(tmp_path)), STORED, None)
    with pytest.raises(SourceError) as failed:
        engine.load(None)
    assert f"image marker '<image>' is token {right} in the tokenizer" in failed.value.message
    assert "image_token_index is 5" in failed.value.message
