"""OpenAI legacy completions: a raw prompt (or several) continued as is, no chat template."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import msgspec
from litestar import Request, Response, post
from litestar.response import ServerSentEvent
from msgspec import UNSET

from engines.errors import BadRequest
from engines.runner import Job, Runner
from gateway.body import decode_body
from gateway.chat_request import build_chat_request
from gateway.errors import error_body, stream_failure
from gateway.openai import FINISH_REASONS
from gateway.registry import Generation, announce
from gateway.streaming import Collected, collect, unless_client_leaves
from schemas import openai_completions as wire
from schemas.canonical import Finished, Output, TextDelta
from schemas.openai import Usage


def _prompts(prompt: str | list[wire.PromptItem]) -> list[str]:
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not all(isinstance(p, str) for p in prompts):
        raise BadRequest("token-id prompts are not supported: send the prompt as text ($.prompt)")
    return prompts


def _refuse_unsupported(data: wire.CompletionRequest) -> None:
    if data.suffix:
        raise BadRequest("suffix (insertion) is not supported ($.suffix)")
    if data.logprobs is not None:
        raise BadRequest("logprobs are not supported yet ($.logprobs)")
    if data.n not in (None, 1) or data.best_of not in (None, 1):
        raise BadRequest(
            "n > 1 and best_of > 1 are not supported: send one request per completion "
            "($.n, $.best_of)"
        )


def _usage(finished: list[Finished]) -> Usage:
    prompt = sum(f.prompt_tokens for f in finished)
    new = sum(f.new_tokens for f in finished)
    return Usage(prompt_tokens=prompt, completion_tokens=new, total_tokens=prompt + new)


@post("/v1/completions", status_code=200)
async def completions(request: Request, generation: Generation) -> Response | ServerSentEvent:
    """Completions of one prompt or of several (a choice each, in order); SSE when streamed."""
    data = await decode_body(request, wire.CompletionRequest)
    prompts = _prompts(data.prompt)
    _refuse_unsupported(data)
    route = announce(generation.resolve(data.model), stream=data.stream, protocol="openai")
    stop = [data.stop] if isinstance(data.stop, str) else data.stop
    chats = [
        build_chat_request(
            route.model,
            [],
            raw_prompt=prompt,
            max_tokens=data.max_tokens,
            temperature=data.temperature,
            top_p=data.top_p,
            top_k=data.top_k,
            min_p=data.min_p,
            seed=data.seed,
            stop=stop,
        )
        for prompt in prompts
    ]
    # All prompts join the queue now, in order, so no other client's request slips between them.
    jobs = _submit_all(route.runner, chats)
    results = [route.runner.results(job) for job in jobs]
    completion_id = f"cmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    echoes = prompts if data.echo else [""] * len(prompts)
    if not data.stream:
        answers = await unless_client_leaves(request, _collect_all(jobs, results))
        body = wire.Completion(
            id=completion_id,
            created=created,
            model=route.served,
            choices=[
                wire.CompletionChoice(
                    index=i,
                    text=echo + answer.text,
                    finish_reason=FINISH_REASONS[answer.finished.stop_reason],
                )
                for i, (echo, answer) in enumerate(zip(echoes, answers, strict=True))
            ],
            usage=_usage([a.finished for a in answers]),
        )
        return Response(body)
    try:
        # Wait for the first output before answering, so queue and load errors keep their status.
        first = await unless_client_leaves(request, anext(results[0]))
    except BaseException:
        await _close_all(jobs, results)
        raise
    include_usage = bool(data.stream_options and data.stream_options.include_usage)
    chunk = _Chunker(completion_id, created, route.served)
    return ServerSentEvent(_chunks(request, first, jobs, results, echoes, chunk, include_usage))


def _submit_all(runner: Runner, chats: list) -> list[Job]:
    jobs: list[Job] = []
    try:
        for chat in chats:
            jobs.append(runner.submit(chat))
    except BaseException:
        for job in jobs:  # refused part way (queue full): the rest must not run for nobody
            job.cancel()
        raise
    return jobs


async def _collect_all(jobs: list[Job], results: list[AsyncIterator[Output]]) -> list[Collected]:
    tasks = [asyncio.ensure_future(collect(r)) for r in results]
    try:
        return [await task for task in tasks]
    finally:
        # One failed or the client left: cancelling a reader withdraws its job from the queue
        # (or stops it within a token); a job never read is at least flagged to stop at once.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for job in jobs:
            job.cancel()


async def _close_all(jobs: list[Job], results: list[AsyncIterator[Output]]) -> None:
    """Stop every job: closing a started result stream withdraws its job; one never read is
    flagged so its engine stops at once."""
    for job, stream in zip(jobs, results, strict=True):
        job.cancel()
        await stream.aclose()


class _Chunker:
    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self.completion_id, self.created, self.model = completion_id, created, model

    def __call__(
        self, index: int = 0, text: str = "", finish: str | None = None, usage=UNSET
    ) -> str:
        choices = (
            [] if usage else [wire.CompletionChoice(index=index, text=text, finish_reason=finish)]
        )
        body = wire.Completion(
            id=self.completion_id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=usage,
        )
        return msgspec.json.encode(body).decode()


async def _chunks(
    request: Request,
    first: Output,
    jobs: list[Job],
    results: list[AsyncIterator[Output]],
    echoes: list[str],
    chunk: _Chunker,
    include_usage: bool,
) -> AsyncIterator[str]:
    """Choice 0's chunks, then choice 1's, ...: jobs run in queue order anyway."""

    async def outputs(index: int) -> AsyncIterator[Output]:
        if index == 0:
            yield first
        async for output in results[index]:
            yield output

    finished: list[Finished] = []
    try:
        for index, echo in enumerate(echoes):
            if echo:
                yield chunk(index, echo)
            async for output in outputs(index):
                if isinstance(output, TextDelta):
                    yield chunk(index, output.text)
                elif isinstance(output, Finished):
                    finished.append(output)
                    yield chunk(index, finish=FINISH_REASONS[output.stop_reason])
        if include_usage:
            yield chunk(usage=_usage(finished))
        yield "[DONE]"
    except Exception as error:
        # The 200 is out: OpenAI reports a failure mid-stream as a chunk holding `error`.
        status, message, kind = stream_failure(request, error)
        yield msgspec.json.encode(error_body("openai", status, message, kind)).decode()
    finally:
        # The client went away (or the stream ended): stop every job within a token.
        await _close_all(jobs, results)


ROUTES = [completions]
