"""What a disk block's key means: the salt of a model's first block key.

A block's key hashes the key of the block before it with its own tokens, so a key names
the whole prefix up to it and any shared prefix finds its blocks. The first key is salted
with all that changes what the cache means: the weights' files (a hub blob's name is its
sha256), how they are held (dtype), `kv_bits`, the platform and this format.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

FORMAT = b"mlx-gateway-kv/1"
# Files whose content is the model's meaning; hashed by name, size and identity.
MEANING_SUFFIXES = (".safetensors", ".json", ".gguf")


def weights_identity(path: Path) -> bytes:
    """A digest of the model's files: names, sizes, mtimes, and where the Hub cache links
    them, the blob's name (its content's sha256). A changed file changes the salt."""
    digest = hashlib.blake2b(digest_size=16)
    files = [path] if path.is_file() else sorted(path.iterdir())
    for file in files:
        if not file.name.endswith(MEANING_SUFFIXES):
            continue
        stat = file.stat()
        real = os.path.realpath(file)
        digest.update(f"{file.name}|{Path(real).name}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return digest.digest()


def salt_of(path: Path, meaning: str) -> bytes:
    """The first key's salt: this format, the model's files (`weights_identity`) and
    `meaning`, how the cache is computed beyond the files (dtype, kv_bits, device)."""
    return hashlib.blake2b(FORMAT + weights_identity(path) + meaning.encode()).digest()
