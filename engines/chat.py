"""The one door for chat: every protocol adapter turns its wire request into a `ChatAsk`
and makes one call here; the model's policy is applied in this one place.

`serve_chat(runner, ask, n)`:
1. refuses `n` past the model's `guardrails.max_n`;
2. builds the canonical request under the model's settings (defaults, system prompt,
   output cap, reasoning, tool and overflow policies: `engines/policy/request.py`), and
   refuses images sent to a model that reads none;
3. checks tool schemas and compiles output controls on a worker thread, and large ones in
   a worker process (`engines/policy/schema_checks.py`), so a client's schema never
   stalls the event loop, not even through the GIL;
4. returns `n` answers, each through `engines/policy/answer.py` (context overflow,
   tool-call guardrails and the re-ask), submitted together so they batch.

Adapters render what comes back; they never reach past this door into the runner.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import NamedTuple

from msgspec.structs import replace

from engines.base import Engine
from engines.errors import BadRequest
from engines.job import Job, expect_jobs
from engines.policy.answer import answer
from engines.policy.request import build_chat_request, check_chat, compiles_schemas
from engines.policy.schema_checks import check_schemas
from engines.policy.tools_fit import drop_unused_tools
from engines.runner import Runner
from schemas.canonical import ChatAsk, ChatRequest, Output, PromptRead, request_images
from schemas.config import ModelConfig


class Chat(NamedTuple):
    """What the door gives back: the request as the model will run it, its answers, and
    how each answer's prompt was read (from which cache tier), filled in before the
    answer's first output where its engine says (`PromptRead`; None otherwise)."""

    request: ChatRequest
    answers: list[AsyncIterator[Output]]
    reads: list[PromptRead | None]


class Prompts(NamedTuple):
    """Plain completions as queued: each request, its job (in queue order), its outputs.
    The adapter ends them through `cancel` and `close`, never through the jobs."""

    requests: list[ChatRequest]
    jobs: list[Job]
    answers: list[AsyncIterator[Output]]

    def cancel(self) -> None:
        """Flag every job to stop at once: one whose answer is never read too."""
        for job in self.jobs:
            job.cancel()

    async def close(self) -> None:
        """Stop every job: closing a started answer withdraws its job; one never read is
        flagged so its engine stops at once."""
        for job, stream in zip(self.jobs, self.answers, strict=True):
            job.cancel()
            await stream.aclose()


async def serve_chat(runner: Runner, ask: ChatAsk, n: int | None = 1, n_field: str = "$.n") -> Chat:
    """The request's `n` answers under its model's policy; closing an answer cancels it."""
    count = check_n(runner.model, n, n_field)
    expect_jobs(count)  # its answers start as one group, not the first alone
    request = await prepare(runner, ask)
    reads: list[PromptRead | None] = [None] * count
    answers = [
        answer(runner, r, told=functools.partial(reads.__setitem__, i))
        for i, r in enumerate(variants(request, count))
    ]
    return Chat(request, answers, reads)


async def serve_prompts(
    runner: Runner, asks: list[ChatAsk], n: int | None = 1, n_field: str = "$.n"
) -> Prompts:
    """Plain completions (raw prompts: no template, so no tools or overflow to apply): each
    prompt `n` times, all joining the queue now and in order, so no other client's request
    slips between them. A refusal part way (queue full) withdraws the ones already queued."""
    count = check_n(runner.model, n, n_field)
    expect_jobs(count * len(asks))
    requests = []
    for ask in asks:
        requests += variants(await prepare(runner, ask), count)
    jobs: list[Job] = []
    try:
        for request in requests:
            jobs.append(runner.submit(request))
    except BaseException:
        for job in jobs:
            job.cancel()
        raise
    return Prompts(requests, jobs, [runner.results(job) for job in jobs])


async def count_chat(runner: Runner, ask: ChatAsk | ChatRequest) -> int:
    """Tokens in the prompt the request runs with, template and tools included (loads an
    on-demand model first); `ask` may be the request `serve_chat` already prepared."""
    request = ask if isinstance(ask, ChatRequest) else await prepare(runner, ask)
    return await runner.count_prompt(request)


async def prepare(runner: Runner, ask: ChatAsk) -> ChatRequest:
    """The canonical request, checked; client-written schemas are checked off the event
    loop (large ones in a worker process), and a request without any here, without a hop
    to a thread and back. Tools that alone overflow the window are left out here, once for
    all `n` answers, where `context.tools_overflow` says so."""
    request = build_chat_request(runner.model, ask)
    refuse_images(runner.engine, runner.model.id, request)
    if compiles_schemas(request):
        await asyncio.to_thread(check_schemas, request)
    else:
        check_chat(request)
    return await fit_tools(runner, request)


async def fit_tools(runner: Runner, request: ChatRequest) -> ChatRequest:
    """`context.tools_overflow: drop_unused`: the tools that fit, counted off the event loop
    (`engines/policy/tools_fit.py`); `reject` leaves an overflow to `context.overflow`."""
    if request.tools_overflow != "drop_unused" or not request.tools:
        return request
    if request.raw_prompt is not None:
        return request
    tokens = await runner.count_prompt(request)  # loads an on-demand model first
    return await asyncio.to_thread(
        drop_unused_tools,
        runner.model.id,
        request,
        runner.engine.count_prompt,
        request.window_of(runner.context),
        tokens,
    )


def check_n(model: ModelConfig, n: int | None, field: str = "$.n") -> int:
    """How many answers were asked for, within the model's `guardrails.max_n`."""
    n = n or 1
    if n > model.guardrails.max_n:
        raise BadRequest(
            f"{field} is {n}; model {model.id!r} gives at most {model.guardrails.max_n} "
            "answers per request (guardrails.max_n)"
        )
    return n


def variants(request: ChatRequest, n: int) -> list[ChatRequest]:
    """The request `n` times; a seed becomes seed, seed+1, ... so the answers differ and
    each stays reproducible."""
    seed = request.sampling.seed
    if n == 1 or seed is None:
        return [request] * n
    return [replace(request, sampling=replace(request.sampling, seed=seed + i)) for i in range(n)]


def refuse_images(engine: Engine, model_id: str, request: ChatRequest) -> None:
    """`BadRequest` for images sent to an engine that reads none."""
    images = request_images(request)
    if images and not engine.capabilities.images:
        # "Could not process image" first: Anthropic's wording, which Claude Code recovers
        # from by sending the conversation again without the images.
        raise BadRequest(
            f"Could not process image: model {model_id!r} reads text only; send images to a "
            f"vision model ({images[0].where or 'an image'})"
        )
