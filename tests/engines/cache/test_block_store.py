"""The disk tier's files: a block reads back as written, damage is caught, the directory
keeps to its budget and a write that cannot happen turns the tier off for that model."""

from __future__ import annotations

import contextvars
import os
import threading

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


# -- a directory others could write: crafted blocks, links, files that are not blocks ---

LAYOUT = {"0.keys": ("F32", (1, 2, 8, 4)), "0.values": ("BF16", (1, 2, 8, 4))}


def crafted(path, damage) -> None:
    """Write `tensors(9)` changed by `damage` as a block whose CRC holds."""
    write_block(path, damage(tensors(9)))


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda t: {n: (d, a[..., :2]) for n, (d, a) in t.items()}, "not this model's F32"),
        (lambda t: {n: (d, a[..., :4, :]) for n, (d, a) in t.items()}, r"\[1, 2, 4, 4\]"),
        (lambda t: {"0.keys": t["0.keys"]}, "missing"),
        (lambda t: t | {"1.keys": t["0.keys"]}, "extra"),
        (lambda t: t | {"0.keys": ("F16", t["0.keys"][1].astype(np.float16))}, "F16"),
    ],
    ids=["half the head dimension", "fewer tokens", "a layer missing", "a layer more", "dtype"],
)
def test_a_block_whose_crc_holds_but_is_not_the_models_is_refused(tmp_path, damage, reason):
    path = tmp_path / "b.safetensors"
    crafted(path, damage)
    assert read_block(path)  # whole and checksummed: only the model's layout refuses it
    with pytest.raises(CorruptBlock, match=reason):
        read_block(path, LAYOUT)
    crafted(path, lambda t: t)
    assert read_block(path, LAYOUT).keys() == LAYOUT.keys()


def header_block(path, header: bytes) -> None:
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 64)


def test_a_deeply_nested_or_huge_header_is_corrupt_not_a_crash(tmp_path):
    path = tmp_path / "b.safetensors"
    depth = 100_000
    header_block(path, b'{"0.keys":' + b"[" * depth + b"]" * depth + b"}")
    with pytest.raises(CorruptBlock, match="unreadable"):
        read_block(path)
    path.write_bytes((1 << 40).to_bytes(8, "little") + b"{}")
    with pytest.raises(CorruptBlock, match="header of"):
        read_block(path)
    header_block(path, b'{"__metadata__": {"format": 3}, "x": {"shape": "oops"}}')
    with pytest.raises(CorruptBlock):
        read_block(path)


def test_the_store_reports_and_removes_a_crafted_block_and_reads_the_good_ones(tmp_path, events):
    store = BlockStore(CacheDir(tmp_path, 10**9), "m", layout=LAYOUT)
    store.save(["k1", "k2"], {"k1": tensors(1), "k2": tensors(2)}, 16)
    store.close()
    crafted(block_path(tmp_path, "k2"), lambda t: {"0.keys": t["0.keys"]})
    store = BlockStore(CacheDir(tmp_path, 10**9), "m", layout=LAYOUT)
    assert store.read("k1") is not None and store.read("k2") is None
    assert not block_path(tmp_path, "k2").exists()
    [corrupt] = [e for e in events if type(e).__name__ == "CacheCorrupt"]
    assert corrupt.block == "k2" and "missing" in corrupt.reason


def test_eviction_never_follows_a_linked_shard_out_of_the_cache(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("weights.safetensors", "k9.safetensors", "upload.tmp"):
        (elsewhere / name).write_bytes(b"x" * 100_000)
        os.utime(elsewhere / name, (1, 1))  # the oldest and stalest there are
    cache = tmp_path / "kv"
    cache.mkdir()
    (cache / "zz").symlink_to(elsewhere, target_is_directory=True)
    size = write_block(tmp_path / "probe", tensors(0))
    store = BlockStore(CacheDir(cache, size), "m")
    store.save(["a1", "a2"], {"a1": tensors(1), "a2": tensors(2)}, 16)
    store.close()
    assert sorted(p.name for p in elsewhere.iterdir()) == [
        "k9.safetensors",
        "upload.tmp",
        "weights.safetensors",
    ]
    assert disk_usage(cache) == (1, size)  # what is behind the link is not counted either
    assert store.present(["zz9"]) == 0


def test_a_block_that_is_a_link_or_not_a_regular_file_is_never_read(tmp_path, events):
    outside = tmp_path / "secret.safetensors"
    write_block(outside, tensors(4))
    cache = tmp_path / "kv"
    store = BlockStore(CacheDir(cache, 10**9), "m", layout=LAYOUT)
    store.save(["kk1"], {"kk1": tensors(1)}, 8)
    store.close()
    linked = block_path(cache, "kk2")
    linked.symlink_to(outside)
    assert store.present(["kk2"]) == 0
    assert store.read("kk2") is None
    assert outside.exists() and not linked.is_symlink()  # the link went, not its target
    fifo = block_path(cache, "kk3")
    os.mkfifo(fifo)
    found: list = []
    read = contextvars.copy_context().run  # the thread's events reach the test's listener
    reader = threading.Thread(target=read, args=(lambda: found.append(store.read("kk3")),))
    reader.start()
    reader.join(timeout=10)  # a FIFO would make a plain read wait for a writer forever
    assert not reader.is_alive() and found == [None]
    reasons = [e.reason for e in events if type(e).__name__ == "CacheCorrupt"]
    assert reasons == ["a symbolic link", "not a regular file"]


def test_a_block_larger_than_the_model_s_block_is_not_read(tmp_path, events):
    store = BlockStore(CacheDir(tmp_path, 10**12), "m", layout=LAYOUT)
    store.save(["k1"], {"k1": tensors(1)}, 8)
    store.close()
    path = block_path(tmp_path, "k1")
    with open(path, "r+b") as grown:
        grown.truncate(3 << 30)  # sparse: 3 GiB that take no room
    assert store.read("k1") is None and not path.exists()
    [corrupt] = [e for e in events if type(e).__name__ == "CacheCorrupt"]
    assert "more than a block takes" in corrupt.reason


def test_the_cache_is_private_to_the_gateway_s_user(tmp_path):
    old = os.umask(0o022)
    try:
        cache = tmp_path / "kv"
        store = BlockStore(CacheDir(cache, 10**9), "m")
        store.save(["k1"], {"k1": tensors(1)}, 8)
        store.close()
    finally:
        os.umask(old)
    path = block_path(cache, "k1")
    modes = [p.stat().st_mode & 0o777 for p in (cache, path.parent, path)]
    assert modes == [0o700, 0o700, 0o600]
