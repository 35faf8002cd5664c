"""The name a key without `label` goes by: `key:` and 16 hex digits of an HMAC-SHA256 of the
key under a secret of this `state_dir` (`key-labels.secret`, 32 random bytes, 0600).

A key's Activity rows, captured bodies and spent budget are kept under its name, so the
name must follow the key, not its place in `server.api_keys` (removing one key must not
hand another its history), and it must say nothing of the key: a plain hash of a short key
could be reversed offline from any log line, a keyed one cannot without the secret. Gateways
sharing a `state_dir` share the secret, so they name each key alike. With `state_dir: null`
(or one that cannot be written) the secret is the process's own: names then hold for as
long as the process, as everything else it keeps does. No HTTP here.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

SECRET_FILE = "key-labels.secret"
SECRET_BYTES = 32
PREFIX = "key:"  # `:` is no label's (schemas/config.py `Label`): no label can be a name's


class KeyNames:
    """Names keys by a keyed hash of each (one `KeyNames` per app)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._names: dict[str, str] = {}  # key -> name: configured keys only, few

    def label(self, key: str) -> str:
        """The key's name: the same for the same key and secret, whatever its place."""
        name = self._names.get(key)
        if name is None:
            digest = hmac.new(self._secret, key.encode(), hashlib.sha256).hexdigest()
            name = self._names[key] = PREFIX + digest[:16]
        return name


def key_names(state: Path | None) -> KeyNames:
    """The names of this `state_dir` (its secret read, or made on first use)."""
    if state is not None:
        try:
            return KeyNames(_secret_of(state))
        except OSError:
            pass  # the process's own secret: names last as long as the process
    return KeyNames(secrets.token_bytes(SECRET_BYTES))


def _secret_of(state: Path) -> bytes:
    path = state / SECRET_FILE
    if not path.exists():
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Written whole beside it, then linked into place: another gateway starting on the
        # same state_dir at once reads either nothing yet or the whole secret, never half.
        draft = state / f".{SECRET_FILE}.{os.getpid()}"
        descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(descriptor, "wb") as out:
                out.write(secrets.token_bytes(SECRET_BYTES))
                out.flush()
                os.fsync(out.fileno())
            os.link(draft, path)
        except FileExistsError:
            pass  # another gateway made it first: its secret is ours
        finally:
            draft.unlink(missing_ok=True)
    secret = path.read_bytes()
    if len(secret) < SECRET_BYTES:
        raise OSError(f"{path}: holds {len(secret)} bytes, not a secret of {SECRET_BYTES}")
    return secret
