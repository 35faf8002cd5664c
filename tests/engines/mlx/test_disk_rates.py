"""The disk tier's read-or-prefill rates survive the model's unload: a fresh engine where
the disk does not pay neither reads nor saves blocks, and a bad rates file is ignored."""

from __future__ import annotations

import json

import pytest

from engines.cache import CacheDir
from engines.mlx.cache.disk import BLOCK_TOKENS, DiskKV
from engines.mlx.cache.rates import PREFIX

MEANING = "float32|None|cpu"


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "model" / "model.safetensors"
    path.parent.mkdir()
    path.write_bytes(b"weights")
    return path.parent


def open_disk(root, weights, meaning: str = MEANING) -> DiskKV:
    return DiskKV.open(CacheDir(root, 1 << 30), "m", weights, meaning, layout={})


def fast_machine(disk: DiskKV) -> None:
    """An H200's rates on the 8B shape: 12k tokens/s of prefill, 800 MB/s of disk, 8 MiB a
    block (4 GiB of KV for 31.5k tokens)."""
    disk.worth.prefilled(31_500, 2.6)
    disk.worth.moved(800_000_000, 1.0)
    disk._block_bytes = 8 << 20


def test_the_rates_measured_are_read_back_by_the_next_load(tmp_path, weights, events):
    root = tmp_path / "kv"
    root.mkdir()
    first = open_disk(root, weights)
    assert first.worth.prefill_tps is None  # a fresh model: nothing measured, disk tried
    fast_machine(first)
    first.close()
    (written,) = root.glob(f"{PREFIX}*.json")
    assert json.loads(written.read_text())["model"] == "m"
    assert not list(root.glob("*.tmp"))

    again = open_disk(root, weights)
    assert again.worth.prefill_tps == pytest.approx(31_500 / 2.6)
    assert again.worth.disk_bps == 800_000_000 and again._block_bytes == 8 << 20
    # 500 blocks (32k tokens, 4 GiB) are prefilled sooner than read: not even looked up
    # past their presence, and no save copies them out of the model.
    tokens = 500 * BLOCK_TOKENS
    assert not again.worth.disk_pays(tokens, 500 * again._block_bytes)
    prompt = list(range(tokens + 1))
    keys = again.keys(prompt, 500)
    for key in keys:  # every block "on disk": the rates alone say no
        path = again.store.root / key[:2] / f"{key}.safetensors"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"")
    assert again.find(prompt, 0) is None
    assert not events  # no block was read (an empty file would be reported corrupt)
    again.close()


def test_rates_are_per_model_files_and_platform(tmp_path, weights):
    root = tmp_path / "kv"
    root.mkdir()
    first = open_disk(root, weights)
    fast_machine(first)
    first.close()
    elsewhere = open_disk(root, weights, "bfloat16|None|gpu (cuda)")
    assert elsewhere.worth.prefill_tps is None
    elsewhere.close()


@pytest.mark.parametrize(
    "text, reason",
    [
        ("{not json", "unreadable: JSONDecodeError"),
        ("[1, 2]", "not a JSON object"),
        ('{"prefill_tps": 1.0, "disk_bps": 2.0}', "block_bytes missing or not a number"),
        ('{"prefill_tps": -1, "disk_bps": 2.0, "block_bytes": 3}', "prefill_tps is -1"),
        ('{"prefill_tps": true, "disk_bps": 2.0, "block_bytes": 3}', "prefill_tps missing"),
    ],
)
def test_a_bad_rates_file_is_ignored_and_reported(tmp_path, weights, events, text, reason):
    root = tmp_path / "kv"
    root.mkdir()
    first = open_disk(root, weights)
    fast_machine(first)
    first.close()
    (path,) = root.glob(f"{PREFIX}*.json")
    path.write_text(text)
    again = open_disk(root, weights)
    assert again.worth.prefill_tps is None and again._block_bytes is None  # measured anew
    (ignored,) = events
    assert type(ignored).__name__ == "CacheRatesIgnored"
    assert ignored.path == str(path) and ignored.reason.startswith(reason)
    again.close()
