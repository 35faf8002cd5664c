"""`distributed:` in models.yaml: its keys, and the splits refused with their numbers."""

from __future__ import annotations

import json
import textwrap

import pytest

from engines.errors import ConfigInvalid, SourceError
from engines.llm.distributed.shard import check_split
from gateway.control.config import parse_config, summarize

MODEL = """
models:
  - id: big
    source: /models/big
{extra}"""


def errors_of(extra: str) -> list[str]:
    text = textwrap.dedent(MODEL).format(extra=textwrap.indent(textwrap.dedent(extra), "    "))
    with pytest.raises(ConfigInvalid) as info:
        parse_config(text, "t.yaml", environ={})
    return info.value.errors


def test_a_distributed_block_parses_with_its_defaults():
    text = textwrap.dedent(MODEL).format(extra="    distributed: {ranks: 2}\n")
    config = parse_config(text, "t.yaml", environ={})
    block = config.models[0].distributed
    assert (block.ranks, block.hosts, block.backend, block.mode) == (2, [], "ring", "pipeline")
    assert (block.port, block.timeout) == (None, "60s")
    assert "distributed=2 ranks, pipeline, ring" in summarize(config)[0]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "distributed: {ranks: 2, hosts: [127.0.0.1]}",
            "t.yaml:5:36: models[0].distributed.hosts: model 'big': 1 hosts for 2 ranks",
        ),
        (
            "distributed: {ranks: 0}",
            "t.yaml:5:26: models[0].distributed.ranks: Expected `int` >= 1",
        ),
        ("distributed: {ranks: 2, backend: mpi}", "backend"),
        ("distributed: {ranks: 2, mode: expert}", "mode"),
        ("distributed: {ranks: 2, rank: 1}", "rank"),
        (
            "distributed: {ranks: 2}\ndraft: {model: big}",
            "model 'big': a draft model does not apply to a distributed model",
        ),
        (
            "distributed: {ranks: 2}\nisolation: process",
            "model 'big': `isolation` does not apply to a distributed model",
        ),
        ("distributed: {ranks: 2}\ntask: embed", "a distributed model serves chat only"),
        (
            "distributed: {ranks: 2}\nspeculation: {kind: prompt_lookup}",
            "model 'big': `speculation` (not verified across ranks) does not apply",
        ),
    ],
)
def test_impossible_blocks_are_refused_with_where_and_why(extra: str, expected: str):
    errors = errors_of(extra)
    assert any(expected in e for e in errors), errors


def test_distributed_applies_to_mlx_only():
    errors = errors_of("engine: scripted\ndistributed: {ranks: 2}")
    assert any("'distributed' applies to engine 'mlx' only" in e for e in errors), errors


def checkpoint(tmp_path, **shape):
    (tmp_path / "config.json").write_text(json.dumps(shape))
    return tmp_path


SMOLLM2 = dict(
    num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536
)


def test_smollm2_splits_in_pipeline_mode_but_not_in_tensor_mode_over_two_ranks(tmp_path):
    path = checkpoint(tmp_path, **SMOLLM2)
    check_split("smol", path, 2, "pipeline")
    check_split("smol", path, 3, "tensor")  # 9 query heads, 3 kv heads, 1536 rows
    with pytest.raises(SourceError) as refused:
        check_split("smol", path, 2, "tensor")
    message = str(refused.value)
    assert "9 query heads do not divide by 2 ranks" in message
    assert "use mode: pipeline, or 3 ranks" in message
    with pytest.raises(SourceError, match="30 layers cannot be pipelined over 31 ranks"):
        check_split("smol", path, 31, "pipeline")


def test_tensor_mode_keeps_whole_quantization_groups_per_rank(tmp_path):
    tiny = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        quantization={"group_size": 64, "bits": 4},
    )
    with pytest.raises(SourceError) as refused:
        check_split("tiny", checkpoint(tmp_path, **tiny), 2, "tensor")
    assert "each of 2 ranks 32 of the attention output's 64 columns" in str(refused.value)
    check_split("tiny", checkpoint(tmp_path, **tiny), 2, "pipeline")
