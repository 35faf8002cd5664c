"""`server.api_keys` entries with labels, priorities and limits: parsed, or refused with
the YAML line and column of what is wrong."""

from __future__ import annotations

import pytest

from engines.errors import ConfigInvalid
from gateway.control.config import parse_config
from gateway.control.keys import key_entries
from schemas.config import KeyBudget, KeyLimits, KeyPriority

MODELS = "models: [{id: e, engine: scripted}]\n"


def parse(server: str):
    return parse_config(f"server:\n  api_keys:\n{server}{MODELS}", "t.yaml", environ={})


def errors(server: str) -> list[str]:
    with pytest.raises(ConfigInvalid) as refused:
        parse(server)
    return refused.value.errors


def test_entries_parse_with_labels_priorities_and_limits():
    config = parse(
        "    - sk-plain-123456\n"
        "    - key: sk-team-123456\n"
        "      label: team\n"
        "      priority: {default: 2, max: 9}\n"
        "      limits: {rpm: 10, tpm: 500, concurrent: 2, budget: {tokens: 9000, period: 24h}}\n"
        "    - {key: sk-ops-123456, models: []}\n"
    )
    plain, team, ops = key_entries(config.server)
    assert (plain.label, plain.models, plain.priority) == ("api_keys[0]", None, KeyPriority())
    assert (team.label, team.models, team.priority) == ("team", None, KeyPriority(default=2, max=9))
    assert team.limits == KeyLimits(
        rpm=10, tpm=500, concurrent=2, budget=KeyBudget(tokens=9000, period="24h")
    )
    assert (ops.label, ops.models) == ("api_keys[2]", ())  # a key for the ops views only


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "    - {key: k1, limits: {rpn: 3}}\n",
            "t.yaml:3:26: server.api_keys[0].limits.rpn: unknown key 'rpn' (did you mean 'rpm'?)",
        ),
        (
            "    - {key: k1, limits: {rpm: 0}}\n",
            "t.yaml:3:31: server.api_keys[0].limits.rpm: Expected `int` >= 1",
        ),
        (
            "    - {key: k1, priority: {max: 101}}\n",
            "t.yaml:3:33: server.api_keys[0].priority.max: Expected `int` <= 100",
        ),
        (
            "    - {key: k1, limits: {budget: {tokens: 5, period: daily}}}\n",
            "t.yaml:3:54: server.api_keys[0].limits.budget.period: expected a duration",
        ),
        (
            "    - {key: k1, label: 'a b'}\n",
            "t.yaml:3:24: server.api_keys[0].label: expected a key's name in events and metrics",
        ),
        (
            "    - {key: k1, priority: {default: 5, max: 2}}\n",
            "t.yaml:3:37: server.api_keys[0].priority.default: priority.default 5 is above "
            "priority.max 2",
        ),
        (
            "    - {key: k1, label: team}\n    - {key: k2, label: team}\n",
            "t.yaml:4:24: server.api_keys[1].label: duplicate key label 'team' (also api_keys[0])",
        ),
    ],
)
def test_a_wrong_entry_is_refused_with_its_line_and_column(entry: str, expected: str):
    found = errors(entry)
    assert len(found) == 1 and found[0].startswith(expected), found
