"""The benchmark button: prefill and decode tokens/s of one model at 1 and N concurrent
streams, run by the gateway against itself through the same door every protocol uses
(`engines.chat.serve_chat`), with token counts and timings from the engine's own accounting.

Each stream's prompt opens with its own tag, so prefix reuse cannot turn a prefill into a
cache hit (tokens still served from a cache are reported, and left out of prefill tokens/s).
The prompt is sized by the model's own count (template included), so `prompt_tokens: 512`
is 512 of that model's tokens, not of some other tokenizer's (the scripted engine counts
bytes). A scripted model computes no prefill: its prefill tokens/s is none, not millions.
A model busy serving others is refused (409) unless forced: the numbers would be theirs too.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Annotated

import msgspec
from litestar import Request, post
from litestar.datastructures import State
from msgspec import Meta

from engines.chat import count_chat, serve_chat
from engines.errors import BadRequest, ModelBusy
from engines.runner import Runner
from gateway.canonical.model_facts import task_of
from gateway.control.registry import Generation
from gateway.http.body import decode_body
from gateway.ops.admin import ADMIN, ADMIN_GUARDS
from schemas.canonical import ChatAsk, Finished, Message

FILLER = "the quick brown fox jumps over the lazy dog and "  # ~10 tokens in common BPEs


class BenchmarkAsk(msgspec.Struct, forbid_unknown_fields=True):
    model: str
    prompt_tokens: Annotated[int, Meta(ge=1, le=131072)] = 512
    max_tokens: Annotated[int, Meta(ge=1, le=4096)] = 64
    streams: Annotated[int, Meta(ge=1, le=64)] = 4
    force: bool = False


def _prompt(tag: str, words: int) -> str:
    filler = FILLER.split()
    return f"[{tag}] " + " ".join(filler[i % len(filler)] for i in range(words))


def _chat_ask(text: str, max_tokens: int) -> ChatAsk:
    return ChatAsk(
        messages=[Message(role="user", content=text)], max_tokens=max_tokens, temperature=0.0
    )


async def _words_for(runner: Runner, ask: BenchmarkAsk) -> int:
    """The most filler words whose prompt, as the model counts it, is within the tokens
    asked (at least one word): found by bisection on the model's own count."""

    async def counted(words: int) -> int:
        return await count_chat(runner, _chat_ask(_prompt("0" * 8, words), ask.max_tokens))

    low, high = 1, ask.prompt_tokens
    while low < high:
        middle = (low + high + 1) // 2
        if await counted(middle) <= ask.prompt_tokens:
            low = middle
        else:
            high = middle - 1
    return low


async def _stream(runner: Runner, ask: BenchmarkAsk, words: int) -> Finished:
    text = _prompt(uuid.uuid4().hex[:8], words)
    chat = await serve_chat(runner, _chat_ask(text, ask.max_tokens))
    finished = None
    async for output in chat.answers[0]:
        if isinstance(output, Finished):
            finished = output
    if finished is None:
        raise BadRequest(f"model {runner.model.id!r} ended a benchmark stream without a result")
    return finished


async def _run(runner: Runner, ask: BenchmarkAsk, streams: int, words: int) -> dict:
    started = time.perf_counter()
    results = await asyncio.gather(*(_stream(runner, ask, words) for _ in range(streams)))
    wall = time.perf_counter() - started
    computed = [r.prompt_tokens - r.reused_prefix_tokens for r in results]
    prefill = [c / r.prefill_s for c, r in zip(computed, results, strict=True) if r.prefill_s]
    if runner.model.engine == "scripted":
        prefill = []  # weightless: its "prefill" is a tokenizer's count, not a model's work
    decode = [r.new_tokens / r.decode_s for r in results if r.decode_s]
    new_tokens = sum(r.new_tokens for r in results)
    return {
        "streams": streams,
        "prompt_tokens": round(statistics.mean(r.prompt_tokens for r in results)),
        "cached_tokens": sum(r.reused_prefix_tokens for r in results),
        "new_tokens": new_tokens,
        "wall_s": round(wall, 3),
        "prefill_tps": round(statistics.median(prefill), 1) if prefill else None,
        "decode_tps": round(statistics.median(decode), 1) if decode else None,
        "aggregate_tps": round(new_tokens / wall, 1) if wall else None,
    }


@post(["/ui/api/benchmark"], status_code=200, guards=ADMIN_GUARDS, opt=ADMIN)
async def benchmark(request: Request, state: State, generation: Generation) -> dict:
    """Run one benchmark now (1 stream, then `streams` at once); the result is kept.

    Its body is read as every JSON route's is (gateway/http/body.py): a type other than
    JSON is a 415, as a page on another site could post `text/plain` unasked."""
    data = await decode_body(request, BenchmarkAsk)
    model_id = generation.resolve_name(data.model)
    if model_id is None:
        known = ", ".join(sorted(generation.runners))
        raise BadRequest(f"$.model: no model {data.model!r}; known models: {known}")
    runner = generation.runners[model_id]
    if task_of(generation, runner.model) != "chat":
        raise BadRequest(f"$.model: model {model_id!r} does not chat; benchmark a chat model")
    if not data.force and (runner.queue_depth or runner.running):
        raise ModelBusy(
            f"model {model_id!r} is serving {runner.running} request(s) with "
            f"{runner.queue_depth} waiting; the numbers would be theirs too (force: true)"
        )
    await runner.load()
    words = await _words_for(runner, data)
    runs = [await _run(runner, data, 1, words)]
    if data.streams > 1:
        runs.append(await _run(runner, data, data.streams, words))
    settings = msgspec.structs.asdict(data) | {"model": model_id}
    result = {"model": model_id, "settings": settings, "runs": runs}
    await asyncio.to_thread(state.activity.add_benchmark, model_id, settings, {"runs": runs})
    return result


ROUTES = [benchmark]
