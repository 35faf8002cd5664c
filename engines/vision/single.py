"""One request at a time through mlx-vlm's `stream_generate`: the vision engine's path where
the installed mlx-vlm has no batch generator. Its prefix reuse is the engine's parked
sessions (`engines/vision/sessions.py`), keyed by the pictures' hash."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from engines.vision.sessions import Sessions
from schemas.canonical import ChatRequest, Output

if TYPE_CHECKING:
    from engines.vision.engine import Prepared


def generate_one(
    model,
    processor,
    sessions: Sessions,
    prepared: Prepared,
    request: ChatRequest,
    cancelled: Callable[[], bool],
) -> Iterator[Output]:
    """Yield the request's outputs, then one `Finished`; its images encoded on this thread."""
    from mlx_vlm import stream_generate

    inputs, sampler, parser, max_tokens = prepared
    state, evicted = sessions.take(inputs.keys), False
    tensors = dict(inputs.tensors)
    started = time.perf_counter()
    first_at = None
    new_tokens, stop_reason, reused, completed = 0, "stop", 0, False
    stream = stream_generate(
        model,
        processor,
        "",
        input_ids=tensors.pop("input_ids"),
        pixel_values=tensors.pop("pixel_values", None),
        mask=tensors.pop("attention_mask", None),
        max_tokens=max_tokens,
        sampler=sampler,
        prompt_cache_state=state,
        **tensors,
    )
    try:
        for response in stream:
            first_at = first_at or time.perf_counter()
            reused = response.cached_tokens or 0
            # The end-of-sequence token is counted by mlx-vlm, not output: not counted here.
            eos = response.finish_reason == "stop"
            new_tokens = response.generation_tokens - eos if response.token is not None else 0
            yield from parser.feed(response.text)
            if parser.stopped:
                stop_reason = "stop_string"
                break
            if response.finish_reason:
                stop_reason = response.finish_reason
            if cancelled():
                stop_reason = "cancelled"
                break
        else:
            completed = True  # run to its end: mlx-vlm has stored the cache in `state`
    finally:
        stream.close()
    if completed and state is not None and state.cache is not None:
        evicted = sessions.park(inputs.keys, len(inputs.ids), state)
    yield from parser.end(
        stop_reason,
        started=started,
        first_at=first_at,
        prompt_tokens=len(inputs.ids),
        new_tokens=new_tokens,
        reused_prefix_tokens=reused,
        session_evicted=evicted,
        images=inputs.images,
        image_tokens=inputs.image_tokens,
    )
