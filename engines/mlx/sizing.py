"""Sizing a model's context window: the KV bytes one token costs, the window it was trained
with, and the window the memory left for its KV caches affords."""

from __future__ import annotations

from collections.abc import Callable

from engines.errors import ContextTooLarge
from engines.units import describe

# A window smaller than this is not worth loading a chat model for.
MIN_CONTEXT = 256
# The window of a checkpoint whose config names none.
DEFAULT_TRAINED_CONTEXT = 4096


def kv_bytes_per_token(args, element: int, kv_bits: int | None = None) -> int:
    """Keys and values of every (language-model) layer for one token: `args` is the text
    model's config, `element` the bytes of one cached value, `kv_bits` a quantized cache's."""
    heads = getattr(args, "num_key_value_heads", None) or args.num_attention_heads
    head_dim = getattr(args, "head_dim", None) or args.hidden_size // args.num_attention_heads
    per_token = 2 * args.num_hidden_layers * heads * head_dim * element
    return per_token * kv_bits // (8 * element) if kv_bits else per_token


def trained_context(args) -> int:
    """The window the text model was trained with (`args`: its config, or None)."""
    return int(getattr(args, "max_position_embeddings", None) or DEFAULT_TRAINED_CONTEXT)


def size_context(
    model_id: str,
    wanted: int | str,
    trained: int,
    weights: int,
    kv_per_token: int,
    memory_left: int | None,
    sequences: int = 1,
) -> int:
    """The window to serve: `auto` fills what memory allows up to the trained context.

    `sequences` caches of the window must fit beside the weights (one per request decoded
    together, and the parked sessions' share). A fixed window that cannot fit is refused
    with the numbers.
    """
    room = None if memory_left is None else memory_left - weights
    fits = None if room is None else max(0, room // (kv_per_token * sequences))
    if wanted == "auto":
        window = trained if fits is None else min(trained, fits)
        if window < MIN_CONTEXT:
            raise ContextTooLarge(
                model_id,
                "context.max: auto",
                f"only {window} tokens of KV cache fit: weights take {describe(weights)}, "
                f"{describe(max(room or 0, 0))} is left of the memory budget, and a token needs "
                f"{kv_per_token} bytes x {sequences} sequences",
            )
        return window
    if fits is not None and wanted > fits:
        need = wanted * kv_per_token * sequences
        raise ContextTooLarge(
            model_id,
            f"context.max: {wanted}",
            f"a {wanted}-token window needs {describe(need)} of KV cache ({kv_per_token} bytes "
            f"per token x {sequences} sequences) but only {describe(max(room, 0))} is left "
            f"after {describe(weights)} of weights; the largest window that fits is {fits}",
        )
    return int(wanted)


# `concurrency: auto`'s ceiling: a CPU's cores are spent a few streams in, a GPU's batch
# goes on gaining into the dozens.
AUTO_STREAMS_CPU = 8
AUTO_STREAMS_GPU = 32


# `concurrency: auto` shares out a window past this into more streams. A whole trained window
# each is what the memory holds only for short-window models: a 128k-trained 8B on an 80 GB GPU
# holds one 16 GiB window beside its weights and the parked sessions', so keeping it whole
# served that model serially (bench/RESULTS.md, beside vllm-mlx on an H100: 0.13x at 32
# clients). 32k tokens still hold an agent's tools, system prompt and a long conversation.
AUTO_STREAM_WINDOW = 32768


def auto_streams(device: str) -> int:
    """The most streams `auto` takes on `device` (PlatformPath.device)."""
    return AUTO_STREAMS_CPU if device == "cpu" else AUTO_STREAMS_GPU


def streams(
    model_id: str,
    wanted: int | str,
    window: int | str,
    trained: int,
    weights: int,
    kv_per_token: int,
    memory_left: int | None,
    windows_of: Callable[[int], int],
    cap: int,
) -> int:
    """Requests decoded together: `concurrency: auto` takes as many as keep the window one
    request alone would get, or `AUTO_STREAM_WINDOW` tokens where that window is longer (the
    window is then what that many streams leave each), at most `cap`; a number is kept as it is.

    `windows_of(n)`: the windows of KV cache `n` streams count (theirs and the parked
    sessions'). Where even one stream's window does not fit, 1: the window's sizing then
    refuses with the numbers.
    """
    if wanted != "auto":
        return int(wanted)

    def sized(n: int) -> int:
        try:
            return size_context(
                model_id, window, trained, weights, kv_per_token, memory_left, windows_of(n)
            )
        except ContextTooLarge:
            return 0

    alone = sized(1)
    if alone == 0:
        return 1
    enough = min(alone, AUTO_STREAM_WINDOW)
    return next((n for n in range(cap, 1, -1) if sized(n) >= enough), 1)


def streams_detail(wanted: int | str, resolved: int, device: str, pool: int | None = None) -> str:
    """What `model_attached` says of `concurrency` (`pool`: the KV pool's tokens, if any)."""
    if wanted != "auto":
        return str(resolved)
    if pool is not None:
        return (
            f"auto: {resolved} (at most {auto_streams(device)} on this device), sharing a KV "
            f"pool of {pool} tokens by what each request can reach: its prompt and max_tokens"
        )
    return (
        f"auto: {resolved} (at most {auto_streams(device)} on this device, as many as leave each "
        f"a whole window, or {AUTO_STREAM_WINDOW} tokens where the whole one is longer)"
    )
