"""The disk tier's read-or-prefill rates (`Worth`) kept across restarts, beside the blocks.

A fresh engine knows neither its prefill tokens/s nor the disk's bytes/s, and tries the
disk once to learn them: on a machine where the disk does not pay (an H200 prefills 31.5k
tokens sooner than it reads their 4 GiB back) that one try costs a whole request 2.5x.
So the rates a model measured are written when it unloads, to one small JSON file per
salt (the model's files, dtype, kv_bits and platform: the rates of that model there), and
read when it loads again. A file that cannot be read or makes no sense is ignored with
`cache_rates_ignored`: the engine measures again, as a fresh one would.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from engines.log import emit
from engines.private_files import NO_FOLLOW, create_private
from schemas.events import CacheRatesIgnored

PREFIX = "rates-"  # at the top of the directory: the blocks' shard folders never hold it
MAX_BYTES = 4096  # three numbers and a model's name; a larger file is not ours


def rates_path(root: Path, salt: bytes) -> Path:
    return root / f"{PREFIX}{salt[:16].hex()}.json"


def read_rates(path: Path, model: str) -> dict[str, float] | None:
    """`{prefill_tps, disk_bps, block_bytes}` as last written, or None: no file yet, or one
    ignored (reported) because it is not what `write_rates` writes."""
    try:
        # Where it is (never through a link), and no more of it than such a file holds.
        with open(os.open(path, os.O_RDONLY | NO_FOLLOW), "rb") as file:
            data = json.loads(file.read(MAX_BYTES + 1))  # cut short: not JSON
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as error:
        return _ignored(path, model, f"unreadable: {type(error).__name__}")
    if not isinstance(data, dict):
        return _ignored(path, model, "not a JSON object")
    rates = {}
    for name in ("prefill_tps", "disk_bps", "block_bytes"):
        value = data.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return _ignored(path, model, f"{name} missing or not a number")
        if not (math.isfinite(value) and value > 0):
            return _ignored(path, model, f"{name} is {value}, not a positive number")
        rates[name] = value
    return rates


def write_rates(path: Path, model: str, rates: dict[str, float]) -> None:
    """Write `rates` under a temporary name and rename it into place: a reader (this
    gateway's next load, another sharing the directory) sees a whole file or the last one.
    A failure (disk full, read-only) is not reported here: the blocks' writer reports it."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        with open(create_private(temporary), "w") as out:  # 0600, as the blocks
            out.write(json.dumps({"model": model, **rates}))
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)


def _ignored(path: Path, model: str, reason: str) -> None:
    emit(CacheRatesIgnored(model=model, path=str(path), reason=reason), level="warning")
    return None
