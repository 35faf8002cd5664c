"""CTranslate2 Whisper → MLX: converted once into `cache_dir/ct2/<sha256 of model.bin>/`,
as a GGUF is (engines/sources/gguf.py): built in a temp dir beside it and published by one
rename, its marker recording the converter version and sampled checksums, so a damaged or
stale entry is rebuilt."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from engines.errors import SourceError
from engines.sources.ct2_file import CT2FormatError
from engines.sources.ct2_whisper import CT2_FILES, convert_ct2_whisper
from engines.sources.gguf import _hash_file, clean_stale_temps, sampled_digest

CONVERTER_VERSION = 1
MARKER = "mlx-gateway.json"


def _intact(out: Path) -> bool:
    try:
        marker = json.loads((out / MARKER).read_text())
        return marker["converter_version"] == CONVERTER_VERSION and all(
            (out / name).stat().st_size == f["size"]
            and sampled_digest(out / name) == f["sampled_sha256"]
            for name, f in marker["files"].items()
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def check_ct2_dir(model_id: str, source: Path) -> None:
    """The cheap check of a CTranslate2 directory (no conversion): the files it reads."""
    missing = [name for name in CT2_FILES if not (source / name).is_file()]
    if missing:
        raise SourceError(
            model_id, str(source), f"a CTranslate2 checkpoint missing {', '.join(missing)}"
        )


def convert_ct2(model_id: str, source: Path, cache_dir: Path) -> Path:
    """The MLX Whisper directory for the CTranslate2 checkpoint directory `source`."""
    root = cache_dir / "ct2"
    clean_stale_temps(root)
    try:
        final = root / _hash_file(source / "model.bin")
    except OSError as e:
        raise SourceError(
            model_id, str(source), f"model.bin unreadable: {e.strerror or e}"
        ) from None
    if _intact(final):
        return final
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        convert_ct2_whisper(source, tmp)
        files = {
            f.name: {"size": f.stat().st_size, "sampled_sha256": sampled_digest(f)}
            for f in tmp.iterdir()
        }
        marker = {"converter_version": CONVERTER_VERSION, "source": str(source), "files": files}
        (tmp / MARKER).write_text(json.dumps(marker, indent=2))
        if final.exists():  # damaged or stale: replaced whole
            shutil.rmtree(final, ignore_errors=True)
        try:
            tmp.rename(final)
            tmp = None
        except OSError:
            if not _intact(final):  # another converter's, complete, is as good as ours
                raise
        return final
    except CT2FormatError as e:
        raise SourceError(model_id, str(source / "model.bin"), str(e)) from None
    except (OSError, RuntimeError, ValueError) as e:
        raise SourceError(model_id, str(source), f"converting into {root}: {e}") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
