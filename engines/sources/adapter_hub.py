"""`hf:ORG/REPO[@REVISION]` as an adapter's `path`: the repository's adapter files
(`adapter_config.json` and mlx-lm's or PEFT's weights, nothing else) in the standard
Hugging Face cache, found there without the network (`gateway check`, a reload) or
downloaded by the real `huggingface_hub` client when the base loads. HF_HUB_OFFLINE=1
downloads nothing."""

from __future__ import annotations

from pathlib import Path

from engines.errors import SourceError
from engines.sources.adapter_files import CONFIG, MLX_LM_WEIGHTS, PEFT_WEIGHTS
from engines.sources.hub import COMMIT, hub_cache_dir, offline_env, parse_hub_source
from engines.sources.hub_client import describe_failure

ADAPTER_FILES = (CONFIG, MLX_LM_WEIGHTS, PEFT_WEIGHTS)


def _spec(owner: str, source: str):
    spec = parse_hub_source(owner, source)
    if spec.file is not None:
        raise SourceError(owner, source, "an adapter is a repository: hf:ORG/REPO[@REVISION]")
    return spec


def cached_adapter(owner: str, source: str) -> Path | None:
    """The cached snapshot holding the adapter's files, or None; `SourceError` for a
    malformed `hf:` form. A branch or tag is read through the cache's `refs/`."""
    spec = _spec(owner, source)
    storage = hub_cache_dir() / ("models--" + spec.repo.replace("/", "--"))
    commit = spec.revision
    if not COMMIT.fullmatch(commit):
        try:
            commit = (storage / "refs" / spec.revision).read_text().strip()
        except OSError:
            return None
    snapshot = storage / "snapshots" / commit
    weights = (snapshot / MLX_LM_WEIGHTS).is_file() or (snapshot / PEFT_WEIGHTS).is_file()
    return snapshot if (snapshot / CONFIG).is_file() and weights else None


def adapter_dir(owner: str, source: str, token: str | None = None) -> Path:
    """The adapter's directory: cached, else downloaded now (its three files at most)."""
    found = cached_adapter(owner, source)
    if found is not None:
        return found
    if offline_env():
        raise SourceError(
            owner, source, "not in the Hugging Face cache and HF_HUB_OFFLINE=1 is set"
        )
    spec = _spec(owner, source)
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(
            spec.repo,
            revision=spec.revision,
            allow_patterns=list(ADAPTER_FILES),
            cache_dir=hub_cache_dir(),
            token=token,
        )
    except Exception as error:  # every library failure becomes one reason, this adapter's
        raise SourceError(owner, source, describe_failure(error, token)) from None
    return Path(path)
