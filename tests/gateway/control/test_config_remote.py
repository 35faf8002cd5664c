"""Config of remote engines (upstream, process): their sections, what they refuse, and the
concurrency their replicas' capacity gives them."""

from __future__ import annotations

import textwrap

import pytest

from engines.errors import ConfigInvalid
from gateway.control.config import parse_config


def parse(text: str):
    return parse_config(textwrap.dedent(text), "t.yaml", environ={})


def errors_of(text: str) -> list[str]:
    with pytest.raises(ConfigInvalid) as info:
        parse(text)
    return info.value.errors


def test_upstream_concurrency_is_its_capacity_unless_set():
    config = parse(
        """
        defaults: {concurrency: 2, prefix_reuse: true, context: {max: 4096}, kv_bits: 8}
        models:
          - id: far
            engine: upstream
            upstream: {urls: ["http://a:8000/v1", "http://b:8000"], max_in_flight: 3}
          - id: one
            engine: upstream
            concurrency: 5
            upstream: {urls: ["http://a:8000/v1"]}
          - id: child
            engine: process
            process: {command: [server, --port, "${PORT}"], max_in_flight: 2, memory: 1GiB}
        """
    )
    far, one, child = config.models
    assert far.concurrency == 6 and one.concurrency == 5 and child.concurrency == 2
    # defaults meant for local models do not reach remote ones
    assert far.kv_bits is None and far.context.max == "auto"
    assert far.upstream.timeout == "60s" and far.upstream.api_key is None
    assert child.process.health == "/health" and child.process.memory == "1GiB"


def test_an_engine_needs_its_section_and_only_its_own():
    errors = errors_of(
        """
        models:
          - {id: a, engine: upstream}
          - {id: b, engine: scripted, upstream: {urls: ["http://x:1/v1"]}}
          - {id: c, engine: process, upstream: {urls: ["http://x:1/v1"]}}
        """
    )
    text = "\n".join(errors)
    assert "model 'a': engine 'upstream' needs a 'upstream' section" in text
    assert "'upstream' applies to engine 'upstream' only" in text
    assert "model 'c': engine 'process' needs a 'process' section" in text


def test_a_remote_model_refuses_local_only_settings():
    errors = errors_of(
        """
        models:
          - id: far
            engine: upstream
            kv_bits: 8
            context: {max: 4096, overflow: truncate}
            upstream: {urls: ["http://a:8000/v1"]}
        """
    )
    assert len(errors) == 2
    assert all("does not apply to engine 'upstream'" in e for e in errors)
    assert any("far.kv_bits" in e or "kv_bits" in e for e in errors)


def test_bad_upstream_values_are_named():
    errors = errors_of(
        """
        models:
          - id: far
            engine: upstream
            upstream: {urls: ["ftp://a"], max_in_flight: 0, timeout: soon, urll: []}
        """
    )
    text = "\n".join(errors)
    for key in ("urls[0]", "max_in_flight", "timeout", "urll"):
        assert key in text, key


def test_port_is_left_for_the_process_engine_and_other_variables_are_read():
    config = parse_config(
        textwrap.dedent(
            """
            models:
              - id: child
                engine: process
                process:
                  command: [server, --port, "${PORT}", --key, "${KEY}"]
                  env: {LISTEN: "127.0.0.1:${PORT}"}
            """
        ),
        "t.yaml",
        environ={"KEY": "k1", "PORT": "9"},
    )
    process = config.models[0].process
    assert process.command == ["server", "--port", "${PORT}", "--key", "k1"]
    assert process.env == {"LISTEN": "127.0.0.1:${PORT}"}


def test_a_process_command_must_name_its_port():
    errors = errors_of(
        """
        models:
          - {id: child, engine: process, process: {command: [server, --port, "8080"]}}
        """
    )
    assert len(errors) == 1 and "must say ${PORT}" in errors[0]
    assert "models[0].process.command" in errors[0]
    via_env = parse(
        """
        models:
          - {id: child, engine: process, process: {command: [server], env: {PORT: "${PORT}"}}}
        """
    )
    assert via_env.models[0].process.env == {"PORT": "${PORT}"}
