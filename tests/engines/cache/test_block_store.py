"""The disk tier's files: a block reads back as written, damage is caught, the directory
keeps to its budget and a write that cannot happen turns the tier off for that model."""

from __future__ import annotations

import os

import numpy as np
import pytest

from engines.cache import CacheDir
from engines.cache.blockfile import CorruptBlock, read_block, write_block
from engines.cache.store import BlockStore, block_path, disk_usage


def tensors(seed: int, tokens: int = 8) -> dict:
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((1, 2, tokens, 4), dtype=np.float32)
    raw = rng.integers(0, 2**16, (1, 2, tokens, 4), dtype=np.uint16)  # bfloat16's bits
    return {"0.keys": ("F32", keys), "0.values": ("BF16", raw)}


def test_a_block_reads_back_as_written(tmp_path):
    path = tmp_path / "b.safetensors"
    written = tensors(1)
    assert write_block(path, written) == path.stat().st_size
    back = read_block(path)
    assert list(back) == list(written)
    for name, (dtype, array) in written.items():
        assert back[name][0] == dtype and np.array_equal(back[name][1], array)
    assert [p.name for p in tmp_path.iterdir()] == ["b.safetensors"]  # no temporary left


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda data: data[: len(data) // 2], "cut short"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "checksum mismatch"),
        (lambda data: b"\xff" * 16 + data[16:], "unreadable"),
    ],
)
def test_a_damaged_block_is_refused(tmp_path, damage, reason):
    path = tmp_path / "b.safetensors"
    write_block(path, tensors(2))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptBlock, match=reason):
        read_block(path)


def test_the_store_removes_a_corrupt_block_and_reports_it(tmp_path, events):
    store = BlockStore(CacheDir(tmp_path, 10**9), "m")
    store.save(["k1"], {"k1": tensors(3)}, 8)
    store.close()
    path = block_path(tmp_path, "k1")
    path.write_bytes(path.read_bytes()[:-10])
    assert BlockStore(CacheDir(tmp_path, 10**9), "m").read("k1") is None
    assert not path.exists()
    corrupt = [e for e in events if type(e).__name__ == "CacheCorrupt"]
    assert [(e.block, e.reason) for e in corrupt] == [("k1", "cut short")]


def test_past_its_budget_the_least_recently_used_blocks_go_first(tmp_path, events):
    size = write_block(tmp_path / "probe", tensors(0))
    (tmp_path / "probe").unlink()
    store = BlockStore(CacheDir(tmp_path, 3 * size), "m")
    store.save(["a1", "a2"], {"a1": tensors(1), "a2": tensors(2)}, 16)
    store.close()
    store = BlockStore(CacheDir(tmp_path, 3 * size), "m")
    store.save(["b1", "b2"], {"b1": tensors(3), "b2": tensors(4)}, 16)
    store.close()
    # a's tail went first (a chain is touched head first), then nothing more was needed.
    assert store.present(["a1"]) == 1 and store.present(["a2"]) == 0
    assert store.present(["b1", "b2"]) == 2
    assert disk_usage(tmp_path) == (3, 3 * size)
    [evicted] = [e for e in events if type(e).__name__ == "CacheEvicted"]
    assert (evicted.blocks, evicted.bytes, evicted.dir_bytes) == (1, size, 3 * size)


def test_a_dead_writers_temporary_is_swept_and_never_read(tmp_path):
    shard = tmp_path / "k1"[:2]
    shard.mkdir()
    stale = shard / "k1.safetensors.123.abcd.tmp"
    stale.write_bytes(b"half a block")
    os.utime(stale, (1, 1))
    store = BlockStore(CacheDir(tmp_path, 10**9), "m")
    assert store.present(["k1"]) == 0
    store.save(["k2"], {"k2": tensors(5)}, 8)
    store.close()
    assert not stale.exists()


def test_a_write_that_fails_leaves_the_model_ram_only_with_one_warning(tmp_path, events):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the directory should be")
    store = BlockStore(CacheDir(blocked, 10**9), "m")
    store.save(["k1"], {"k1": tensors(6)}, 8)
    store.save(["k2"], {"k2": tensors(7)}, 8)
    store.close()
    failed = [e for e in events if type(e).__name__ == "CacheUnwritable"]
    assert len(failed) == 1 and failed[0].dir == str(blocked)
    assert not any(type(e).__name__ == "CacheSaved" for e in events)


def test_a_save_larger_than_the_writers_bound_is_taken_when_nothing_waits(tmp_path, monkeypatch):
    import engines.cache.store as store_module

    big = tensors(7, tokens=64)
    size = sum(array.nbytes for _, array in big.values())
    monkeypatch.setattr(store_module, "MAX_PENDING_BYTES", size // 2)
    store = BlockStore(CacheDir(tmp_path, 10**9), "m")
    assert store.room_for(size)  # the writer is idle: a long prompt is still saved
    store.save(["k1"], {"k1": big}, 64)
    store.close()
    assert block_path(tmp_path, "k1").is_file()
    # With a save waiting, another that would pass the bound is refused before any copy.
    store = BlockStore(CacheDir(tmp_path, 10**9), "m")
    store._pending_bytes = 1
    assert not store.room_for(size)
    store._pending_bytes = 0
    store.close()


def test_the_disk_is_used_where_it_is_sooner_than_the_prefill_it_replaces():
    from engines.mlx.cache.worth import Worth

    worth = Worth()
    assert worth.disk_pays(6400, 4 << 30)  # nothing measured yet: try the disk
    # A CPU: 40 prompt tokens/s, the disk at 500 MB/s: a 2 GB read beats 100 s of prefill.
    worth.prefilled(4000, 100.0)
    worth.moved(500_000_000, 1.0)
    assert worth.disk_pays(4000, 2_000_000_000)
    # An H200: 12k tokens/s; 4 GiB of KV at 800 MB/s takes 5 s against 2.6 s of prefill.
    fast = Worth()
    fast.prefilled(31_500, 2.6)
    fast.moved(800_000_000, 1.0)
    assert not fast.disk_pays(31_500, 4 << 30)
    # Short blocks of prefill teach nothing (a one-token tail is all launch overhead).
    fast.prefilled(1, 1e-6)
    assert fast.prefill_tps == 31_500 / 2.6
