"""The one table of model keys (`MODEL_KEYS`): each key's engines, what `defaults:` give
each engine, and which changes need a new runner, as the loader and reload apply them."""

from __future__ import annotations

import msgspec
import pytest
import yaml
from conftest import REPO

from engines.errors import ConfigInvalid
from gateway.control.config import parse_config
from gateway.control.reload import needs_new_engine
from schemas.config import ModelConfig
from schemas.config_keys import ENGINES, MODEL_KEYS

# A valid value of each key, unlike its default.
VALUES = {
    "engine": "scripted",
    "source": "./m",
    "aliases": ["a1"],
    "residency": {"on_demand": True},
    "context": {"max": 1024},
    "concurrency": 2,
    "prefix_reuse": False,
    "session_slots": 2,
    "kv_bits": 8,
    "disk_cache": False,
    "weights": "stored",
    "isolation": "process",
    "draft": {"model": "other"},
    "speculation": {"kind": "prompt_lookup", "tokens": 4},
    "system": "be brief",
    "guardrails": {"max_n": 2},
    "sampling": {"temperature": 0.5},
    "reasoning": "low",
    "tool_parser": "json",
    "rate": {"max_tokens_per_sec": 5.0},
    "stream_interval": "20ms",
    "task": "embed",
    "queue": {"max_depth": 3},
    "capture": True,
    "tools_from": ["tools"],
    "run_tools": True,
    "script": {"reply": "x"},
    "hf_token": "t",
    "vision": {"max_pixels": 100},
    "upstream": {"urls": ["http://a:1/v1"], "max_in_flight": 3},
    "process": {"command": ["serve", "${PORT}"]},
    "distributed": {"ranks": 2},
    "experts": {"resident": 4},
    "adapters": [{"id": "a1", "path": str(REPO / "configs/examples/adapters/concise")}],
    "steering": {"vector": str(REPO / "configs/examples/steering/seeded.safetensors")},
}


def model_of(engine: str) -> dict:
    """A model of `engine` with what that engine needs."""
    model = {"id": "m", "engine": engine}
    if engine == "mlx":
        model["source"] = "./m"
    elif engine in ("upstream", "process"):
        model[engine] = VALUES[engine]
    return model


def parse(doc: dict):
    # What `draft` names; remote, so `defaults:` never give it a draft of its own.
    other = {**model_of("upstream"), "id": "other"}
    # What `tools_from` names.
    servers = [{"name": "tools", "command": "serve-tools"}]
    models = [*doc["models"], other]
    text = yaml.safe_dump({**doc, "models": models, "mcp_servers": servers}, sort_keys=False)
    return parse_config(text, "t.yaml", environ={})


def test_every_key_has_a_sample_value():
    assert set(VALUES) == set(MODEL_KEYS)


REFUSED = [(k, e) for k, rule in MODEL_KEYS.items() for e in sorted(ENGINES - rule.engines)]
GIVEN = [(k, e) for k, rule in MODEL_KEYS.items() for e in sorted(rule.engines)]
NOT_FROM_DEFAULTS = [
    (k, e) for k, rule in MODEL_KEYS.items() for e in sorted(ENGINES - rule.from_defaults)
]


@pytest.mark.parametrize("key, engine", REFUSED)
def test_a_key_another_engine_takes_is_refused_by_name(key, engine):
    with pytest.raises(ConfigInvalid) as info:
        parse({"models": [{**model_of(engine), key: VALUES[key]}]})
    [error] = info.value.errors
    assert f"models[0].{key}: model 'm': {key!r} " in error
    assert f"does not apply to engine {engine!r}" in error or "only" in error


def value_of(key: str):
    """`VALUES[key]` as the model's struct holds it."""
    return getattr(msgspec.convert({"id": "m", key: VALUES[key]}, ModelConfig), key)


@pytest.mark.parametrize("key, engine", [(k, e) for k, e in GIVEN if k != "engine"])
def test_a_key_its_engines_take_is_kept(key, engine):
    model = parse({"models": [{**model_of(engine), key: VALUES[key]}]}).models[0]
    assert getattr(model, key) == value_of(key)


@pytest.mark.parametrize("key, engine", NOT_FROM_DEFAULTS)
def test_defaults_skip_a_key_for_an_engine_they_do_not_give_it_to(key, engine):
    model = parse({"defaults": {key: VALUES[key]}, "models": [model_of(engine)]}).models[0]
    assert getattr(model, key) != value_of(key)


@pytest.mark.parametrize("key", list(MODEL_KEYS))
def test_a_change_needs_a_new_runner_exactly_for_restart_keys(key):
    before = ModelConfig(id="m")
    after = msgspec.structs.replace(before, **{key: value_of(key)})
    # Adapters change on the loaded base (not `restart`), but a base gaining its first one
    # is built anew: its layers are wrapped at load (gateway/control/reload.py).
    assert needs_new_engine(before, after) is (MODEL_KEYS[key].restart or key == "adapters")
