"""hf: sources through the real huggingface_hub client, against a local stand-in for the Hub."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from hub_server import FakeHub, Repo, smollm2_files

from engines.errors import SourceError
from engines.sources.hub import cache_status, fetch, parse_hub_source
from engines.sources.resolve import check_source

A, B = "a" * 40, "b" * 40
TOKEN = "hf_gatedtoken_0123456789"
WANTED = {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}


@pytest.fixture(scope="module")
def hub():
    files, gguf = smollm2_files()
    extra = {"README.md": files["config.json"], "pytorch_model.bin": files["config.json"]}
    repos = {
        "org/smol": Repo(
            {A: dict(files), B: {**files, **extra, "smol.Q4_1.gguf": gguf}}, {"main": B}
        ),
        "org/gated": Repo({A: dict(files)}, {"main": A}, gated_tokens={TOKEN}),
    }
    with FakeHub(repos) as server:
        yield server


@pytest.fixture
def home(hub, tmp_path, monkeypatch) -> Path:
    """A fresh Hugging Face cache, the client pointed at the stand-in, no token, online."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub.requests.clear()
    hub.repos["org/smol"].branches["main"] = B
    return tmp_path / "hf" / "hub"


def fetched(hub) -> set[str]:
    return {path.rsplit("/", 1)[-1] for path, _ in hub.file_requests("GET")}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sources_parse_and_bad_ones_say_the_form() -> None:
    assert parse_hub_source("m", "hf:org/repo") == ("org/repo", None, "main")
    assert parse_hub_source("m", f"hf:org/repo@{A}").pinned
    assert parse_hub_source("m", "hf:org/repo/sub/x.Q4.gguf@v1") == (
        "org/repo",
        "sub/x.Q4.gguf",
        "v1",
    )
    bad_ones = ["hf:repo", "hf:org/repo@", "hf:org/repo/weights.bin", "hf:../x", "hf:org/re po"]
    for bad in [
        *bad_ones,
        "hf:org/repo@../../../etc",
        "hf:org/repo@/abs",
        "hf:org/repo@a b",
        "hf:org/repo//etc/x.gguf",
        "hf:org/repo/a/../../x.gguf",
    ]:
        with pytest.raises(SourceError, match="hf:"):
            parse_hub_source("m", bad)


def test_first_download_fetches_only_what_the_engine_reads_and_reports_progress(hub, home) -> None:
    seen = []
    snap = fetch("m", "hf:org/smol", progress=seen.append)
    assert snap.commit == B and snap.path == home / "models--org--smol" / "snapshots" / B
    assert fetched(hub) == WANTED  # no README, no .bin, no GGUF
    assert (home / "models--org--smol" / "refs" / "main").read_text() == B
    weights = [p for p in seen if p.file == "model.safetensors"]
    assert weights[-1].done == weights[-1].total == (snap.path / "model.safetensors").stat().st_size
    assert snap.downloaded == snap.size > weights[-1].total
    assert check_source("m", "hf:org/smol") == snap.path  # what the engine's load reads

    hub.requests.clear()  # a second start: from the cache, not a single request
    again = fetch("m", "hf:org/smol", progress=seen.append)
    assert again.path == snap.path and again.downloaded == 0 and hub.requests == []
    assert cache_status("m", "hf:org/smol") == f"cached={B[:12]} ({snap.size / 1e6:.1f} MB)"


def test_an_interrupted_download_resumes_where_it_stopped(hub, home) -> None:
    cut = 20_000_000
    hub.drop_after["model.safetensors"] = cut
    snap = fetch("m", "hf:org/smol")
    gets = [h for p, h in hub.file_requests("GET") if p.endswith("/model.safetensors")]
    assert len(gets) == 2 and "range" not in {k.lower() for k in gets[0]}
    # It asks for the rest from the last whole chunk it wrote (huggingface_hub's 10 MiB).
    offset = int({k.lower(): v for k, v in gets[1].items()}["range"].removeprefix("bytes=")[:-1])
    assert 0 < offset <= cut
    original = smollm2_files()[0]["model.safetensors"]
    assert sha256(snap.path / "model.safetensors") == sha256(original)


def test_a_branch_stays_as_cached_until_a_pull_refreshes_it(hub, home) -> None:
    assert fetch("m", "hf:org/smol").commit == B
    hub.repos["org/smol"].branches["main"] = A  # the branch moves on the Hub
    hub.requests.clear()
    assert fetch("m", "hf:org/smol").commit == B and hub.requests == []
    assert fetch("m", "hf:org/smol", refresh=True).commit == A  # what `gateway pull` does
    assert (home / "models--org--smol" / "refs" / "main").read_text() == A


def test_a_commit_pin_downloads_that_commit_without_asking_for_a_branch(hub, home) -> None:
    snap = fetch("m", f"hf:org/smol@{A}")
    assert snap.commit == A and snap.path.name == A
    paths = [p for _, p, _ in hub.requests]
    # The Hub is asked about the commit itself (its files), never what a branch says.
    assert all(p.endswith(f"/revision/{A}") for p in paths if "/revision/" in p)
    assert all(f"/resolve/{A}/" in p for p, _ in hub.file_requests("GET"))
    assert not (home / "models--org--smol" / "refs").exists()


def test_one_gguf_of_a_repository(hub, home) -> None:
    snap = fetch("m", "hf:org/smol/smol.Q4_1.gguf")
    assert fetched(hub) == {"smol.Q4_1.gguf"} and snap.path.name == "smol.Q4_1.gguf"
    assert sha256(snap.path) == sha256(smollm2_files()[1])


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("hf:org/missing", "404 repository not found"),
        ("hf:org/smol@no-such-branch", "404 revision not found"),
        ("hf:org/smol/absent.gguf", "404: no file 'absent.gguf'"),
    ],
)
def test_not_found(hub, home, source, reason) -> None:
    with pytest.raises(SourceError) as error:
        fetch("m", source)
    assert error.value.reason.startswith(reason)


def test_a_gated_repository_needs_a_token_with_access(hub, home, monkeypatch) -> None:
    with pytest.raises(SourceError, match="401 gated repository: .* set hf_token/HF_TOKEN"):
        fetch("m", "hf:org/gated")
    with pytest.raises(SourceError, match="403 gated repository: the token has no access"):
        fetch("m", "hf:org/gated", token="hf_wrong_token_000000")
    assert fetch("m", "hf:org/gated", token=TOKEN).commit == A
    sent = {h.get("authorization") or h.get("Authorization") for _, h in hub.file_requests("GET")}
    assert sent == {f"Bearer {TOKEN}"}


def test_offline_fetches_nothing_and_says_to_pull(hub, home, monkeypatch) -> None:
    with pytest.raises(SourceError, match="offline .* run `gateway pull`"):
        fetch("m", "hf:org/smol", offline=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SourceError, match="HF_HUB_OFFLINE=1"):
        fetch("m", "hf:org/smol")
    assert hub.requests == []
    monkeypatch.delenv("HF_HUB_OFFLINE")
    fetch("m", "hf:org/smol")
    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert fetch("m", "hf:org/smol", refresh=True).commit == B and hub.requests == []


def test_an_unreachable_hub_is_a_network_failure(home, monkeypatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on discard
    with pytest.raises(SourceError) as error:
        fetch("m", "hf:org/smol")
    assert error.value.reason.startswith("network: ")


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs: a real full disk (needs the right to mount; skipped without it)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_disk_too_small_is_refused_before_the_first_byte(
    hub, home, tiny_disk, monkeypatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tiny_disk))
    with pytest.raises(SourceError) as error:
        fetch("m", "hf:org/smol")
    assert error.value.reason.startswith("disk full: needs 101.9 MB, 1.0 MB free")
    assert hub.file_requests("GET") == []


def test_a_download_stopped_midway_keeps_its_finished_files(hub, home) -> None:
    def stop_in_the_weights(progress) -> None:  # as a stopping gateway does
        if progress.file == "model.safetensors" and progress.done > 0:
            raise RuntimeError("stopped")

    with pytest.raises(SourceError, match="stopped"):
        fetch("m", "hf:org/smol", progress=stop_in_the_weights)
    assert check_source_fails("hf:org/smol")  # not complete: not taken for a model
    hub.requests.clear()
    snap = fetch("m", "hf:org/smol")
    assert fetched(hub) == {"model.safetensors"} and snap.commit == B


def check_source_fails(source: str) -> bool:
    try:
        check_source("m", source)
    except SourceError:
        return True
    return False
