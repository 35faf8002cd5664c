"""Embed sentences through the gateway with OpenAI's own SDK, then rank them by similarity.

    GATEWAY_URL=http://127.0.0.1:8000 python examples/openai_embeddings.py

The shipped config serves all-MiniLM-L6-v2 as `minilm` (alias `all-minilm`): 384-dimensional,
unit-length vectors, so a dot product is the cosine similarity. Inputs longer than 256 word
pieces are cut to that window. The key is only checked when `server.api_keys` is set.
"""

from __future__ import annotations

import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("GATEWAY_URL", "http://127.0.0.1:8000") + "/v1",
    api_key=os.environ.get("GATEWAY_API_KEY", "unused"),
)
query = "A man is eating food."
sentences = [
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
]

response = client.embeddings.create(model="minilm", input=[query, *sentences])
first, *others = (item.embedding for item in response.data)
scores = [sum(a * b for a, b in zip(first, vector, strict=True)) for vector in others]
print(f"{query!r} ({len(first)} dimensions, {response.usage.prompt_tokens} tokens in all)")
for score, sentence in sorted(zip(scores, sentences, strict=True), reverse=True):
    print(f"  {score:.3f}  {sentence}")
