"""`mcp_servers:` in models.yaml: what parses, and what is refused with its file:line:col."""

from __future__ import annotations

import textwrap

import pytest

from engines.errors import ConfigInvalid
from gateway.control.config import parse_config, summarize

MODELS = """
models:
  - {id: m, engine: scripted, script: {reply: hi}}
"""


def parse(text: str):
    return parse_config(textwrap.dedent(text) + MODELS, "t.yaml", environ={})


def errors_of(text: str) -> list[str]:
    with pytest.raises(ConfigInvalid) as info:
        parse(text)
    return info.value.errors


def test_stdio_and_http_servers_parse_with_their_defaults():
    config = parse(
        """
        mcp_servers:
          - {name: files, command: python, args: [server.py], env: {ROOT: /srv}}
          - name: search
            url: http://127.0.0.1:9000/mcp
            headers: {Authorization: Bearer x}
            allowed_tools: [find]
            timeout: 5s
        """
    )
    files, search = config.mcp_servers
    assert (files.command, files.args, files.env, files.url) == (
        "python",
        ["server.py"],
        {"ROOT": "/srv"},
        None,
    )
    assert (files.timeout, files.max_result_bytes, files.allowed_tools) == ("30s", "1MiB", None)
    assert (search.url, search.transport, search.allowed_tools, search.timeout) == (
        "http://127.0.0.1:9000/mcp",
        "streamable_http",
        ["find"],
        "5s",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "mcp_servers:\n  - {name: a}\n",
            "t.yaml:2:5: MCP server 'a': give exactly one of `command` (stdio) or `url` (HTTP)",
        ),
        (
            "mcp_servers:\n  - {name: a, command: x, url: 'http://h/mcp'}\n",
            "t.yaml:2:5: MCP server 'a': give exactly one",
        ),
        (
            "mcp_servers:\n  - {name: a, command: x, headers: {k: v}}\n",
            "t.yaml:2:27: `headers` does not apply to a `command` server",
        ),
        (
            "mcp_servers:\n  - {name: a, url: 'http://h/mcp', args: [x]}\n",
            "t.yaml:2:36: `args` does not apply to a `url` server",
        ),
        (
            "mcp_servers:\n  - {name: a, command: x}\n  - {name: a, command: y}\n",
            "t.yaml:3:12: duplicate MCP server name 'a'",
        ),
        ("mcp_servers:\n  - {name: 'a b', command: x}\n", "t.yaml:2:12: letters, digits"),
        ("mcp_servers:\n  - {name: a, url: 'ftp://h'}\n", "t.yaml:2:20:"),
        (
            "mcp_servers:\n  - {name: a, command: x, tiemout: 3s}\n",
            "t.yaml:2:27: did you mean 'timeout'",
        ),
        (
            "server:\n  api_keys:\n    - {key: k, mcp_servers: [nope]}\nmcp_servers:\n  - {name: a, command: x}\n",
            "t.yaml:3:30: 'nope' names no MCP server (declared: a)",
        ),
    ],
)
def test_a_wrong_entry_is_refused_with_its_line_and_column(text: str, expected: str):
    found = errors_of(text)
    where = ":".join(expected.split(":")[:3]) + ":"
    message = expected[len(where) :].strip()
    assert any(e.startswith(where) and message in e for e in found), found


def test_tools_from_must_name_declared_servers():
    text = (
        "mcp_servers:\n  - {name: a, command: x}\n"
        "models:\n  - {id: m, engine: scripted, tools_from: [a, nope], run_tools: true}\n"
    )
    with pytest.raises(ConfigInvalid) as info:
        parse_config(text, "t.yaml", environ={})
    assert any(
        e.startswith("t.yaml:4:47:") and "'nope' names no MCP server (declared: a)" in e
        for e in info.value.errors
    ), info.value.errors
    fine = text.replace(", nope", "")
    config = parse_config(fine, "t.yaml", environ={})
    (model,) = config.models
    assert (model.tools_from, model.run_tools) == (["a"], True)
    # `gateway check` says where a model's tools come from, and who makes the calls.
    assert summarize(config)[0].endswith("tools_from=a (run)")


def test_a_keys_run_tools_parses():
    config = parse("server:\n  api_keys:\n    - {key: k, run_tools: false}\n")
    assert config.server.api_keys[0].run_tools is False
