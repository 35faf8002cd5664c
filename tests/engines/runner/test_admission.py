"""The admission queue on its own (FIFO, depth limit, cancellation, max_wait), and the
refusals a runner makes before anything queues (what its engine cannot do)."""

from __future__ import annotations

import asyncio

import pytest

from engines.base import Capabilities
from engines.errors import BadRequest, QueueFull, QueueTimeout
from engines.job import Job
from engines.runner import Runner
from engines.runner.admission import AdmissionQueue
from engines.scripted import ScriptedEngine
from schemas.canonical import ChatRequest, EmbedRequest, Message
from schemas.config import ModelConfig, QueueConfig, ScriptConfig


def ask(name: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=name)], max_tokens=8)


def make_queue(max_depth=64, max_wait="120s") -> tuple[AdmissionQueue, list[str]]:
    model = ModelConfig(
        id="m", engine="scripted", queue=QueueConfig(max_depth=max_depth, max_wait=max_wait)
    )
    left: list[str] = []
    return AdmissionQueue(lambda: model, left=lambda: left.append("left")), left


def name(job: Job | None) -> str | None:
    return None if job is None else job.request.messages[-1].content


async def test_jobs_are_taken_in_arrival_order():
    line, _ = make_queue()
    loop = asyncio.get_running_loop()
    for i in range(4):
        line.join(Job(ask(f"r{i}")), loop)
    assert len(line) == 4
    assert [name(line.take()) for _ in range(5)] == ["r0", "r1", "r2", "r3", None]


async def test_a_full_queue_refuses_and_a_freed_place_admits_again():
    line, _ = make_queue(max_depth=2)
    loop = asyncio.get_running_loop()
    line.join(Job(ask("a")), loop)
    line.join(Job(ask("b")), loop)
    with pytest.raises(QueueFull, match=r"2 requests queued \(queue.max_depth 2\)"):
        line.refuse_when_full()
    line.take()
    line.refuse_when_full()  # room again


async def test_a_cancelled_job_leaves_without_being_taken():
    line, left = make_queue()
    loop = asyncio.get_running_loop()
    first, gone, last, skipped = (Job(ask(n)) for n in ("first", "gone", "last", "skipped"))
    for job in (first, gone, last, skipped):
        line.join(job, loop)
    assert line.remove(gone) and not line.remove(gone)  # out at once, and only once
    skipped.cancel()  # cancelled but still in line: passed over by `take`
    assert [name(line.take()) for _ in range(3)] == ["first", "last", None]
    assert left == []  # the runner settles after `remove` itself; `take` is its own


async def test_a_job_waiting_past_max_wait_times_out_and_leaves():
    line, left = make_queue(max_wait="50ms")
    job = Job(ask("late"))
    line.join(job, asyncio.get_running_loop())
    with pytest.raises(QueueTimeout, match="waited 50ms in the queue"):
        raise await asyncio.wait_for(job.outputs.get(), 2)
    assert len(line) == 0 and left == ["left"] and line.take() is None


async def test_emptied_out_jobs_leave_front_first_and_their_timers_with_them():
    line, left = make_queue(max_wait="50ms")
    loop = asyncio.get_running_loop()
    jobs = [Job(ask(f"r{i}")) for i in range(3)]
    for job in jobs:
        line.join(job, loop)
    assert line.empty_out() == jobs and len(line) == 0
    await asyncio.sleep(0.1)
    assert left == [] and all(job.outputs.empty() for job in jobs)  # no timeout came


class EmbeddingOnly(ScriptedEngine):
    """A scripted engine that says it only embeds."""

    capabilities = Capabilities(chat=False, embed=True)

    def __init__(self) -> None:
        super().__init__(ScriptConfig())


async def test_what_the_engine_cannot_do_is_refused_before_it_queues():
    model = ModelConfig(id="m", engine="scripted")
    chat_only = Runner(model, ScriptedEngine(ScriptConfig()))
    embed_only = Runner(model, EmbeddingOnly())
    for runner in (chat_only, embed_only):
        await runner.start()
    with pytest.raises(BadRequest, match="'m' is a chat model; it does not embed"):
        chat_only.submit(EmbedRequest(inputs=["hi"]))
    with pytest.raises(BadRequest, match="'m' is an embedding model; it does not generate"):
        embed_only.submit(ask("hi"))
    assert chat_only.queue_depth == embed_only.queue_depth == 0
    for runner in (chat_only, embed_only):
        await runner.stop("test")
