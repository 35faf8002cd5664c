"""Steering vectors (engines/llm/steering.py) on a tiny seeded llama: greedy answers under a
vector equal those of a reference forward pass that adds `scale * v` to the named layers'
outputs by hand; a base and its adapters steered differently, in one `BatchGenerator`
batch, each answer as alone; llama.cpp's GGUF (written by the `gguf` package, as
repeng and llama.cpp's tools write it) reads as the same safetensors; bad files refused."""

from __future__ import annotations

import numpy as np
import pytest

from engines.errors import ModelUnavailable
from engines.llm.steering import SteeringSet, read_steered
from schemas.config import AdapterConfig, SteeringConfig
from tests.engines.llm.test_adapters import (
    CONFIG,
    TOKENS,
    batched,
    fused,
    greedy,
    tiny_llama,
    write_adapter,
)

HIDDEN, LAYERS = CONFIG["hidden_size"], CONFIG["num_hidden_layers"]
PROMPT = [1, 7, 42, 9, 100]


def directions(seed: int, layers=range(LAYERS), hidden: int = HIDDEN) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"direction.{i}": rng.standard_normal(hidden).astype(np.float32) for i in layers}


def write_safetensors(path, tensors):
    from safetensors.numpy import save_file

    save_file(tensors, str(path))
    return path


def write_gguf(path, tensors, arch: str = "controlvector"):
    """As llama.cpp's control vectors are written (repeng's export_gguf): gguf's writer."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_string(f"{arch}.model_hint", "llama")
    writer.add_uint32(f"{arch}.layer_count", len(tensors))
    for name, vector in tensors.items():
        writer.add_tensor(name, vector)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def steered_reference(model, prompt: list[int], add: dict[int, np.ndarray]) -> list[int]:
    """Greedy tokens of llama's forward pass written out here, `add[layer]` added to that
    decoder layer's output: what the steered model must compute, without its code."""
    import mlx.core as mx
    from mlx_lm.models.base import create_attention_mask

    inner = model.model
    tokens = list(prompt)
    for _ in range(TOKENS):
        h = inner.embed_tokens(mx.array([tokens]))
        mask = create_attention_mask(h, None)
        for i, layer in enumerate(inner.layers):
            h = layer(h, mask, cache=None)
            if i in add:
                h = h + mx.array(add[i])
        logits = inner.embed_tokens.as_linear(inner.norm(h))
        tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt) :]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("steering")
    return {
        "a": write_safetensors(root / "a.safetensors", directions(1)),
        "a.gguf": write_gguf(root / "a.gguf", directions(1)),
        "b": write_safetensors(root / "b.safetensors", directions(2)),
        "adapter": write_adapter(root / "lora", 0, dora=False),
        "root": root,
    }


def steer(model, config: SteeringConfig, model_id: str = "tiny") -> SteeringSet:
    steering = SteeringSet(model_id, model)
    steering.set_base(read_steered(model_id, config, None, steering.shape))
    return steering


def test_a_vector_steers_the_named_layers_as_the_reference(files):
    plain = greedy(tiny_llama(), PROMPT)
    model = tiny_llama()
    config = SteeringConfig(vector=str(files["a"]), layers=[1], scale=6.0)
    steering = steer(model, config)
    add = {1: 6.0 * directions(1)["direction.1"]}
    answer = greedy(model, PROMPT)
    assert answer == steered_reference(tiny_llama(), PROMPT, add)
    assert answer != plain
    announced = steering.announced()["tiny"]
    assert (announced.layers, announced.scale, announced.format) == ([1], 6.0, "safetensors")
    assert len(announced.sha256) == 64


def test_llama_cpp_gguf_reads_as_the_same_safetensors(files):
    """Every layer (none named): the file's own."""
    gguf_model, st_model = tiny_llama(), tiny_llama()
    by_gguf = steer(gguf_model, SteeringConfig(vector=str(files["a.gguf"]), scale=3.0))
    steer(st_model, SteeringConfig(vector=str(files["a"]), scale=3.0))
    assert by_gguf.announced()["tiny"].format == "gguf"
    assert by_gguf.announced()["tiny"].layers == list(range(LAYERS))
    assert greedy(gguf_model, PROMPT) == greedy(st_model, PROMPT)


def test_base_and_adapters_steered_their_own_in_one_batch(files):
    """The base under vector a, adapter 0 under b, adapter 1 unsteered: each row of one
    batch answers as its reference alone."""
    from engines.llm.adapters import attach

    model = tiny_llama()
    steering = steer(model, SteeringConfig(vector=str(files["a"]), layers=[0, 1], scale=5.0))
    b = SteeringConfig(vector=str(files["b"]), layers=[1], scale=5.0)
    adapters = [
        AdapterConfig(id="steered", path=str(files["adapter"]), steering=b),
        AdapterConfig(id="plain", path=str(files["adapter"])),
    ]
    attached = attach("tiny", model, adapters, None, steering)
    va, vb = directions(1), directions(2)
    base_ref = steered_reference(
        tiny_llama(), PROMPT, {i: 5.0 * va[f"direction.{i}"] for i in (0, 1)}
    )
    steered_ref = steered_reference(fused(files["adapter"]), PROMPT, {1: 5.0 * vb["direction.1"]})
    plain_ref = greedy(fused(files["adapter"]), PROMPT)
    assert len({tuple(base_ref), tuple(steered_ref), tuple(plain_ref)}) == 3
    rows = [(PROMPT, None), (PROMPT, 0), (PROMPT, 1), (PROMPT, 0)]
    assert batched(model, attached, rows) == [base_ref, steered_ref, plain_ref, steered_ref]
    assert batched(model, attached, [(PROMPT, 0)]) == [steered_ref]  # one adapter's rows alone
    assert set(steering.announced(attached.current)) == {"tiny", "steered"}


def test_a_reload_changing_an_adapters_vector_steers_its_new_rows(files):
    from engines.llm.adapters import attach

    model = tiny_llama()
    steering = SteeringSet("tiny", model)
    first = SteeringConfig(vector=str(files["a"]), layers=[1], scale=5.0)
    attached = attach(
        "tiny", model, [AdapterConfig(id="x", path=str(files["adapter"]), steering=first)], None,
        steering,
    )  # fmt: skip
    before = batched(model, attached, [(PROMPT, attached.slot("x"))])
    second = SteeringConfig(vector=str(files["b"]), layers=[1], scale=5.0)
    attached.stage([AdapterConfig(id="x", path=str(files["adapter"]), steering=second)])
    attached.apply_staged()
    after = batched(model, attached, [(PROMPT, attached.slot("x"))])
    reference = steered_reference(
        fused(files["adapter"]), PROMPT, {1: 5.0 * directions(2)["direction.1"]}
    )
    assert after == [reference] != before
    assert steering.announced(attached.current)["x"].sha256 == steering.by_id[-1].file.sha256


@pytest.mark.parametrize(
    ("make", "config", "refusal"),
    [
        (None, {"vector": "missing.safetensors"}, "is not a file"),
        (lambda p: write_safetensors(p, directions(3, hidden=32)), {}, "hidden size is 64"),
        (lambda p: write_safetensors(p, directions(3)), {"layers": [5]}, "no vector for layer"),
        (lambda p: write_safetensors(p, directions(3, layers=[0, 7])), {}, "out of range"),
        (lambda p: write_gguf(p, directions(3), arch="llama"), {}, "not 'controlvector'"),
        (lambda p: write_safetensors(p, {"steer": np.ones(HIDDEN, np.float32)}), {}, "direction"),
    ],
)
def test_bad_vectors_are_refused_by_name(files, make, config, refusal):
    path = files["root"] / f"bad-{abs(hash(refusal))}.bin"
    if make is not None:
        make(path)
    config = SteeringConfig(**({"vector": str(path)} | config))
    steering = SteeringSet("tiny", tiny_llama())
    with pytest.raises(ModelUnavailable, match=refusal) as refused:
        read_steered("model 'tiny'", config, None, steering.shape)
    assert "`steering`" in str(refused.value)
