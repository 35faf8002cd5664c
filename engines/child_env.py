"""What a process the gateway starts inherits of its environment: what a program needs to run
and find its files, nothing that could hold a key (API keys, the admin key, HF_TOKEN stay in
the gateway). `engine: process` servers and a sharded model's ranks both start from this."""

from __future__ import annotations

import os

INHERITED = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
    "TMPDIR", "TMP", "TEMP", "XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE",
)  # fmt: skip


def inherited(*names: str, prefixes: tuple[str, ...] = ()) -> dict[str, str]:
    """`INHERITED`, `names`, and every `LC_*` (and `prefixes`) of this process's environment."""
    keep = set(INHERITED) | set(names)
    starts = ("LC_", *prefixes)
    return {k: v for k, v in os.environ.items() if k in keep or k.startswith(starts)}
