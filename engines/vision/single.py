"""One request at a time through mlx-vlm's `stream_generate`: the vision engine's path where
the installed mlx-vlm has no batch generator. Its prefix reuse is the engine's parked
sessions (`engines/vision/sessions.py`), keyed by the pictures' hash."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from engines.mlx.stream import StreamRun
from engines.vision.prepared import Prepared
from engines.vision.sessions import Sessions
from schemas.canonical import ChatRequest, Output, PromptRead


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
    run = StreamRun(parser)
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
        keeps = bool(sessions.slots)
        yield from run.follow(stream, cancelled, read=lambda first: read_of(first, inputs, keeps))
    finally:
        stream.close()
    last = run.last
    reused = (last.cached_tokens or 0) if last is not None else 0
    # The end-of-sequence token is counted by mlx-vlm, not output: not counted here.
    new_tokens = 0
    if last is not None and last.token is not None:
        new_tokens = last.generation_tokens - (last.finish_reason == "stop")
    # Run to its end, mlx-vlm has stored the cache in `state`.
    written = 0
    if run.completed and state is not None and state.cache is not None:
        evicted = sessions.park(inputs.keys, len(inputs.ids), state)
        written = len(inputs.ids) - reused if sessions.slots else 0
    yield from run.end(
        len(inputs.ids),
        new_tokens,
        reused_prefix_tokens=reused,
        cache_written_tokens=written,
        session_evicted=evicted,
        images=inputs.images,
        image_tokens=inputs.image_tokens,
    )


def read_of(first, inputs, keeps: bool) -> PromptRead:
    """How mlx-vlm read the prompt, as its first response says; `keeps`: the conversation
    is parked when it ends."""
    cached = getattr(first, "cached_tokens", 0) or 0
    writing = len(inputs.ids) - cached if keeps else 0
    return PromptRead(prompt_tokens=len(inputs.ids), cached_tokens=cached, writing_tokens=writing)
