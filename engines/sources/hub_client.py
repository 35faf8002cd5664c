"""What the huggingface_hub client gets from us and gives back: a progress-bar class that
reports each file's bytes to a callback, and its failures put into one line of words."""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from typing import NamedTuple


class FileProgress(NamedTuple):
    """One file's download, as huggingface_hub reports it."""

    file: str
    done: int
    total: int | None
    rate: float  # bytes per second since this file's download started
    digest: str | None = None  # `sha256:HEX` of an LFS file (the weights), as the Hub lists it


Progress = Callable[[FileProgress], None]


def describe_failure(error: BaseException, token: str | None = None) -> str:
    """One line saying why a download failed: network, gated (401/403), 404, disk full."""
    from huggingface_hub import errors as hub

    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, hub.GatedRepoError):
        if status == 403 or (status is None and token):  # a token was sent and refused
            return "403 gated repository: the token has no access to it (accept its terms)"
        return "401 gated repository: accept its terms on the Hub and set hf_token/HF_TOKEN"
    if isinstance(error, hub.RevisionNotFoundError):
        return f"{status or 404} revision not found"
    if isinstance(error, hub.RemoteEntryNotFoundError):
        return f"{status or 404} file not found in the repository"
    if isinstance(error, hub.RepositoryNotFoundError):
        if status == 401:
            return "401 repository not found or private: check the name, or set hf_token/HF_TOKEN"
        return f"{status or 404} repository not found"
    if isinstance(error, hub.HfHubHTTPError) and status is not None:
        return f"HTTP {status} from the Hub"
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return f"disk full: {error.strerror}"
    if isinstance(error, hub.OfflineModeIsEnabled):
        return "offline (HF_HUB_OFFLINE=1): not in the cache; run `gateway pull` first"
    if isinstance(error, hub.LocalEntryNotFoundError | ConnectionError | TimeoutError):
        return f"network: the Hub could not be reached ({_first_line(error)})"
    name = type(error).__module__.split(".")[0]
    if name.startswith("httpx"):  # the transport's connect, read and protocol errors
        return f"network: {type(error).__name__}: {_first_line(error)}"
    return f"{type(error).__name__}: {_first_line(error)}"


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:200]


def meter(file: str, progress: Progress, digest: str | None = None) -> type:
    """A progress-bar class huggingface_hub can drive, reporting to `progress` instead of a
    terminal (it is not a tqdm subclass, so the library calls it with plain arguments)."""

    class Meter:
        def __init__(self, *_, total: int | None = None, initial: int = 0, **__) -> None:
            self.total, self.n = total, initial
            self._first, self._start = initial, time.monotonic()
            self._report()

        def update(self, n: int | float | None = 1) -> None:
            self.n += int(n or 0)
            self._report()

        def _report(self) -> None:
            elapsed = time.monotonic() - self._start
            rate = (self.n - self._first) / elapsed if elapsed > 0 else 0.0
            progress(FileProgress(file, self.n, self.total, max(rate, 0.0), digest))

        def __enter__(self) -> Meter:
            return self

        def __exit__(self, *_) -> None:
            self.close()

        def close(self) -> None:
            pass

        def update_transfer(self, n: int | float | None = 1) -> None:
            pass

        def set_postfix_str(self, *_, **__) -> None:
            pass

        def refresh(self, *_, **__) -> None:
            pass

    return Meter
