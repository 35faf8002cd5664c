"""Routed experts held partly on disk (`experts:`), on a seeded test-built qwen3_moe whose
experts are most of its bytes (engines/mlx/experts/demo.py): the cache's policies, greedy
answers equal to the fully resident model's at several resident counts (alone and batched),
what the budget counts, `auto` sizing and its refusal, and damaged expert files named."""

from __future__ import annotations

import importlib
import shutil

import msgspec
import pytest

from engines.errors import ContextTooLarge, ModelUnavailable, SourceError
from engines.llm.engine import MLXEngine
from engines.mlx.experts.cache import Counts, ExpertCache
from engines.mlx.experts.demo import make_moe
from engines.mlx.experts.sizing import size_resident
from engines.platform import PlatformPath
from schemas.config import ModelConfig

CPU = PlatformPath(device="cpu", blas="n/a", weights="float32", why="")
PROMPTS = ["Tell me about cats.", "What is the capital of France?", "Write a haiku on rain."]
TOKENS = 16


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    return make_moe(tmp_path_factory.mktemp("moe"))


def engine(moe, memory_left: int | None = None, **settings) -> tuple[MLXEngine, object]:
    config = msgspec.convert(
        {"id": "moe", "source": str(moe), "context": {"max": 512}, **settings}, ModelConfig
    )
    loaded = MLXEngine(config, CPU, None)
    return loaded, loaded.load(memory_left)


def answers(loaded: MLXEngine) -> list[list[int]]:
    """Greedy token ids of every prompt, decoded together in one batch."""
    batch_generate = importlib.import_module("mlx_lm.generate").batch_generate
    tokenizer = loaded._tokenizer
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
        for p in PROMPTS
    ]
    out = batch_generate(
        loaded._model, tokenizer, prompts, max_tokens=TOKENS, return_token_ids=True
    )
    return [list(ids) for ids in out.token_ids]


def alone(loaded: MLXEngine, prompt: str) -> list[int]:
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    tokenizer = loaded._tokenizer
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True
    )
    steps = generate_step(mx.array(ids), loaded._model, max_tokens=TOKENS)
    return [int(token) for token, _ in steps]


@pytest.fixture(scope="module")
def full(moe):
    loaded, info = engine(moe)
    return {
        "alone": alone(loaded, PROMPTS[0]),
        "batched": answers(loaded),
        "memory": info.memory_bytes,
    }


def test_lru_drops_the_least_recently_routed_and_lfu_the_least_often():
    lru = ExpertCache(2, "lru")
    counts = Counts()
    for step in ([0], [1], [0], [2]):  # 1 is the least recent when 2 comes
        lru.place(step, [1], counts)
    assert sorted(lru.resident) == [0, 2]
    assert (counts.hits, counts.misses, counts.evictions) == (1, 3, 1)
    assert lru.slot(2) == 1  # 2 took the slot 1 left
    lfu = ExpertCache(2, "lfu")
    for step in ([0], [0], [1], [2], [3]):  # 0 was routed twice: it stays
        lfu.place(step, [1], Counts())
    assert 0 in lfu.resident and len(lfu.resident) == 2


def test_a_look_up_is_a_routed_use_and_a_step_routing_more_than_fit_keeps_its_own():
    cache = ExpertCache(2, "lru")
    counts = Counts()
    slots = cache.place([5, 6, 7], [3, 1, 2], counts)
    assert slots == [0, 1, None]  # the third is used for this step only
    assert (counts.hits, counts.misses) == (0, 6)
    assert cache.place([5, 6], [2, 2], counts) == [0, 1] and counts.hits == 4
    cache.forget([5])  # a failed read frees its slot
    assert cache.slot(5) is None and cache.place([8], [1], counts) == [0]


@pytest.mark.parametrize("resident", [1, 4, 16])
def test_greedy_answers_equal_the_fully_resident_models(moe, full, resident):
    loaded, info = engine(moe, experts={"resident": resident, "policy": "lru"})
    assert alone(loaded, PROMPTS[0]) == full["alone"]
    assert answers(loaded) == full["batched"]
    experts = loaded.experts
    assert experts.resident == resident
    assert experts.counts.misses > 0 and experts.counts.bytes_read > 0
    # The budget counts the dense weights and what is resident, never the experts on disk.
    detail = info.detail
    assert detail["experts_resident"] == f"{resident} of 32 per layer (lru)"
    assert int(detail["experts_resident_bytes"]) == resident * experts.expert_bytes
    assert info.memory_bytes < full["memory"]
    assert int(detail["expert_bytes_on_disk"]) == 32 * experts.expert_bytes
    assert all(len(layer.cache.resident) <= resident for layer in experts.layers)


def test_every_expert_resident_runs_on_the_router_s_indices_with_no_read(moe, full):
    """All 32 fit: the stacks hold them in expert order and the router's indices are used on
    the device as they are (no host read of the routing), every routed use a hit."""
    loaded, _ = engine(moe, experts={"resident": 32})
    assert all(layer.whole for layer in loaded.experts.layers)
    read_at_load = loaded.experts.counts.bytes_read
    assert answers(loaded) == full["batched"]
    counts = loaded.experts.counts
    assert counts.misses == 0 and counts.hits > 0 and counts.bytes_read == read_at_load


def test_lfu_answers_alike(moe, full):
    loaded, _ = engine(moe, experts={"resident": 4, "policy": "lfu"})
    assert answers(loaded) == full["batched"]


def test_auto_keeps_what_the_budget_leaves_and_refuses_with_the_numbers(moe):
    roomy, info = engine(moe, 60_000_000, experts={})
    assert roomy.experts.resident == 32  # all of them fit
    dense = int(info.detail["dense_bytes"])
    expert = roomy.experts.expert_bytes
    kv = info.memory_bytes - dense - 32 * expert
    tight, tight_info = engine(
        moe, dense + kv + 5 * expert + expert // 2, experts={}, concurrency=info.concurrency
    )
    assert tight.experts.resident == 5
    assert tight_info.memory_bytes <= dense + kv + 5 * expert + expert // 2
    with pytest.raises(ContextTooLarge) as refused:
        engine(moe, dense + kv + expert // 2, experts={}, concurrency=info.concurrency)
    assert "not one expert per layer fits" in str(refused.value)
    assert "memory budget leaves" in str(refused.value)


def test_size_resident_takes_a_number_as_it_is_at_most_the_layers():
    assert size_resident("m", 8, 32, 10, 0, 0, None) == 8
    assert size_resident("m", 64, 32, 10, 0, 0, 1) == 32
    assert size_resident("m", "auto", 32, 10, 100, 50, 185) == 3


def test_the_estimate_before_load_counts_the_resident_share(moe):
    from engines.mlx.experts.files import stored_split

    whole = MLXEngine(
        msgspec.convert({"id": "moe", "source": str(moe), "weights": "stored"}, ModelConfig),
        CPU,
        None,
    ).estimate_memory()
    part = MLXEngine(
        msgspec.convert(
            {"id": "moe", "source": str(moe), "weights": "stored", "experts": {"resident": 8}},
            ModelConfig,
        ),
        CPU,
        None,
    ).estimate_memory()
    dense, stacked, experts = stored_split("moe", moe)
    assert experts == 32 and stacked > 0.6 * whole  # the experts are most of the bytes
    assert part == dense + stacked * 8 // 32 < whole


def test_a_truncated_expert_file_is_named(moe, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(moe, broken)
    weights = broken / "model.safetensors"
    with open(weights, "r+b") as handle:
        handle.truncate(weights.stat().st_size - 1000)
    with pytest.raises(SourceError) as error:
        engine(broken, experts={"resident": 2})
    assert str(weights) in str(error.value)


def test_a_header_that_does_not_parse_is_named(moe, tmp_path):
    from engines.mlx.experts.files import read_header

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(SourceError) as error:
        read_header("moe", bad)
    assert str(bad) in str(error.value) and "unreadable" in str(error.value)


def test_a_dense_model_is_refused_experts_by_name():
    from mlx_lm.models import llama

    from engines.llm.loading import install_cache

    model = llama.Model(
        llama.ModelArgs(
            model_type="llama",
            hidden_size=32,
            num_hidden_layers=1,
            intermediate_size=64,
            num_attention_heads=2,
            rms_norm_eps=1e-5,
            vocab_size=100,
        )
    )
    config = msgspec.convert(
        {"id": "dense", "source": "./x", "experts": {"resident": 2}}, ModelConfig
    )
    with pytest.raises(ModelUnavailable) as refused:
        install_cache(config, model, None)
    assert "routes no experts" in str(refused.value) and "remove `experts`" in str(refused.value)


def test_quantized_experts_stay_quantized_and_answer_alike(tmp_path_factory):
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear

    quantized = make_moe(tmp_path_factory.mktemp("moe-q4"), bits=4)
    whole, _ = engine(quantized)
    part, info = engine(quantized, experts={"resident": 4})
    assert isinstance(part.experts.layers[0].shell.up_proj, QuantizedSwitchLinear)
    assert set(part.experts.layers[0].leaves) >= {"up_proj.scales", "up_proj.biases"}
    assert alone(part, PROMPTS[0]) == alone(whole, PROMPTS[0])
    assert answers(part) == answers(whole)
    assert part.experts.counts.misses > 0


def test_the_identity_above_can_fail_a_wrong_expert_changes_the_answers(moe, full):
    """The test-built model is scaled so experts steer its answers: one layer reading its
    neighbour expert in place of the routed one answers otherwise."""
    assert all(len(set(answer)) > 2 for answer in full["batched"])  # varied, not one token
    loaded, _ = engine(moe, experts={"resident": 4})
    layer = loaded.experts.layers[0]
    right = layer._read_many
    layer._read_many = lambda wanted: right([(e + 1) % layer.experts for e in wanted])
    assert answers(loaded) != full["batched"]


def test_the_memory_held_stays_within_what_the_budget_counts(moe, full):
    """MLX's own count of the memory it holds (CPU too): after decoding, the dense weights,
    the resident experts and the KV caches, within `memory_bytes`; at its peak (a step's
    stacks and activations) still less than the whole model's weights."""
    import gc

    import mlx.core as mx

    gc.collect()
    mx.clear_cache()
    before = mx.get_active_memory()
    loaded, info = engine(moe, experts={"resident": 4})
    mx.reset_peak_memory()
    answers(loaded)
    held = mx.get_active_memory() - before
    peak = mx.get_peak_memory() - before
    whole_weights = int(info.detail["dense_bytes"]) + int(info.detail["expert_bytes_on_disk"])
    assert int(info.detail["dense_bytes"]) + loaded.experts.resident_bytes <= held
    assert held <= info.memory_bytes
    assert peak < whole_weights


def test_a_fixed_resident_count_that_does_not_fit_is_refused_with_the_numbers(moe):
    with pytest.raises(ContextTooLarge) as refused:
        engine(moe, 16_000_000, experts={"resident": 32}, concurrency=1)
    # The weights counted are the dense ones (0.01 GiB) and all 32 experts a layer resident.
    assert "after 0.04 GiB of weights" in str(refused.value)


def test_an_expert_file_cut_short_while_serving_is_named_in_the_error(moe, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(moe, damaged)
    loaded, _ = engine(damaged, experts={"resident": 1})
    weights = damaged / "model.safetensors"
    with open(weights, "r+b") as handle:  # the experts stacked last are gone
        handle.truncate(weights.stat().st_size // 2)
    with pytest.raises(SourceError) as error:
        for prompt in PROMPTS:
            alone(loaded, prompt)
    assert str(weights) in str(error.value) and "truncated" in str(error.value)
