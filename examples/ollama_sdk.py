"""Talk to the gateway with Ollama's own Python package: one answer, then the same question
streamed, then what the gateway lists and has loaded.

    GATEWAY_URL=http://127.0.0.1:8000 python examples/ollama_sdk.py

Any model id or alias works as `model`, with or without Ollama's `:latest` tag. The key is
only checked when the gateway's `server.api_keys` is set.
"""

from __future__ import annotations

import os

import ollama

client = ollama.Client(
    host=os.environ.get("GATEWAY_URL", "http://127.0.0.1:8000"),
    headers={"Authorization": f"Bearer {os.environ.get('GATEWAY_API_KEY', 'unused')}"},
)
model = os.environ.get("GATEWAY_MODEL", "smollm2:latest")
question = [{"role": "user", "content": "What is the capital of France?"}]
greedy = {"temperature": 0, "num_predict": 64}

reply = client.chat(model=model, messages=question, options=greedy)
print(reply.message.content)
print(f"[{reply.done_reason}; {reply.prompt_eval_count} in, {reply.eval_count} out]")

for part in client.chat(model=model, messages=question, options=greedy, stream=True):
    print(part.message.content, end="", flush=True)
print()

print("models:", ", ".join(m.model for m in client.list().models))
print("loaded:", ", ".join(m.model for m in client.ps().models))
