"""`experts:` in models.yaml: checked with the file, line and column of the offending key."""

from __future__ import annotations

import textwrap

import pytest

from engines.errors import ConfigInvalid
from gateway.control.config import parse_config


def errors_of(body: str) -> list[str]:
    text = f"models:\n  - id: m\n    source: ./m\n    {body}\n"
    with pytest.raises(ConfigInvalid) as info:
        parse_config(text, "t.yaml", environ={})
    return info.value.errors


def test_experts_parse_with_their_defaults():
    config = parse_config(
        textwrap.dedent("""
        models:
          - id: a
            source: ./a
            experts: {resident: 8, policy: lfu}
          - id: b
            source: ./b
            experts: {}
          - id: c
            source: ./c
        """),
        "t.yaml",
        environ={},
    )
    a, b, c = config.models
    assert (a.experts.resident, a.experts.policy) == (8, "lfu")
    assert (b.experts.resident, b.experts.policy) == ("auto", "lru")
    assert c.experts is None  # loaded whole, as before


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("experts: {resident: 0}", "t.yaml:4:25: models[0].experts.resident: Expected `int` >= 1"),
        (
            "experts: {policy: mru}",
            "t.yaml:4:23: models[0].experts.policy: Invalid enum value 'mru'",
        ),
        (
            "experts: {resident: 4, polcy: lru}",
            "t.yaml:4:28: models[0].experts.polcy: unknown key 'polcy' (did you mean 'policy'?)",
        ),
        (
            "experts: {resident: 2}\n    distributed: {ranks: 2}",
            "t.yaml:4:14: models[0].experts: model 'm': `experts` does not apply to a "
            "distributed model",
        ),
        (
            "experts: {resident: 2}\n    task: embed",
            "t.yaml:4:14: models[0].experts: model 'm': `experts` applies to MLX text models",
        ),
    ],
)
def test_a_bad_experts_key_is_named_with_its_place(body: str, expected: str):
    errors = errors_of(body)
    assert len(errors) == 1, errors
    assert errors[0].startswith(expected), errors[0]


def test_experts_on_another_engine_is_refused_by_name():
    with pytest.raises(ConfigInvalid) as info:
        parse_config(
            "models:\n  - id: s\n    engine: scripted\n    experts: {resident: 2}\n",
            "t.yaml",
            environ={},
        )
    assert info.value.errors == [
        "t.yaml:4:5: models[0].experts: model 's': 'experts' applies to engine 'mlx' only"
    ]
