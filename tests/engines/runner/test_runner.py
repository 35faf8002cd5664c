"""The runner's FIFO queue, overflow, timeouts and cancellation, on the scripted engine."""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest

from engines.base import EngineState
from engines.errors import EngineFailed, ModelUnavailable, QueueFull, QueueTimeout
from engines.job import expect_jobs, job_scope, on_their_way
from engines.log import LISTENERS
from engines.policy.answer import answer
from engines.runner import Runner, thread
from engines.scripted import ScriptedEngine
from schemas.canonical import ChatRequest, Finished, Message, TextDelta
from schemas.config import ContextConfig, ModelConfig, OnDemand, QueueConfig, ScriptConfig
from schemas.events import BatchFailed, TaskFailed


class RecordingEngine(ScriptedEngine):
    """The scripted engine, noting which prompts it generated for and how each ended."""

    def __init__(self, script: ScriptConfig) -> None:
        super().__init__(script)
        self.started: list[str] = []
        self.ended: list[tuple[str, str]] = []

    def generate(self, request, cancelled):
        name = request.messages[-1].content
        self.started.append(name)
        for output in super().generate(request, cancelled):
            if isinstance(output, Finished):
                self.ended.append((name, output.stop_reason))
            yield output


def make_runner(reply="one two three four", delay=0.0, max_depth=64, max_wait="120s"):
    model = ModelConfig(
        id="m", engine="scripted", queue=QueueConfig(max_depth=max_depth, max_wait=max_wait)
    )
    engine = RecordingEngine(ScriptConfig(reply=reply, token_delay=delay))
    return Runner(model, engine), engine


def ask(name: str, max_tokens: int = 100) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=name)], max_tokens=max_tokens)


async def drain(runner, job):
    return [o async for o in runner.results(job)]


async def test_requests_are_served_in_arrival_order():
    runner, engine = make_runner(delay=0.01)
    await runner.start()
    jobs = [runner.submit(ask(f"r{i}")) for i in range(6)]
    # Drain in reverse to show order comes from the queue, not from who reads first.
    await asyncio.gather(*(drain(runner, job) for job in reversed(jobs)))
    assert engine.started == [f"r{i}" for i in range(6)]
    await runner.stop("test")


async def test_output_is_deltas_then_one_finished_with_engine_counts():
    runner, _ = make_runner(reply="hello from echo")
    await runner.start()
    outputs = await drain(runner, runner.submit(ask("x")))
    assert "".join(o.text for o in outputs[:-1]) == "hello from echo"
    assert all(isinstance(o, TextDelta) for o in outputs[:-1])
    finished = outputs[-1]
    assert finished.new_tokens == len(b"hello from echo")  # one token per byte
    assert finished.prompt_tokens > 0
    await runner.stop("test")


async def test_queue_past_max_depth_is_refused_at_once():
    runner, _ = make_runner(delay=0.2, max_depth=2)
    await runner.start()
    running = runner.submit(ask("running"))
    await asyncio.sleep(0.05)  # the first leaves the line and starts
    waiting = [runner.submit(ask("w1")), runner.submit(ask("w2"))]
    with pytest.raises(QueueFull) as refused:
        runner.submit(ask("w3"))
    assert isinstance(refused.value, QueueFull) and refused.value.retry_after > 0
    for job in [running, *waiting]:
        await drain(runner, job)
    await runner.stop("test")


async def test_request_withdrawn_while_queued_never_generates():
    runner, engine = make_runner(delay=0.05)
    await runner.start()
    first = runner.submit(ask("first"))
    gone = runner.submit(ask("gone"))
    last = runner.submit(ask("last"))
    results = runner.results(gone)
    task = asyncio.ensure_future(anext(results))
    await asyncio.sleep(0.02)
    task.cancel()  # the client goes away while its request waits
    await asyncio.gather(task, return_exceptions=True)
    assert runner.queue_depth == 1
    await drain(runner, first)
    await drain(runner, last)
    assert engine.started == ["first", "last"]
    await runner.stop("test")


async def test_request_cancelled_mid_generation_stops_within_a_token():
    runner, engine = make_runner(reply=" ".join(["word"] * 100), delay=0.05)
    await runner.start()
    job = runner.submit(ask("long"))
    results = runner.results(job)
    await anext(results)
    await anext(results)
    cancelled_at = time.perf_counter()
    await results.aclose()
    follow = await drain(runner, runner.submit(ask("next")))
    # The next request starts within about one token delay of the cancel.
    assert engine.ended[0] == ("long", "cancelled")
    assert time.perf_counter() - cancelled_at < 0.05 * 100 / 2
    assert isinstance(follow[-1], Finished)
    await runner.stop("test")


async def test_request_waiting_past_max_wait_gets_503_with_retry_after():
    runner, _ = make_runner(delay=0.1, max_wait="100ms")
    await runner.start()
    busy = runner.submit(ask("busy"))
    late = runner.submit(ask("late"))
    with pytest.raises(QueueTimeout) as timed_out:
        await drain(runner, late)
    assert isinstance(timed_out.value, QueueTimeout) and timed_out.value.retry_after
    await drain(runner, busy)
    await runner.stop("test")


async def test_a_slow_model_never_delays_another():
    slow, _ = make_runner(reply=" ".join(["slow"] * 20), delay=0.1)
    fast, _ = make_runner(reply="quick")
    await slow.start()
    await fast.start()
    slow_job = asyncio.ensure_future(drain(slow, slow.submit(ask("s"))))
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    await drain(fast, fast.submit(ask("f")))
    assert time.perf_counter() - started < 0.5
    assert not slow_job.done()
    await slow_job
    await slow.stop("test")
    await fast.stop("test")


async def test_stop_refuses_waiting_requests_and_finishes_running_ones():
    runner, _ = make_runner(delay=0.05)
    await runner.start()
    running = runner.submit(ask("running"))
    waiting = runner.submit(ask("waiting"))
    first = await anext(runner.results(running))
    stopping = asyncio.ensure_future(runner.stop("removed"))
    with pytest.raises(ModelUnavailable):
        await drain(runner, waiting)
    assert isinstance(first, TextDelta)
    await stopping


async def test_concurrency_admits_in_arrival_order_and_never_more_than_n_at_once():
    model = ModelConfig(id="m", engine="scripted", concurrency=2)
    engine = RecordingEngine(ScriptConfig(reply="a b c d", token_delay=0.02))
    runner = Runner(model, engine)
    await runner.start()
    jobs = [runner.submit(ask(f"r{i}")) for i in range(5)]
    await asyncio.sleep(0)
    assert runner.running == 2 and runner.queue_depth == 3
    results = await asyncio.gather(*(drain(runner, job) for job in jobs))
    assert engine.started == [f"r{i}" for i in range(5)]
    assert all(isinstance(r[-1], Finished) for r in results)
    await runner.stop("test")


class BatchSizeEngine(ScriptedEngine):
    """The scripted engine, noting how many requests its batch holds at each step."""

    def __init__(self, script: ScriptConfig) -> None:
        super().__init__(script)
        self.sizes: list[int] = []

    def open_batch(self):
        batch = super().open_batch()
        step = batch.step

        def recorded_step():
            self.sizes.append(batch.active)
            return step()

        batch.step = recorded_step
        return batch


async def gathering(monkeypatch, reply: str = "a b c", gap_s: float = 0.5):
    """A started runner of 8 on the batch-size recording engine, waiting `gap_s` for each
    next arrival of a burst. Generous windows: a loaded CI machine may take many
    milliseconds per arrival."""
    monkeypatch.setattr(thread, "BURST_GAP_S", gap_s)
    monkeypatch.setattr(thread, "BURST_MAX_S", 10.0)
    model = ModelConfig(id="m", engine="scripted", concurrency=8)
    engine = BatchSizeEngine(ScriptConfig(reply=reply, token_delay=0.01))
    runner = Runner(model, engine)
    await runner.start()
    return runner, engine


async def test_a_burst_of_arrivals_joins_the_batch_together_before_its_next_step(monkeypatch):
    runner, engine = await gathering(monkeypatch, " ".join("w" * 30))
    first = runner.submit(ask("alone"))
    results = runner.results(first)
    await anext(results)  # decoding alone, at once
    later = []
    for i in range(5):  # arrivals 20 ms apart, while the first decodes
        later.append(runner.submit(ask(f"r{i}")))
        await asyncio.sleep(0.02)
    await asyncio.gather(drain_rest(results), *(drain(runner, job) for job in later))
    assert engine.sizes[0] == 1
    assert [size for size in engine.sizes if size > 1][0] == 6, engine.sizes
    await runner.stop("test")


async def test_a_burst_reaching_an_idle_runner_starts_as_one_batch(monkeypatch):
    # A lone request waits BURST_GAP_S for company before its first step while other
    # requests are on their way (read and routed in their own job scopes, as the HTTP layer
    # does), so a burst is not split into one request started alone and the rest joining it.
    runner, engine = await gathering(monkeypatch)

    async def arrive(i: int) -> list:
        with job_scope():  # on its way from now until submitted
            await asyncio.sleep(0.02 * i)  # arrivals 20 ms apart at an idle runner
            return await drain(runner, runner.submit(ask(f"r{i}")))

    await asyncio.gather(*(arrive(i) for i in range(6)))
    assert engine.sizes[0] == 6, engine.sizes
    assert on_their_way() == 0
    await runner.stop("test")


async def test_a_large_burst_at_an_idle_runner_waits_out_a_pause_for_the_rest(monkeypatch):
    # Once BURST_SIZE requests are in at an idle runner, a pause past BURST_GAP_S does not
    # start the batch while more requests are on their way: the late ones would be
    # prefilled after the first decode steps, and the whole batch decode slower.
    # Both gaps short, so that only the on-their-way rule can hold the pause; BURST_SIZE 1
    # so that the first three need no timing of theirs to gather (a loaded machine).
    runner, engine = await gathering(monkeypatch, gap_s=0.05)
    monkeypatch.setattr(thread, "BURST_SIZE", 1)
    monkeypatch.setattr(thread, "BURST_GAP_IDLE_S", 0.05)
    monkeypatch.setattr(thread, "BURST_MAX_IDLE_S", 10.0)

    async def arrive(i: int) -> list:
        with job_scope():  # on their way from now until submitted
            await asyncio.sleep(0 if i < 3 else 0.4)  # three, then a pause, then three
            return await drain(runner, runner.submit(ask(f"r{i}")))

    await asyncio.gather(*(arrive(i) for i in range(6)))
    assert engine.sizes[0] == 6, engine.sizes
    await runner.stop("test")


async def test_a_small_burst_at_an_idle_runner_starts_after_the_short_gap(monkeypatch):
    # Below BURST_SIZE the short gap holds: two requests do not wait for a third.
    runner, engine = await gathering(monkeypatch, gap_s=0.3)  # generous for the first two
    monkeypatch.setattr(thread, "BURST_SIZE", 3)
    monkeypatch.setattr(thread, "BURST_MAX_IDLE_S", 10.0)

    async def arrive(i: int) -> list:
        with job_scope():
            await asyncio.sleep(0 if i < 2 else 1.2)
            return await drain(runner, runner.submit(ask(f"r{i}")))

    await asyncio.gather(*(arrive(i) for i in range(3)))
    assert engine.sizes[0] == 2, engine.sizes
    await runner.stop("test")


async def test_a_lone_request_with_nothing_on_its_way_starts_without_waiting(monkeypatch):
    runner, engine = await gathering(monkeypatch, gap_s=5.0)  # were it waited for: seen
    with job_scope():
        assert on_their_way() == 1
        started = time.perf_counter()
        job = runner.submit(ask("alone"))
        assert on_their_way() == 0  # submitted: no longer on its way
        await drain(runner, job)
    assert time.perf_counter() - started < 2.5
    assert engine.sizes[0] == 1
    await runner.stop("test")


async def test_a_request_of_several_jobs_is_on_its_way_until_its_last_is_submitted(monkeypatch):
    # `n` answers or several prompts: each submitted when it is ready, as one group.
    runner, engine = await gathering(monkeypatch)
    with job_scope():
        expect_jobs(3)
        jobs = []
        for i in range(3):
            jobs.append(runner.submit(ask(f"choice {i}")))
            assert on_their_way() == (1 if i < 2 else 0)
            await asyncio.sleep(0.02)
        await asyncio.gather(*(drain(runner, job) for job in jobs))
    assert engine.sizes[0] == 3, engine.sizes
    await runner.stop("test")


async def drain_rest(results) -> list:
    return [o async for o in results]


def listen() -> list:
    """Every event emitted from here to the end of the calling test's task (a context
    variable: set in the test's own context, it leaves with it)."""
    seen: list = []
    LISTENERS.set((*LISTENERS.get(), seen.append))
    return seen


async def test_a_failed_batch_step_fails_every_request_in_it_and_the_runner_goes_on():
    events = listen()
    model = ModelConfig(id="m", engine="scripted", concurrency=3)
    engine = RecordingEngine(
        ScriptConfig(reply="a b c d e f g h i j", token_delay=0.05, fail_step=5)
    )
    runner = Runner(model, engine)
    await runner.start()
    jobs = [runner.submit(ask(f"r{i}")) for i in range(3)]
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(drain(runner, job) for job in jobs), return_exceptions=True), 5
    )
    assert all(isinstance(o, EngineFailed) for o in outcomes), outcomes
    assert all("RuntimeError" in o.message for o in outcomes)
    # The slots are freed by callbacks posted after the errors: give them a moment.
    for _ in range(200):
        if runner.running == 0:
            break
        await asyncio.sleep(0.01)
    assert runner.running == 0 and runner.queue_depth == 0
    failures = [e for e in events if isinstance(e, BatchFailed)]
    assert len(failures) == 1 and failures[0].requests == 3
    assert "Traceback" in failures[0].traceback and "fail_step" in failures[0].traceback
    after = await drain(runner, runner.submit(ask("next")))  # a fresh batch serves the next
    assert isinstance(after[-1], Finished) and after[-1].stop_reason == "stop"
    await asyncio.wait_for(runner.stop("test"), 5)


class UnloadingEngine(ScriptedEngine):
    """A scripted engine that, like a real one, cannot count once unloaded (slowly)."""

    def __init__(self) -> None:
        super().__init__(ScriptConfig(reply="fits"))
        self.loaded = False

    def load(self, memory_left=None):
        self.loaded = True
        return super().load(memory_left)

    def unload(self) -> None:
        self.loaded = False

    def count_prompt(self, request):
        time.sleep(0.3)  # meanwhile the idle timer runs out
        if not self.loaded:
            raise RuntimeError("the tokenizer is gone: unloaded while counting")
        return super().count_prompt(request)


async def test_an_admitted_request_holds_its_model_against_the_idle_unload():
    model = ModelConfig(
        id="m",
        engine="scripted",
        residency=OnDemand(idle_ttl="100ms"),
        context=ContextConfig(max=4096, overflow="truncate"),
    )
    runner = Runner(model, UnloadingEngine())
    await runner.start()
    request = msgspec.structs.replace(ask("hello"), overflow="truncate")
    outputs = [o async for o in answer(runner, request)]
    assert isinstance(outputs[-1], Finished)
    await asyncio.sleep(0.3)  # and once it ended, the idle unload comes
    assert runner.state is EngineState.UNLOADED
    await runner.stop("test")


class BrokenUnloadEngine(ScriptedEngine):
    def unload(self) -> None:
        raise RuntimeError("unload broke")


async def test_a_failing_background_task_is_logged_with_its_traceback():
    events = listen()
    model = ModelConfig(id="m", engine="scripted", residency=OnDemand(idle_ttl="50ms"))
    runner = Runner(model, BrokenUnloadEngine(ScriptConfig()))
    await runner.start()
    await drain(runner, runner.submit(ask("x")))  # loads on demand (a background task)
    await asyncio.sleep(0.3)  # the idle unload runs, in the background, and fails
    failed = [e for e in events if isinstance(e, TaskFailed)]
    assert [e.task for e in failed] == ["idle unload m"]
    assert "unload broke" in failed[0].error and "Traceback" in failed[0].traceback


async def test_a_job_ends_with_its_scope_even_when_nobody_ever_reads_its_results():
    runner, engine = make_runner(reply=" ".join(["w"] * 100), delay=0.02)
    await runner.start()
    with job_scope():  # as an HTTP request whose body generator never started
        runner.submit(ask("orphan"))
        queued = runner.submit(ask("queued"))
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.1)
    assert engine.ended == [("orphan", "cancelled")]
    assert queued.is_cancelled() and runner.running == 0 and runner.queue_depth == 0
    await runner.stop("test")


async def test_a_hold_ends_with_its_scope_even_when_its_block_is_never_left():
    runner, _ = make_runner()
    await runner.start()
    with job_scope():  # a request whose answer generator is never closed (still referenced)
        holder = runner.hold()
        await holder.__aenter__()
    await asyncio.wait_for(runner.stop("test"), 2)  # stop waits for nothing left
    assert holder is not None


async def test_a_lone_requests_first_token_is_taken_by_the_loop_before_the_next_step(monkeypatch):
    # The model thread waits for the reader to take the first token (and write its frame)
    # before it builds the next step, which would otherwise hold the GIL meanwhile.
    monkeypatch.setattr(thread, "FIRST_FRAME_WAIT_S", 5.0)  # a loaded CI machine is slow
    order: list[str] = []
    hand_out = thread.ModelThread._hand_out

    def noted_hand_out(self, steps):
        order.append("loop took " + ",".join(type(o).__name__ for _, o in steps))
        hand_out(self, steps)

    monkeypatch.setattr(thread.ModelThread, "_hand_out", noted_hand_out)
    engine = BatchSizeEngine(ScriptConfig(reply="a b c", token_delay=0))
    open_batch = engine.open_batch

    def noting_batch():
        batch = open_batch()
        step = batch.step

        def noted_step():
            order.append("step")
            return step()

        batch.step = noted_step
        return batch

    engine.open_batch = noting_batch
    runner = Runner(ModelConfig(id="m", engine="scripted", concurrency=4), engine)
    await runner.start()
    await drain(runner, runner.submit(ask("alone")))
    first = next(i for i, o in enumerate(order) if o.startswith("loop took") and "TextDelta" in o)
    # The scripted batch's first step makes the first token: the loop takes it before the
    # second step begins.
    assert order[:first].count("step") == 1, order
    await runner.stop("test")


class TrimCountingEngine(ScriptedEngine):
    """The scripted engine, noting each trim (an MLX engine's `mx.clear_cache`)."""

    def __init__(self, script: ScriptConfig) -> None:
        super().__init__(script)
        self.trims = 0

    def trim(self) -> None:
        self.trims += 1


async def test_an_idle_model_is_trimmed_after_a_delay_and_not_while_requests_keep_coming(
    monkeypatch,
):
    # The trim holds the GIL while MLX frees its buffers: it waits until the model has
    # been idle TRIM_AFTER_S, so a request arriving meanwhile never waits behind it.
    monkeypatch.setattr(thread, "TRIM_AFTER_S", 0.3)
    engine = TrimCountingEngine(ScriptConfig(reply="a b", token_delay=0))
    runner = Runner(ModelConfig(id="m", engine="scripted", concurrency=4), engine)
    await runner.start()
    for i in range(4):  # one request after another, each within the delay of the last
        await drain(runner, runner.submit(ask(f"r{i}")))
        await asyncio.sleep(0.05)
    assert engine.trims == 0
    await asyncio.sleep(0.6)
    assert engine.trims == 1  # once, after the last one
    await drain(runner, runner.submit(ask("later")))
    await runner.stop("test")  # the timer the last request set goes with the runner
    await asyncio.sleep(0.6)
    assert engine.trims == 1
