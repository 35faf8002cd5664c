"""Talk to the gateway with Anthropic's own SDK: one answer, then the same question streamed.

    GATEWAY_URL=http://127.0.0.1:8000 python examples/anthropic_sdk.py

Any model id or alias works as `model`, and so does `claude-<id or alias>` (what Claude Code
shows). The key is only checked when the gateway's `server.api_keys` is set.
"""

from __future__ import annotations

import os

import anthropic

client = anthropic.Anthropic(
    base_url=os.environ.get("GATEWAY_URL", "http://127.0.0.1:8000"),
    api_key=os.environ.get("GATEWAY_API_KEY", "unused"),
)
model = os.environ.get("GATEWAY_MODEL", "claude-smollm2")
question = [{"role": "user", "content": "What is the capital of France?"}]

# Recent SDKs dropped `temperature` from `create` (Claude's newest models refuse sampling
# settings); the gateway still reads it from the body, so send it as an extra field.
message = client.messages.create(
    model=model, max_tokens=64, messages=question, extra_body={"temperature": 0}
)
print(message.content[0].text)
print(
    f"[{message.stop_reason}; {message.usage.input_tokens} in, {message.usage.output_tokens} out]"
)

with client.messages.stream(model=model, max_tokens=64, messages=question) as stream:
    for text in stream.text_stream:
        print(text, end="", flush=True)
print()
