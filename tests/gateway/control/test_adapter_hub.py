"""`hf:ORG/REPO[@REVISION]` adapter paths, offline: the form is checked at `file:line:col`
naming `adapters`; a repository not in the Hugging Face cache passes `gateway check` (the
base's load downloads it) but for `server.offline`, and with HF_HUB_OFFLINE=1 fails that
load naming the adapter;
a cached one is read and checked as a directory is, and served from the cache."""

from __future__ import annotations

import json

import pytest

from engines.errors import ModelUnavailable
from schemas.config import AdapterConfig
from tests.engines.llm.test_adapters import batched, fused, greedy, tiny_llama, write_adapter
from tests.gateway.control.test_adapter_check import config_file, errors

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty Hugging Face cache of this test's own."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def cache_adapter(hub, repo: str, rank_in_config: int | None = None):
    """An adapter as huggingface_hub caches a download of `repo` at `main`."""
    storage = hub / ("models--" + repo.replace("/", "--"))
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text(COMMIT)
    snapshot = write_adapter(storage / "snapshots" / COMMIT, 0, dora=False)
    if rank_in_config is not None:
        config = json.loads((snapshot / "adapter_config.json").read_text())
        config["lora_parameters"]["rank"] = rank_in_config
        (snapshot / "adapter_config.json").write_text(json.dumps(config))
    return snapshot


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        ("hf:not-a-repo", "expected hf:ORG/REPO[@REVISION]"),
        ("hf:org/repo/adapters.gguf", "an adapter is a repository"),
    ],
)
def test_a_malformed_hf_path_is_named_at_its_path(tmp_path, hub, path, refusal):
    file = config_file(tmp_path, f"{{id: tone, path: '{path}'}}")
    (error,) = [e for e in errors(file) if "adapters" in e]
    assert error.startswith(f"{file}:6:26: models[0].adapters[0].path: model 'base': adapter")
    assert refusal in error


def test_an_uncached_repo_passes_check_and_fails_an_offline_load_by_name(
    tmp_path, hub, monkeypatch
):
    from engines.llm.adapters import attach
    from gateway.control.config import load_config

    file = config_file(tmp_path, "{id: tone, path: 'hf:org/tone-lora'}")
    assert load_config(file, read_files=True).models[0].adapters[0].path == "hf:org/tone-lora"
    file.write_text("server: {offline: true}\n" + file.read_text())
    (error,) = [e for e in errors(file) if "adapters" in e]
    assert (
        "adapter 'tone': hf:org/tone-lora: not in the Hugging Face cache and server.offline"
        in error
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailable, match="adapter 'tone': hf:org/tone-lora: not in the"):
        attach("tiny", tiny_llama(), [AdapterConfig(id="tone", path="hf:org/tone-lora")], None)


def test_a_cached_repo_is_checked_and_served_from_the_cache(tmp_path, hub, monkeypatch):
    from engines.llm.adapters import attach

    bad = cache_adapter(hub, "org/bad-lora", rank_in_config=16)
    file = config_file(tmp_path, "{id: tone, path: 'hf:org/bad-lora'}")
    (error,) = [e for e in errors(file) if "adapters" in e]
    assert "adapter 'tone': hf:org/bad-lora:" in error and "the config says 16" in error
    assert str(bad) in error
    good = cache_adapter(hub, "org/tone-lora")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # served from the cache, no network asked
    model = tiny_llama()
    adapters = attach("tiny", model, [AdapterConfig(id="tone", path="hf:org/tone-lora")], None)
    prompt = [1, 5, 9, 33, 70]
    assert batched(model, adapters, [(prompt, 0)]) == [greedy(fused(good), prompt)]
