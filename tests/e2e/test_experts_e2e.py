"""`experts:` through the real gateway over HTTP (openai SDK): a test-built MoE whose weights
exceed the memory budget serves with only some experts of each layer resident (`auto` sized
from the budget), and its greedy answers are the fully loaded model's; `model_attached` and
`/metrics` say what is resident and how the cache fared."""

from __future__ import annotations

import re
import textwrap

import httpx
import pytest
from conftest import serving

from engines.mlx.experts.demo import make_moe

PROMPTS = ["Tell me about cats.", "What is the capital of France?", "Write a haiku on rain."]
BUDGET = 24 * 1024 * 1024  # the dense weights, the KV caches and a few experts a layer


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    return make_moe(tmp_path_factory.mktemp("moe"))


def greedy(gateway, model: str) -> list[str]:
    """The answers to PROMPTS, then a second turn on the first (its prompt continues the
    first conversation's: the parked KV cache is reused)."""
    client = gateway.openai()

    def ask(messages: list[dict]) -> str:
        reply = client.chat.completions.create(
            model=model, messages=messages, temperature=0, max_tokens=20
        )
        return reply.choices[0].message.content

    answers = [ask([{"role": "user", "content": prompt}]) for prompt in PROMPTS]
    turn = [
        {"role": "user", "content": PROMPTS[0]},
        {"role": "assistant", "content": answers[0]},
        {"role": "user", "content": "And dogs?"},
    ]
    return [*answers, ask(turn)]


@pytest.fixture(scope="module")
def whole(moe, tmp_path_factory):
    config = f"""
    models:
      - id: moe
        source: {moe}
        context: {{max: 512}}
    """
    with serving(tmp_path_factory.mktemp("whole"), config) as gateway:
        attached = gateway.events("model_attached", model="moe")[-1]
        return {"answers": greedy(gateway, "moe"), "memory": attached["memory_bytes"]}


def test_a_moe_bigger_than_the_budget_answers_as_the_whole_model(moe, whole, tmp_path):
    config = f"""
    server: {{memory_budget: {BUDGET // 1024}KiB}}
    models:
      - id: moe
        source: {moe}
        context: {{max: 512}}
        experts: {{resident: auto, policy: lru}}
    """
    assert whole["memory"] > BUDGET  # loaded whole, it would not fit
    with serving(tmp_path, config) as gateway:
        attached = gateway.events("model_attached", model="moe")[-1]
        detail = attached["detail"]
        resident = int(detail["experts_resident"].split(" of ")[0])
        assert 1 <= resident < 32 and detail["experts_resident"].endswith("of 32 per layer (lru)")
        assert attached["memory_bytes"] <= BUDGET
        assert int(detail["dense_bytes"]) + int(detail["expert_bytes_on_disk"]) > BUDGET
        assert greedy(gateway, "moe") == whole["answers"]
        metrics = httpx.get(f"{gateway.url}/metrics").text
        row = httpx.get(f"{gateway.url}/ui/api/models").json()["models"][0]
        generated = gateway.wait_events("generated", len(PROMPTS) + 1, model="moe")
    assert generated[-1]["reused_prefix_tokens"] > 0  # the second turn reused the first's KV
    # Each request says the look-ups of its own steps (they ran one after another here).
    assert all(g["expert_misses"] > 0 and g["expert_bytes_read"] > 0 for g in generated)
    assert all(g["expert_hits"] + g["expert_misses"] > 0 for g in generated)

    def value(name: str) -> float:
        found = re.search(rf'^{name}{{model="moe"}} (\S+)$', metrics, re.M)
        assert found, f"{name} missing from /metrics"
        return float(found.group(1))

    assert value("gateway_experts_resident") == resident
    # The ops page's row says the same (resident per layer, hit rate).
    assert row["experts"]["resident"] == resident and row["experts"]["experts"] == 32
    assert row["experts"]["hit_rate"] == value("gateway_experts_hit_ratio")
    # Since load: the requests' look-ups, and those of steps outside any (mlx-lm decodes one
    # token ahead, so a step past a request's last token may end after its `generated`).
    assert value("gateway_experts_misses_total") >= sum(g["expert_misses"] for g in generated)
    assert value("gateway_experts_hits_total") > 0
    assert value("gateway_experts_read_bytes_total") > 0
    assert value("gateway_experts_evictions_total") > 0
    assert 0 < value("gateway_experts_hit_ratio") < 1


def test_a_reload_changing_resident_drops_no_request(moe, whole, tmp_path):
    import threading

    def config(resident: int) -> str:
        return f"""
        models:
          - id: moe
            source: {moe}
            context: {{max: 512}}
            experts: {{resident: {resident}}}
        """

    with serving(tmp_path, config(4)) as gateway:
        client = gateway.openai()
        first_chunk = threading.Event()
        streamed: dict = {"text": "", "finish": None}

        def stream() -> None:
            for chunk in client.chat.completions.create(
                model="moe",
                messages=[{"role": "user", "content": PROMPTS[0]}],
                temperature=0,
                max_tokens=300,
                stream=True,
            ):
                choice = chunk.choices[0] if chunk.choices else None
                if choice and choice.delta.content:
                    streamed["text"] += choice.delta.content
                    first_chunk.set()
                if choice and choice.finish_reason:
                    streamed["finish"] = choice.finish_reason

        reader = threading.Thread(target=stream)
        reader.start()
        assert first_chunk.wait(60)
        (tmp_path / "models.yaml").write_text(textwrap.dedent(config(8)))
        assert streamed["finish"] is None  # still streaming when the reload begins
        assert httpx.post(f"{gateway.url}/admin/reload", timeout=120).status_code == 200
        reader.join(120)
        # The stream begun under resident 4 ran to its end (nothing dropped or cut short).
        assert streamed["finish"] in ("length", "stop") and streamed["text"]
        first = gateway.events("generated", model="moe")[0]
        assert first["stop_reason"] in ("length", "stop") and first["new_tokens"] > 20
        gateway.wait_event("config_reloaded", timeout=60)
        attached = gateway.wait_events("model_attached", 2, timeout=60, model="moe")[-1]
        assert attached["detail"]["experts_resident"] == "8 of 32 per layer (lru)"
        assert greedy(gateway, "moe") == whole["answers"]
