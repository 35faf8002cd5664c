"""Adapters on one base (engines/llm/adapters.py): greedy answers through each adapter, the
base beside them in one `BatchGenerator` batch, equal those of the same adapter fused into a
copy of the base by mlx-lm's own LoRA/DoRA layers; bad adapters are refused by name."""

from __future__ import annotations

import json
import shutil

import pytest

from engines.errors import ModelUnavailable
from engines.sources.adapter_files import AdapterError, read_adapter
from schemas.config import AdapterConfig

CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "vocab_size": 256,
    "tie_word_embeddings": True,
}
TOKENS = 12


def tiny_llama(seed: int = 0):
    import mlx.core as mx
    from mlx_lm.models import llama

    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(CONFIG))
    mx.eval(model.parameters())
    return model


def write_adapter(directory, seed: int, dora: bool, keys=("self_attn.q_proj", "self_attn.v_proj")):
    """mlx-lm's LoRA (or DoRA) layers on a copy of the base, B filled with seeded noise, saved
    as `mlx_lm.lora` saves them."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.tuner.utils import linear_to_lora_layers

    model = tiny_llama()
    model.freeze()  # as mlx_lm.lora does: the adapters alone are trainable, and saved
    params = {"rank": 4 + seed, "scale": 2.0, "dropout": 0.0, "keys": list(keys)}
    linear_to_lora_layers(model, 2, params, use_dora=dora)
    mx.random.seed(100 + seed)
    for _, module in model.named_modules():
        if hasattr(module, "lora_b"):
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.2
            if dora:
                module.m = module.m * (1 + 0.3 * mx.random.normal(module.m.shape))
    directory.mkdir(parents=True)
    weights = dict(tree_flatten(model.trainable_parameters()))
    mx.save_safetensors(str(directory / "adapters.safetensors"), weights)
    config = {"fine_tune_type": "dora" if dora else "lora", "num_layers": 2}
    (directory / "adapter_config.json").write_text(json.dumps(config | {"lora_parameters": params}))
    return directory


def fused(path):
    """The reference: the adapter loaded by mlx-lm and fused into a copy of the base."""
    from mlx.utils import tree_unflatten
    from mlx_lm.tuner.utils import load_adapters

    model = load_adapters(tiny_llama(), str(path))
    layers = [(n, m.fuse()) for n, m in model.named_modules() if hasattr(m, "fuse")]
    model.update_modules(tree_unflatten(layers))
    return model


def greedy(model, prompt: list[int]) -> list[int]:
    import mlx.core as mx

    tokens = list(prompt)
    for _ in range(TOKENS):
        tokens.append(int(model(mx.array([tokens]))[0, -1].argmax()))
    return tokens[len(prompt) :]


def batched(model, adapters, rows: list[tuple[list[int], int | None]]) -> list[list[int]]:
    """Every row in one mlx-lm BatchGenerator, each under its adapter slot."""
    from mlx_lm.generate import BatchGenerator

    generator = BatchGenerator(model, stop_tokens=[], completion_batch_size=len(rows))
    uids = generator.insert(
        [p for p, _ in rows],
        max_tokens=[TOKENS] * len(rows),
        caches=[adapters.make_cache(model, slot) for _, slot in rows],
    )
    out = {uid: [] for uid in uids}
    while any(len(t) < TOKENS for t in out.values()):
        for response in generator.next_generated():
            out[response.uid].append(response.token)
    return [out[uid] for uid in uids]


@pytest.fixture(scope="module")
def adapter_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return {
        "lora-a": write_adapter(root / "a", 0, dora=False),
        "lora-b": write_adapter(
            root / "b", 1, dora=False, keys=("mlp.up_proj", "self_attn.o_proj")
        ),
        "dora-c": write_adapter(root / "c", 2, dora=True),
    }


@pytest.fixture(scope="module")
def served(adapter_dirs):
    from engines.llm.adapters import attach

    model = tiny_llama()
    configs = [AdapterConfig(id=name, path=str(path)) for name, path in adapter_dirs.items()]
    return model, attach("tiny", model, configs, None)


PROMPTS = [[1, 5, 9, 33, 70], [2, 8, 8, 41], [3, 100, 7, 7, 7, 12], [4, 4, 200]]


def test_each_adapter_alone_answers_as_its_fused_copy(served, adapter_dirs):
    model, adapters = served
    for slot, path in enumerate(adapter_dirs.values()):
        reference = greedy(fused(path), PROMPTS[slot])
        assert batched(model, adapters, [(PROMPTS[slot], slot)]) == [reference]
    # ...and the adapters change the answer: the base's differs from each.
    base = greedy(tiny_llama(), PROMPTS[0])
    assert base != greedy(fused(adapter_dirs["lora-a"]), PROMPTS[0])


def test_mixed_batch_rows_each_answer_as_their_own_adapter(served, adapter_dirs):
    model, adapters = served
    paths = list(adapter_dirs.values())
    rows = [
        (PROMPTS[0], 0),
        (PROMPTS[1], None),
        (PROMPTS[2], 2),
        (PROMPTS[3], 1),
        (PROMPTS[0], None),
    ]
    expected = [
        greedy(fused(paths[0]), PROMPTS[0]),
        greedy(tiny_llama(), PROMPTS[1]),
        greedy(fused(paths[2]), PROMPTS[2]),
        greedy(fused(paths[1]), PROMPTS[3]),
        greedy(tiny_llama(), PROMPTS[0]),
    ]
    assert batched(model, adapters, rows) == expected


def test_bad_adapters_are_refused_by_name(tmp_path, adapter_dirs):
    from engines.llm.adapters import attach

    with pytest.raises(AdapterError, match="no adapter_config.json"):
        read_adapter(tmp_path)
    wrong_rank = tmp_path / "rank"
    shutil.copytree(adapter_dirs["lora-a"], wrong_rank)
    config = json.loads((wrong_rank / "adapter_config.json").read_text())
    config["lora_parameters"]["rank"] = 16
    (wrong_rank / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(AdapterError, match="rank 4x4, the config says 16"):
        read_adapter(wrong_rank)
    bigger = dict(CONFIG, hidden_size=128, intermediate_size=256)
    import mlx.core as mx
    from mlx_lm.models import llama

    mx.random.seed(0)
    other = llama.Model(llama.ModelArgs.from_dict(bigger))
    configs = [AdapterConfig(id="lora-a", path=str(adapter_dirs["lora-a"]))]
    with pytest.raises(ModelUnavailable, match="adapter 'lora-a'.*adapts 64 -> 64"):
        attach("bigger", other, configs, None)


def test_a_reload_adds_and_removes_adapters_while_rows_decode(adapter_dirs):
    """A reload's adapters staged mid-batch: the row under the removed adapter finishes as
    its fused copy answers, the new adapter's row beside it as its own; the base stays."""
    from mlx_lm.generate import BatchGenerator

    from engines.llm.adapters import attach

    paths = adapter_dirs
    config = {name: AdapterConfig(id=name, path=str(path)) for name, path in paths.items()}
    model = tiny_llama()
    adapters = attach("tiny", model, [config["lora-a"], config["lora-b"]], None)
    generator = BatchGenerator(model, stop_tokens=[], completion_batch_size=4)
    rows = [(PROMPTS[0], "lora-a"), (PROMPTS[3], "lora-b")]
    uids = generator.insert(
        [p for p, _ in rows],
        max_tokens=[TOKENS] * 2,
        caches=[adapters.make_cache(model, adapters.slot(name)) for _, name in rows],
    )
    out = {uid: [] for uid in uids}
    while len(out[uids[0]]) < 4:
        for response in generator.next_generated():
            out[response.uid].append(response.token)
    adapters.stage([config["lora-a"], config["dora-c"]])  # lora-b removed, dora-c added
    adapters.apply_staged()
    assert adapters.ids == ["lora-a", "dora-c"] and adapters.slot("dora-c") == 2
    (late,) = generator.insert(
        [PROMPTS[2]], max_tokens=[TOKENS], caches=[adapters.make_cache(model, 2)]
    )
    out[late] = []
    while any(len(t) < TOKENS for t in out.values()):
        for response in generator.next_generated():
            out[response.uid].append(response.token)
    assert out[uids[0]] == greedy(fused(paths["lora-a"]), PROMPTS[0])
    assert out[uids[1]] == greedy(fused(paths["lora-b"]), PROMPTS[3])
    assert out[late] == greedy(fused(paths["dora-c"]), PROMPTS[2])


def test_a_reloaded_adapter_that_does_not_fit_changes_nothing(tmp_path, adapter_dirs):
    from engines.llm.adapters import attach

    model = tiny_llama()
    kept = AdapterConfig(id="lora-a", path=str(adapter_dirs["lora-a"]))
    adapters = attach("tiny", model, [kept], None)
    with pytest.raises(ModelUnavailable, match="adapter 'nowhere'"):
        adapters.stage([kept, AdapterConfig(id="nowhere", path=str(tmp_path / "none"))])
    adapters.apply_staged()
    assert adapters.ids == ["lora-a"]


def test_rows_of_one_adapter_at_their_own_scales(served, adapter_dirs):
    """A request's `lora` scale rides on its row: one batch, one adapter, scales 1 and 0
    (the base's answer) and the declared one, gathered per row."""
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.models.cache import make_prompt_cache

    from engines.llm.adapters import tag

    model, adapters = served
    own = adapters.scale_of("lora-a", 1.0)
    caches = [
        tag(make_prompt_cache(model), 0, own),
        tag(make_prompt_cache(model), 0, 0.0),
        adapters.make_cache(model, 0),
    ]
    generator = BatchGenerator(model, stop_tokens=[], completion_batch_size=3)
    uids = generator.insert([PROMPTS[0]] * 3, max_tokens=[TOKENS] * 3, caches=caches)
    out = {uid: [] for uid in uids}
    while any(len(t) < TOKENS for t in out.values()):
        for response in generator.next_generated():
            out[response.uid].append(response.token)
    fused_a = greedy(fused(adapter_dirs["lora-a"]), PROMPTS[0])
    assert [out[u] for u in uids] == [fused_a, greedy(tiny_llama(), PROMPTS[0]), fused_a]
    with pytest.raises(ValueError, match="DoRA"):
        adapters.scale_of("dora-c", 0.5)
