"""The gateway from the official `openai` package: chat, streaming, completions, responses.

    GATEWAY_URL=http://127.0.0.1:8000 python examples/openai_sdk.py

`GATEWAY_MODEL` picks the model (default: the `default` alias of the shipped config) and
`GATEWAY_API_KEY` is sent when the gateway's `server.api_keys` asks for one.
"""

from __future__ import annotations

import os

from openai import OpenAI

URL = os.environ.get("GATEWAY_URL", "http://127.0.0.1:8000")
MODEL = os.environ.get("GATEWAY_MODEL", "default")
QUESTION = "What is the capital of France?"


def main() -> None:
    client = OpenAI(base_url=f"{URL}/v1", api_key=os.environ.get("GATEWAY_API_KEY", "unused"))

    print("models:", ", ".join(model.id for model in client.models.list()))

    # Chat completions, whole answer at once.
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], max_tokens=40
    )
    print("chat:", chat.choices[0].message.content)
    print("  usage:", chat.usage.prompt_tokens, "in,", chat.usage.completion_tokens, "out")

    # The same, streamed token by token; the last chunk carries the usage.
    print("chat stream: ", end="")
    for chunk in client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices:
            print(chunk.choices[0].delta.content or "", end="", flush=True)
    print()

    # Plain completions: the prompt is continued as is, no chat template.
    completion = client.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=12, temperature=0
    )
    print("completion:", completion.choices[0].text)

    # The Responses API, plain and streamed.
    response = client.responses.create(
        model=MODEL, instructions="Answer in one sentence.", input=QUESTION, max_output_tokens=40
    )
    print("response:", response.output_text, f"({response.status})")
    print("response stream: ", end="")
    with client.responses.stream(model=MODEL, input=QUESTION, max_output_tokens=40) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                print(event.delta, end="", flush=True)
    print()


if __name__ == "__main__":
    main()
