"""End to end: a batch on the shipped config's real models (SmolLM2 chat, MiniLM embeddings)
through the `openai` SDK: upload, create, poll to `completed`, read the output file. Each
line's answer is the one the same request gets interactively (greedy: the same door)."""

from __future__ import annotations

import io
import json
import sys
import time

from conftest import run_example

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def run_batch(client, endpoint: str, bodies: dict[str, dict]):
    content = b"".join(
        json.dumps({"custom_id": cid, "method": "POST", "url": endpoint, "body": b}).encode()
        + b"\n"
        for cid, b in bodies.items()
    )
    file = client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint=endpoint, completion_window="24h")
    deadline = time.monotonic() + 300
    while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed"):
        assert time.monotonic() < deadline, batch
        time.sleep(0.2)
    assert batch.status == "completed", batch
    lines = client.files.content(batch.output_file_id).text.splitlines()
    return batch, {line["custom_id"]: line["response"] for line in map(json.loads, lines)}


def test_a_chat_batch_on_smollm2_answers_as_the_interactive_request_does(openai_client):
    bodies = {
        "paris": {"model": "smollm2", "messages": QUESTION, "max_tokens": 40},
        "short": {"model": "gpt-4o-mini", "messages": QUESTION, "max_tokens": 3},
    }
    batch, out = run_batch(openai_client, "/v1/chat/completions", bodies)
    assert batch.request_counts.completed == 2 and batch.error_file_id is None
    answer = out["paris"]["body"]["choices"][0]["message"]["content"]
    assert "Paris" in answer
    interactive = openai_client.chat.completions.create(**bodies["paris"])
    assert interactive.choices[0].message.content == answer
    short = out["short"]["body"]
    assert short["model"] == "smollm2" and short["usage"]["completion_tokens"] == 3
    assert short["choices"][0]["finish_reason"] == "length"


def test_an_embeddings_batch_on_minilm(openai_client):
    text = "A man is eating food."
    batch, out = run_batch(
        openai_client,
        "/v1/embeddings",
        {"food": {"model": "minilm", "input": text, "encoding_format": "float"}},
    )
    vector = out["food"]["body"]["data"][0]["embedding"]
    assert len(vector) == 384
    interactive = openai_client.embeddings.create(
        model="minilm", input=text, encoding_format="float"
    )
    assert (
        max(abs(a - b) for a, b in zip(vector, interactive.data[0].embedding, strict=True)) < 1e-5
    )


def test_the_batch_example_runs_to_its_output(gateway):
    done = run_example(gateway, sys.executable, "examples/openai_batch.py")
    assert done.returncode == 0, done.stderr
    assert "completed 3/3" in done.stdout
    assert "france: " in done.stdout and "Paris" in done.stdout.split("france: ")[1]
    assert "japan: " in done.stdout and "haiku: " in done.stdout


def test_a_background_response_on_smollm2_answers_as_the_interactive_one(openai_client):
    asked = {"model": "smollm2", "input": "What is the capital of France?", "max_output_tokens": 30}
    stream = openai_client.responses.create(**asked, background=True, stream=True)
    seen = []
    for event in stream:
        seen.append(event)
        if event.type == "response.output_text.delta":
            break
    stream.close()
    response_id = seen[0].response.id
    rest = list(
        openai_client.responses.retrieve(
            response_id, stream=True, starting_after=seen[-1].sequence_number
        )
    )
    assert rest[-1].type in ("response.completed", "response.incomplete")
    streamed = "".join(e.delta for e in seen + rest if e.type == "response.output_text.delta")
    stored = openai_client.responses.retrieve(response_id)
    assert stored.background is True and stored.output_text == streamed
    assert "Paris" in streamed
    interactive = openai_client.responses.create(**asked)  # greedy: the same answer
    assert interactive.output_text == streamed
