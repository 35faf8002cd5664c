"""The vision keys of models.yaml: `vision.{max_pixels, min_pixels}` and
`server.fetch_images`, validated like every other key; `vision` is an engine setting."""

from __future__ import annotations

import textwrap

import pytest

from engines.errors import ConfigInvalid
from gateway.control.config import parse_config, summarize
from schemas.config_keys import MODEL_KEYS


def parse(text: str):
    return parse_config(textwrap.dedent(text), "t.yaml", environ={})


def test_vision_keys_parse_with_their_defaults():
    config = parse(
        """
        server: {fetch_images: true}
        models:
          - {id: a, engine: scripted, vision: {max_pixels: 1000000, min_pixels: 3136}}
          - {id: b, engine: scripted}
        """
    )
    assert config.server.fetch_images is True
    assert (config.models[0].vision.max_pixels, config.models[0].vision.min_pixels) == (
        1000000,
        3136,
    )
    assert config.models[1].vision.max_pixels is None  # from the checkpoint at load
    lines = summarize(config)
    assert "vision_pixels=3136..1000000" in lines[0] and "vision" not in lines[1]
    assert parse("models: [{id: c, engine: scripted}]").server.fetch_images is False


@pytest.mark.parametrize(
    "vision, fragment",
    [
        ("{max_pixels: 100, min_pixels: 200}", "min_pixels 200 is more than max_pixels 100"),
        ("{max_pixels: 0}", "models[0].vision.max_pixels"),
        ("{max_pixel: 10}", "unknown key 'max_pixel' (did you mean 'max_pixels'?)"),
    ],
)
def test_bad_vision_keys_are_named(vision, fragment):
    with pytest.raises(ConfigInvalid) as info:
        parse(f"models: [{{id: a, engine: scripted, vision: {vision}}}]")
    assert any(fragment in error for error in info.value.errors), info.value.errors


def test_changing_the_pixel_budget_reloads_the_model():
    assert MODEL_KEYS["vision"].restart


@pytest.mark.parametrize(
    "allow, fragment",
    [
        ("[127.0.0.1/32, '::1']", None),
        ("[999.0.0.1/8]", "'999.0.0.1/8' is not an IP network"),
        ("[localhost]", "server.fetch_images_allow[0]"),
    ],
)
def test_fetch_images_allow_takes_ip_networks(allow, fragment):
    text = f"{{server: {{fetch_images: true, fetch_images_allow: {allow}}}, models: [{{id: a, engine: scripted}}]}}"
    if fragment is None:
        assert parse(text).server.fetch_images_allow == ["127.0.0.1/32", "::1"]
        return
    with pytest.raises(ConfigInvalid) as info:
        parse(text)
    assert any(fragment in error for error in info.value.errors), info.value.errors
