"""`server.api_keys` entries with labels, priorities and limits: parsed, or refused with
the YAML line and column of what is wrong."""

from __future__ import annotations

import pytest

from engines.errors import ConfigInvalid
from gateway.control.config import parse_config
from gateway.control.key_names import KeyNames
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
    names = KeyNames(b"a secret of this state_dir, 32 b")
    plain, team, ops = key_entries(config.server, names)
    # A key without `label` goes by a keyed hash of itself, never the key, never its place.
    assert plain.label == names.label("sk-plain-123456") and plain.label.startswith("key:")
    assert (plain.models, plain.priority) == (None, KeyPriority())
    assert (team.label, team.models, team.priority) == ("team", None, KeyPriority(default=2, max=9))
    assert team.limits == KeyLimits(
        rpm=10, tpm=500, concurrent=2, budget=KeyBudget(tokens=9000, period="24h")
    )
    assert (ops.label, ops.models) == (names.label("sk-ops-123456"), ())  # the ops views only


def test_a_key_without_label_is_named_by_a_keyed_hash_that_follows_the_key():
    names = KeyNames(b"one state_dir's secret, 32 bytes")
    label = names.label("sk-plain-123456")
    assert label == names.label("sk-plain-123456") != names.label("sk-plain-123457")
    assert len(label) == len("key:") + 16 and "123456" not in label
    # Another state_dir's secret names the same key otherwise: a label says nothing of the
    # key to whoever reads the logs without the secret.
    assert KeyNames(b"another state_dir's secret, 32 b").label("sk-plain-123456") != label
    first = parse("    - sk-a-0123456789\n    - sk-b-0123456789\n")
    second = parse("    - sk-b-0123456789\n")
    assert key_entries(first.server, names)[1].label == key_entries(second.server, names)[0].label


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
        (
            "    - {key: k1, label: admin}\n",
            "t.yaml:3:24: server.api_keys[0].label: the label 'admin' is reserved for the admin "
            "key",
        ),
        (
            "    - {key: k1, label: Admin}\n",
            "t.yaml:3:24: server.api_keys[0].label: the label 'Admin' is reserved for the admin "
            "key",
        ),
    ],
)
def test_a_wrong_entry_is_refused_with_its_line_and_column(entry: str, expected: str):
    found = errors(entry)
    assert len(found) == 1 and found[0].startswith(expected), found
