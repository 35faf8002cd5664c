"""Claude Code (`claude -p`, print mode) against the gateway: a scripted model that answers
text, one that calls Claude Code's Bash tool in a throwaway directory (the tool_result round
trip), and the real SmolLM2 through its `claude-smollm2` name. Offline: no telemetry, no
update checks, a fresh HOME."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess

import pytest
from client_env import CLAUDE, OFFLINE, require_js
from conftest import REPO, serving

README_URL = "http://127.0.0.1:8000"  # the address the README's lines name

# Claude Code's system prompt and tool definitions are ~50k bytes: the scripted engine
# counts bytes, so its window is widened.
CONFIG = """
models:
  - id: text
    engine: scripted
    context: {max: 400000}
    script: {reply: "Hello from the scripted model."}
  - id: bash
    engine: scripted
    context: {max: 400000}
    script:
      replies:
        - '<tool_call>{"name": "Bash", "arguments": {"command": "echo made-by-claude > made.txt", "description": "Write a file"}}</tool_call>'
        - "The file is written."
  - id: side
    engine: scripted
    context: {max: 400000}
    script: {reply: "side"}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("claude-code"), CONFIG) as process:
        yield process


def claude(gateway, workdir, *args: str, side: str = "claude-side") -> subprocess.CompletedProcess:
    """`claude -p ...` in `workdir` with a fresh HOME, talking only to `gateway`."""
    require_js()
    home = workdir.parent / f"{workdir.name}-home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": gateway.url,
        "ANTHROPIC_API_KEY": "unused",
        # Claude Code's side requests (titles, summaries) go to a model of their own, so the
        # scripted replies of the model under test are not consumed by them.
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": side,
        "ANTHROPIC_SMALL_FAST_MODEL": side,
        **OFFLINE,
    }
    return subprocess.run(
        [str(CLAUDE), "-p", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_claude_code_prints_the_models_answer(gateway, tmp_path):
    run = claude(gateway, tmp_path, "Say hello", "--model", "claude-text")
    assert run.returncode == 0, run.stderr + run.stdout
    assert run.stdout.strip() == "Hello from the scripted model."
    routed = gateway.wait_event("request_routed", requested="claude-text")
    assert (routed["served"], routed["protocol"]) == ("text", "anthropic")


def test_claude_code_runs_its_bash_tool_and_sends_the_result_back(gateway, tmp_path):
    run = claude(
        gateway, tmp_path, "Write made.txt", "--model", "claude-bash", "--allowedTools", "Bash"
    )
    assert run.returncode == 0, run.stderr + run.stdout
    assert (tmp_path / "made.txt").read_text() == "made-by-claude\n"
    assert run.stdout.strip() == "The file is written."
    # Two generations: the call, then the answer to the tool_result.
    assert len(gateway.events("generated", model="bash")) == 2


@pytest.mark.e2e
def test_claude_code_answers_through_claude_smollm2(shipped_gateway, tmp_path):
    # SmolLM2's window (8192) cannot hold Claude Code's own system prompt and tools (~12k
    # tokens, a 400 that says so): the user's own short system prompt and no tools — the
    # README's quick-start line, run as written (its variables are what claude() sets).
    text = (REPO / "README.md").read_text()
    start = text.index("Claude Code on the embedded default")
    block = re.compile(r"```sh\n(.*?)```", re.S).search(text, start).group(1)
    words = shlex.split(block.replace("\\\n", " "))
    assert words[:2] == [f"ANTHROPIC_BASE_URL={README_URL}", "ANTHROPIC_API_KEY=unused"]
    assert words[2:4] == ["claude", "-p"], words
    run = claude(shipped_gateway, tmp_path, *words[4:], side="claude-smollm2")
    assert run.returncode == 0, run.stderr + run.stdout
    assert run.stdout.strip() == "The capital of France is Paris."


@pytest.mark.e2e
def test_claude_codes_second_turn_shows_the_first_read_from_the_cache(shipped_gateway, tmp_path):
    # The README's flags, twice in one conversation (`--continue`), the usage as JSON.
    flags = ["--model", "claude-smollm2", "--tools", "", "--output-format", "json"]
    flags += ["--system-prompt", "You are a helpful assistant."]
    first = claude(shipped_gateway, tmp_path, "What is the capital of France?", *flags)
    assert first.returncode == 0, first.stderr + first.stdout
    before = len(shipped_gateway.events("generated", model="smollm2"))
    second = claude(shipped_gateway, tmp_path, "--continue", "And of Italy?", *flags)
    assert second.returncode == 0, second.stderr + second.stdout
    usage = json.loads(second.stdout)["usage"]
    generated = shipped_gateway.events("generated", model="smollm2")[before:]
    assert usage["cache_read_input_tokens"] == sum(g["reused_prefix_tokens"] for g in generated)
    prompt = sum(g["prompt_tokens"] for g in generated)
    assert usage["cache_read_input_tokens"] > prompt / 2
    split = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    assert sum(usage[k] for k in split) == prompt
