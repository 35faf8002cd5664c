"""The one load recipe of every MLX engine, and of bench/'s in-process references: a
resolved source opened by its library's loader (mlx-lm's, mlx-vlm's, a rank's shard), a
failure naming the source and the path it was resolved to; then the weights held as decided
(quantized layers expanded where the platform path wants it) and evaluated once, and what
they weigh. How the weights are held is each engine's decision (the text engine weighs a
GPU's bfloat16 copy against the window it leaves, `engines.llm.loading`); the window is
then sized by `sizing.size_context`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engines.errors import SourceError
from engines.mlx.weights import EXPANDED, expand_quantized, quantized_layers, weight_bytes
from engines.platform import PlatformPath


def open_source(
    model_id: str,
    source: str,
    path: Path,
    opener: Callable[[str], tuple] | None = None,
    *,
    library: str = "",
) -> tuple:
    """`opener` (default `mlx_lm.load`) on the resolved `path`: the model and its tokenizer
    (or processor). Whatever the loader raises on a bad checkpoint becomes a `SourceError`
    naming the source, never a bare `FileNotFoundError`; `library` names the loader in it."""
    if opener is None:
        import mlx_lm

        opener = mlx_lm.load
    try:
        return opener(str(path))
    except Exception as error:  # loaders (and transformers under them) raise anything
        where = source if str(path) == source else f"{source} (loaded from {path})"
        what = f"{type(error).__name__}: {error}"
        if library:
            what = f"{library} cannot load it: {error}"
        raise SourceError(model_id, where, what) from None


def platform_holding(model, platform: PlatformPath) -> str:
    """How `platform` runs `model`'s weights fastest, with no memory check (a draft model,
    the benchmarks' references): expanded where the path wants it and the model is
    quantized, else as stored."""
    if platform.weights not in EXPANDED or not quantized_layers(model):
        return "as stored"
    return platform.weights


def hold(model, held: str) -> int:
    """Hold `model`'s weights as `held` (one of `EXPANDED`, or as stored), evaluated so that
    nothing loads lazily under the first request; the bytes they then weigh."""
    import mlx.core as mx

    if held in EXPANDED:
        expand_quantized(model, held)
    mx.eval(model.parameters())
    return weight_bytes(model)


def load_as_platform(path: str | Path, platform: PlatformPath, *, stored: bool = False):
    """A model directory as the platform path runs it fastest, with no memory check (the
    benchmarks' in-process references): the model, its tokenizer and how the weights are
    held; `stored` keeps them as the files hold them."""
    model, tokenizer = open_source(str(path), str(path), Path(path))
    held = "as stored" if stored else platform_holding(model, platform)
    hold(model, held)
    return model, tokenizer, held
