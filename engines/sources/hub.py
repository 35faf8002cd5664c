"""Hugging Face sources: `hf:ORG/REPO[@REVISION]` and `hf:ORG/REPO/FILE.gguf[@REVISION]`.

The real `huggingface_hub` client does every transfer, into the standard cache (`HF_HOME`,
`HF_HUB_CACHE`; `HF_ENDPOINT` honoured), verifying sizes and ETags as it always does. This
module decides what to fetch (only what the engine reads), resolves a branch to its commit,
finds a snapshot in the cache without the network, and turns the library's failures into
one `SourceError` with a reason a person can act on.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path
from typing import NamedTuple

from engines.errors import SourceError
from engines.sources.hub_client import Progress, describe_failure, meter
from engines.sources.kokoro_dir import check_kokoro_dir, is_kokoro_dir
from engines.sources.layout import check_model_dir

HUB_PREFIX = "hf:"
DEFAULT_REVISION = "main"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_REVISION = re.compile(r"^[A-Za-z0-9][\w.\-/]*$")  # becomes a path under the cache's refs/
# What the engines read: config, tokenizer files, chat template, safetensors weights and
# their index (mlx-lm's own list, without its *.py: no remote code runs here); and a Kokoro
# repository's weights and voice packs (prince-canuma/Kokoro-82M: kokoro-v1_0.safetensors,
# voices/*.safetensors), named so no other repository's extra weights come along.
ALLOW_PATTERNS = (
    "*.json",
    "model*.safetensors",
    "kokoro*.safetensors",
    "voices/*.safetensors",
    "*.jinja",
    "*.txt",
    "*.jsonl",
    "*.tiktoken",
    "tokenizer.model",
    "tiktoken.model",
)
_TRUE = {"1", "true", "yes", "on"}
CHUNK_BYTES = 1 << 20  # read per progress report, so a stop lands within one


class HubSpec(NamedTuple):
    """A parsed `hf:` source: the repository, one file in it (a GGUF) or None, a revision."""

    repo: str
    file: str | None
    revision: str

    @property
    def pinned(self) -> bool:
        """A full commit hash: the snapshot can never change under it."""
        return bool(COMMIT.fullmatch(self.revision))


class Snapshot(NamedTuple):
    """A hub source on disk: the directory (or GGUF file) and the commit it holds."""

    path: Path
    commit: str
    size: int  # bytes of the files the engine reads
    downloaded: int = 0  # bytes fetched by the call that returned this


def is_hub_source(source: str | None) -> bool:
    return bool(source) and source.startswith(HUB_PREFIX)


def parse_hub_source(model_id: str, source: str) -> HubSpec:
    """`hf:ORG/REPO[/FILE.gguf][@REVISION]` -> HubSpec; SourceError naming the form if not."""
    body = source[len(HUB_PREFIX) :]
    body, at, revision = body.rpartition("@") if "@" in body else (body, "", "")
    if at and not _REVISION.fullmatch(revision) or ".." in revision.split("/"):
        raise SourceError(model_id, source, "a revision is a branch, tag or commit after '@'")
    org, _, rest = body.partition("/")
    name, _, file = rest.partition("/")
    repo = f"{org}/{name}"
    if not _REPO.fullmatch(repo) or ".." in repo:
        raise SourceError(model_id, source, "expected hf:ORG/REPO[@REVISION]")
    parts = file.split("/")
    if file and (not file.lower().endswith(".gguf") or ".." in parts or "" in parts):
        raise SourceError(
            model_id, source, "a file inside a repository must be a .gguf (hf:ORG/REPO/FILE.gguf)"
        )
    return HubSpec(repo, file or None, revision or DEFAULT_REVISION)


def offline_env() -> bool:
    """HF_HUB_OFFLINE=1 (huggingface_hub's own switch) is set."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def hub_cache_dir() -> Path:
    """The standard Hugging Face cache: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
    `~/.cache/huggingface/hub` (read now, not when huggingface_hub was imported)."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def _storage(spec: HubSpec) -> Path:
    return hub_cache_dir() / ("models--" + spec.repo.replace("/", "--"))


def cached_snapshot(model_id: str, spec: HubSpec) -> Snapshot | None:
    """The complete snapshot for `spec` in the cache, found without the network; else None.

    A branch is read through the cache's `refs/` (the commit the last download resolved).
    Complete means every file the engine reads is there: config, tokenizer, every weight
    shard the index lists (files are fetched smallest first, so the weights come last).
    """
    commit = spec.revision if spec.pinned else _cached_commit(spec)
    if commit is None:
        return None
    snapshot = _storage(spec) / "snapshots" / commit
    if spec.file:
        path = snapshot / spec.file
        return Snapshot(path, commit, path.stat().st_size) if path.is_file() else None
    if not snapshot.is_dir() or model_dir_problem(model_id, snapshot) is not None:
        return None
    files = [p for p in snapshot.rglob("*") if _wanted(str(p.relative_to(snapshot)))]
    return Snapshot(snapshot, commit, sum(p.stat().st_size for p in files if p.is_file()))


def _cached_commit(spec: HubSpec) -> str | None:
    """The commit the cache's `refs/` says a branch or tag resolved to last; None if none."""
    try:
        commit = (_storage(spec) / "refs" / spec.revision).read_text().strip()
    except OSError:
        return None
    return commit if COMMIT.fullmatch(commit) else None


def model_dir_problem(model_id: str, path: Path) -> str | None:
    """What keeps `path` from being a complete model directory, or None when it is one."""
    import json

    try:
        if is_kokoro_dir(path):
            check_kokoro_dir(model_id, path)
            return None
        check_model_dir(model_id, path)
        index = path / "model.safetensors.index.json"
        if index.is_file():
            shards = set(json.loads(index.read_text())["weight_map"].values())
            if absent := sorted(s for s in shards if not (path / s).is_file()):
                return f"missing weight shards {', '.join(absent)}"
    except SourceError as error:
        return error.reason
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"unreadable index: {error}"
    return None


def _wanted(path: str) -> bool:
    return any(fnmatch(path, pattern) for pattern in ALLOW_PATTERNS)


def cache_status(model_id: str, source: str) -> str:
    """`cached=COMMIT (SIZE)` or `cached=no`, read from the cache alone (for `gateway check`)."""
    try:
        found = cached_snapshot(model_id, parse_hub_source(model_id, source))
    except SourceError as error:
        return f"cached=no ({error.reason})"
    if found is None:
        return "cached=no (run `gateway pull`, or serve downloads it at first load)"
    return f"cached={found.commit[:12]} ({found.size / 1e6:.1f} MB)"


class NotCached(SourceError):
    """An `hf:` source not downloaded yet: serve fetches it at load, `gateway pull` now."""


def locate(model_id: str, source: str) -> Snapshot:
    """The cached snapshot of an `hf:` source; SourceError (`NotCached`) when it is not there."""
    spec = parse_hub_source(model_id, source)
    found = cached_snapshot(model_id, spec)
    if found is None:
        raise NotCached(model_id, source, "not in the Hugging Face cache yet")
    return found


def fetch(
    model_id: str,
    source: str,
    *,
    token: str | None = None,
    offline: bool = False,
    progress: Progress | None = None,
    bar: Callable[[str], type] | None = None,
    refresh: bool = False,
) -> Snapshot:
    """Make `source` local: the cached snapshot when there is one, else download it.

    `refresh` (`gateway pull`, the admin's `/api/pull`) asks the Hub what a branch points at
    now even when a snapshot is cached; without it a branch stays at the commit the cache
    last resolved it to (a half-downloaded one is finished), and only a branch never
    fetched is resolved. `progress` gets each file's bytes as they arrive; `bar(file)` is
    the progress-bar class for one file (default: huggingface_hub's own tqdm).
    Offline (`offline`, or HF_HUB_OFFLINE=1) fetches nothing. Raises `SourceError`.
    """
    spec = parse_hub_source(model_id, source)
    found = cached_snapshot(model_id, spec)
    if found is not None and (spec.pinned or not refresh):
        return found
    if offline or offline_env():
        if found is not None:
            return found
        raise SourceError(
            model_id,
            source,
            "not in the Hugging Face cache and the gateway is offline (server.offline or "
            "HF_HUB_OFFLINE=1); run `gateway pull` with network access first",
        )
    if not refresh and not spec.pinned and (known := _cached_commit(spec)):
        spec = spec._replace(revision=known)  # finish what the branch last resolved to
    try:
        return _download(model_id, spec, token, progress, bar)
    except SourceError:
        raise
    except Exception as error:  # every library failure becomes one reason, for this model only
        raise SourceError(model_id, source, describe_failure(error, token)) from None


def _download(
    model_id: str,
    spec: HubSpec,
    token: str | None,
    progress: Progress | None,
    bar: Callable[[str], type] | None,
) -> Snapshot:
    from huggingface_hub import HfApi, constants, hf_hub_download

    # The transport logs every request at INFO: lines that would break the JSON event stream.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    # A transfer is stopped (its client left, its model was removed) from the progress
    # callback, which runs once per chunk read: 1 MiB instead of the library's 10 MiB makes
    # that a moment even on a slow link, not many seconds.
    constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, CHUNK_BYTES)

    endpoint = os.environ.get("HF_ENDPOINT") or None
    api = HfApi(endpoint=endpoint, token=token)
    # The Hub API calls wait forever unless given a timeout, and a stalled Hub would hold
    # this thread for good: HF_HUB_ETAG_TIMEOUT (default 10 s) is the library's own knob for
    # such small requests (file bodies wait at most HF_HUB_DOWNLOAD_TIMEOUT between bytes).
    # The model info with its files' metadata (the listing takes no timeout) also resolves
    # a branch or tag to the commit it points at now.
    info = api.model_info(
        spec.repo, revision=spec.revision, files_metadata=True,
        timeout=constants.HF_HUB_ETAG_TIMEOUT,
    )  # fmt: skip
    commit = spec.revision if spec.pinned else info.sha
    tree = [_File(s.rfilename, s.size, s.lfs) for s in info.siblings or []]
    if spec.file:
        files = [f for f in tree if f.path == spec.file]
        if not files:
            raise SourceError(model_id, _name(spec), f"404: no file {spec.file!r} at {commit}")
    else:
        files = [f for f in tree if _wanted(f.path)]
        if not any(f.path.endswith(".safetensors") for f in files):
            ggufs = sorted(f.path for f in tree if f.path.lower().endswith(".gguf"))
            hint = f"; name one GGUF: hf:{spec.repo}/{ggufs[0]}" if ggufs else ""
            raise SourceError(model_id, _name(spec), f"no safetensors weights at {commit}{hint}")
    cache = hub_cache_dir()
    snapshot = _storage(spec) / "snapshots" / commit
    missing = [f for f in files if not (snapshot / f.path).is_file()]
    _check_disk(model_id, spec, cache, sum(f.size or 0 for f in missing))
    for f in sorted(missing, key=lambda f: (f.path.endswith(".safetensors"), f.size or 0)):
        hf_hub_download(
            spec.repo,
            f.path,
            revision=commit,
            cache_dir=cache,
            endpoint=endpoint,
            token=token,
            tqdm_class=meter(f.path, progress, _digest(f)) if progress else (bar and bar(f.path)),
        )
    if not spec.pinned:
        _write_ref(_storage(spec), spec.revision, commit)
    found = cached_snapshot(model_id, spec._replace(revision=commit))
    if found is None:
        problem = model_dir_problem(model_id, snapshot) or "incomplete"
        raise SourceError(model_id, _name(spec), f"downloaded snapshot {commit}: {problem}")
    return found._replace(downloaded=sum(f.size or 0 for f in missing))


class _File(NamedTuple):
    """One file of a commit, as the Hub lists it."""

    path: str
    size: int | None
    lfs: object | None  # huggingface_hub's BlobLfsInfo: `sha256`, for the weights


def _digest(file: _File) -> str | None:
    """An LFS file's SHA-256 as `sha256:HEX`; None for small files kept in git itself."""
    return f"sha256:{file.lfs.sha256}" if file.lfs is not None else None


def _name(spec: HubSpec) -> str:
    file = f"/{spec.file}" if spec.file else ""
    return f"{HUB_PREFIX}{spec.repo}{file}@{spec.revision}"


def _check_disk(model_id: str, spec: HubSpec, cache: Path, needed: int) -> None:
    """Refuse before the first byte when the cache's disk cannot hold what is missing."""
    probe = cache
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise SourceError(
            model_id,
            _name(spec),
            f"disk full: needs {needed / 1e6:.1f} MB, {free / 1e6:.1f} MB free in {cache}",
        )


def _write_ref(storage: Path, revision: str, commit: str) -> None:
    """Record what the branch resolved to, as huggingface_hub does (read back offline)."""
    ref = storage / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    tmp = ref.with_name(f".{ref.name}.{os.getpid()}.tmp")
    tmp.write_text(commit)
    os.replace(tmp, ref)
