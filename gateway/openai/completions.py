"""OpenAI legacy completions: a raw prompt (or several) continued as is, no chat template."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import msgspec
from litestar import Request, Response, post
from litestar.response import Stream
from msgspec import UNSET

from engines.chat import Prompts, check_n, serve_prompts
from engines.errors import BadRequest
from gateway.control.registry import Generation, announce
from gateway.http.body import decode_body
from gateway.http.request_state import client_of
from gateway.http.streaming import Collected, collect, sse_response, started, unless_client_leaves
from gateway.openai.chat import FINISH_REASONS, error_chunk
from gateway.openai.controls import sampling_asked
from schemas import openai_completions as wire
from schemas.canonical import ChatAsk, Finished, Output, OutputControls, TextDelta
from schemas.logprobs import Logprobs, LogprobsRequest, TokenLogprob
from schemas.openai import PromptTokensDetails, Usage


def _prompts(prompt: str | list[wire.PromptItem]) -> list[str | list[int]]:
    """Each prompt as text or as token ids (one list of ids is one prompt)."""
    if isinstance(prompt, str):
        return [prompt]
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    if any(isinstance(p, int) for p in prompt):
        raise BadRequest("$.prompt mixes token ids with texts or lists of ids")
    if any(isinstance(p, list) and not p for p in prompt):
        raise BadRequest("$.prompt: a token-id prompt needs at least one token")
    return list(prompt)


def _refuse_unsupported(data: wire.CompletionRequest) -> None:
    if data.suffix:
        raise BadRequest("suffix (insertion) is not supported ($.suffix)")
    if data.best_of not in (None, 1):
        raise BadRequest(
            "$.best_of is not supported: ask for n completions and rank them yourself "
            "(logprobs give each token's log-probability)"
        )


def _echoed(answer: Collected, echo: bool) -> str:
    return "".join(t.token for t in answer.prompt_logprobs) if echo else ""


def _logprobs(tokens: list[TokenLogprob], offset: int) -> wire.CompletionLogprobs:
    """Legacy logprobs of `tokens`, whose text starts `offset` characters into the choice."""
    offsets = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token.token)
    return wire.CompletionLogprobs(
        tokens=[t.token for t in tokens],
        token_logprobs=[t.logprob for t in tokens],
        top_logprobs=[
            {a.token: a.logprob for a in t.top} if t.logprob is not None else None for t in tokens
        ],
        text_offset=offsets,
    )


def _usage(finished: list[Finished]) -> Usage:
    prompt = sum(f.prompt_tokens for f in finished)
    new = sum(f.new_tokens for f in finished)
    cached = PromptTokensDetails(cached_tokens=sum(f.reused_prefix_tokens for f in finished))
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=new,
        total_tokens=prompt + new,
        prompt_tokens_details=cached,
    )


@post("/v1/completions", status_code=200)
async def completions(request: Request, generation: Generation) -> Response | Stream:
    """Completions of one prompt or of several (a choice each, in order); SSE when streamed."""
    data = await decode_body(request, wire.CompletionRequest)
    prompts = _prompts(data.prompt)
    _refuse_unsupported(data)
    route = announce(generation.resolve(data.model), stream=data.stream, protocol="openai")
    route = generation.with_lora(route, data.lora)
    n = check_n(route.model, data.n)
    stop = [data.stop] if isinstance(data.stop, str) else data.stop
    logprobs = None
    if data.logprobs is not None:
        logprobs = LogprobsRequest(top=data.logprobs, prompt=data.echo)
    if data.echo and logprobs is None and any(isinstance(p, list) for p in prompts):
        raise BadRequest("$.echo of a token-id prompt needs logprobs (its text comes from them)")
    sampling = sampling_asked(data)
    asks = [
        ChatAsk(
            messages=[],
            raw_prompt=prompt if isinstance(prompt, str) else "",
            prompt_ids=prompt if isinstance(prompt, list) else None,
            max_tokens=data.max_tokens,
            **sampling,
            stop=stop,
            controls=OutputControls(logprobs=logprobs),
            client=client_of(request),
        )
        for prompt in prompts
    ]
    # n completions of each prompt, in order: choice i*n + j is prompt i's j-th.
    queued = await serve_prompts(route.runner, asks, n)
    results = queued.answers
    prompts = [prompt for prompt in prompts for _ in range(n)]
    completion_id = f"cmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    # A token-id prompt's echo is its tokens' text, from the prompt's logprobs.
    echoes = [p if data.echo and isinstance(p, str) else "" for p in prompts]
    if not data.stream:
        answers = await unless_client_leaves(request, _collect_all(queued))
        body = wire.Completion(
            id=completion_id,
            created=created,
            model=route.served,
            choices=[
                wire.CompletionChoice(
                    index=i,
                    text=(echo or _echoed(answer, data.echo)) + answer.text,
                    finish_reason=FINISH_REASONS[answer.finished.stop_reason],
                    logprobs=_logprobs([*answer.prompt_logprobs, *answer.logprobs], 0)
                    if logprobs
                    else None,
                )
                for i, (echo, answer) in enumerate(zip(echoes, answers, strict=True))
            ],
            usage=_usage([a.finished for a in answers]),
        )
        return Response(body)
    try:
        results[0] = await started(request, results[0])
    except BaseException:
        await queued.close()
        raise
    include_usage = bool(data.stream_options and data.stream_options.include_usage)
    chunk = _Chunker(completion_id, created, route.served)
    chunks = _chunks(results, echoes, chunk, include_usage)

    return sse_response(request, chunks, error_chunk, queued.close)


async def _collect_all(queued: Prompts) -> list[Collected]:
    tasks = [asyncio.ensure_future(collect(r)) for r in queued.answers]
    try:
        return [await task for task in tasks]
    finally:
        # One failed or the client left: cancelling a reader withdraws its job from the queue
        # (or stops it within a token); a job never read is at least flagged to stop at once.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        queued.cancel()


class _Chunker:
    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self.completion_id, self.created, self.model = completion_id, created, model

    def __call__(
        self,
        index: int = 0,
        text: str = "",
        finish: str | None = None,
        usage=UNSET,
        logprobs=None,
    ) -> str:
        choice = wire.CompletionChoice(
            index=index, text=text, finish_reason=finish, logprobs=logprobs
        )
        choices = [] if usage else [choice]
        body = wire.Completion(
            id=self.completion_id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=usage,
        )
        return msgspec.json.encode(body).decode()


async def _chunks(
    results: list[AsyncIterator[Output]],
    echoes: list[str],
    chunk: _Chunker,
    include_usage: bool,
) -> AsyncIterator[str]:
    """Choice 0's chunks, then choice 1's, ...: jobs run in queue order anyway."""
    finished: list[Finished] = []
    for index, echo in enumerate(echoes):
        if echo:
            yield chunk(index, echo)
        offset = len(echo) if echo else 0
        async for output in results[index]:
            if isinstance(output, Logprobs):
                entries = _logprobs(output.tokens, 0 if output.prompt else offset)
                if not output.prompt:
                    offset += sum(len(t.token) for t in output.tokens)
                yield chunk(index, logprobs=entries)
            elif isinstance(output, TextDelta):
                yield chunk(index, output.text)
            elif isinstance(output, Finished):
                finished.append(output)
                yield chunk(index, finish=FINISH_REASONS[output.stop_reason])
    if include_usage:
        yield chunk(usage=_usage(finished))
    yield "[DONE]"


ROUTES = [completions]
