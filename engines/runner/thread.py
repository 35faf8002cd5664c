"""The model's own thread: step the batch, deliver each output to its job, survive a break.

`ModelThread` is the part of a `Runner` that runs its admitted jobs. The runner hands it
each job on the event loop (`hand`); the worker thread it starts (`serve_if_needed`) takes
them from an inbox into the engine's batch and steps it until no job is left. That thread
touches only the inbox, the batch and the jobs in it; everything else it posts back to the
event loop, where the count of running jobs is kept and the runner hears of a freed slot.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import queue
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from engines import timeline
from engines.base import Engine
from engines.batch import Batch
from engines.errors import EngineFailed, ModelUnavailable
from engines.job import Job, Pace, on_their_way
from engines.log import emit
from schemas.canonical import (
    AudioChunk,
    ChatRequest,
    Embedded,
    EmbedRequest,
    Finished,
    Output,
    ReasoningDelta,
    Reranked,
    RerankRequest,
    SpeechRequest,
    Spoken,
    TextDelta,
    ToolCallOutput,
    Transcribed,
    TranscribeRequest,
)
from schemas.config import ModelConfig, seconds
from schemas.config_keys import LOCAL
from schemas.events import BatchFailed, Generated

# A burst of arrivals (many clients at once) joins the batch as one group. Stepping between
# arrivals would make each trickle its own prefill pass, behind a decode step of everything
# already running (70 ms at 128 sequences of a 1B model on an H200), so the last arrival's
# first token would wait for them all; and on CUDA a batch that grew by joins decoded 128
# sequences 0.63x as fast as the same batch started at once (bench/gpu/batch_ab.py). While
# requests keep arriving (each within BURST_GAP_S of the last), the thread admits them
# before it steps, for at most BURST_MAX_S; a request reaching an idle batch waits
# BURST_GAP_S for company too (unless the model decodes one request at a time, or no request
# is on its way: being read and routed by the event loop, `engines.job.on_their_way`; a
# single stream's first token waited 2 ms for nothing before). A fixed 0.3 s window for a
# burst reaching an idle batch was tried on the H200 and dropped: each admission renders and
# tokenizes its prompt on this thread, on the GIL the event loop needs for the arrivals, so
# 128 arrivals spread over 219-258 ms instead of 149 and 128 clients reached 0.61-0.67 of
# raw instead of 0.71 (bench/RESULTS.md, runs 18-20). The idle batch's rule below ends as
# soon as the burst is in (its arrivals spread over 159 ms against 138, run 57).
BURST_GAP_S = 0.002
BURST_MAX_S = 0.1
# A burst reaching an idle batch (nothing decoding, so waiting holds no stream back) is
# gathered longer, so that it starts as one batch: once BURST_SIZE requests are in, until
# none comes for BURST_GAP_IDLE_S and none is on its way (`on_their_way`: being read and
# routed), for at most BURST_MAX_IDLE_S. With clients in four processes on the H200, 128
# arrivals spread over 96-176 ms with pauses of 15-45 ms between them, and the 2 ms gap
# split them into 2-4 groups: the last, a sixth to a half of the burst, had its first token
# 100-300 ms after the rest (prefilled after their first decode steps). Gathered so, every
# burst started whole, and its last first token came 320 ms after the first request, not
# 429 (bench/RESULTS.md, run 57). A smaller burst keeps the 2 ms gap: its first token is
# soon, and a pause costs it.
BURST_SIZE = 8
BURST_GAP_IDLE_S = 0.025
BURST_MAX_IDLE_S = 0.25

# A lone request's first token: the model thread waits (the GIL free) until the request's
# reader has taken it (and written its frame: `Runner.results`), at most this long, before it
# builds its next step.
# Without, the loop takes the GIL only when that step's Python is done: on an H200 the
# hand-over took 1.2 ms and the first frame 1.1 ms more (bench/timeline.py, run 16), all of it
# time to first token. In a batch the wait would idle the device for every sequence instead.
FIRST_FRAME_WAIT_S = 0.005

# What a burst left in the engine's buffer cache is given back once the model has been idle
# this long, not the moment its batch runs dry: `mx.clear_cache()` keeps the GIL while it
# frees (bench/gpu/clear_cache_gil.py: 13.8-16.0 ms for the ~4 GiB a 128-stream burst of a 1B
# model leaves on an H200, 2.2-2.4 ms for 27 MiB on the 2-core CPU), so at every burst's end
# the event loop, every stream and every other model waited for it. A request within the
# delay finds the cache as its predecessors left it, and nothing is freed under steady load.
TRIM_AFTER_S = 1.0


class ModelThread:
    """Runs a model's admitted jobs on its one worker thread, `concurrency` at a time."""

    def __init__(
        self,
        settings: Callable[[], ModelConfig],
        engine: Engine,
        executor: ThreadPoolExecutor,
        *,
        freed: Callable[[], None],
        stopped: Callable[[], None],
        capacity: Callable[[], int],
    ) -> None:
        """`executor` is the runner's single worker (loads run on it too: one thread per
        model). On the loop, `freed` is called when a job has ended and `stopped` when the
        thread has run dry; the runner admits more then."""
        self._settings = settings
        self._engine = engine
        self._executor = executor
        self._freed = freed
        self._stopped = stopped
        self._capacity = capacity  # requests decoded together, as the load sized them
        self.running = 0  # jobs handed over and not ended; kept on the loop
        # Admitted jobs cross to the model's thread here; only that thread reads it.
        self._inbox: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._in_batch: set[Job] = set()  # touched only on the model's thread
        self._batch: Batch | None = None  # made and used only on the model's thread
        self._serving = False
        self._trim_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context = contextvars.copy_context()  # replaced by `bind`'s
        # `experts:`: the expert cache's counts as each job started (its `generated` says
        # the look-ups between then and its end); kept on the loop, dropped with the job.
        self._expert_marks: weakref.WeakKeyDictionary[Job, object] = weakref.WeakKeyDictionary()

    def bind(self, loop: asyncio.AbstractEventLoop, context: contextvars.Context) -> None:
        """The loop to post back to, and the context its callbacks run in (the runner's)."""
        self._loop, self._context = loop, context

    def hand(self, job: Job) -> None:
        """On the loop: take an admitted job; it starts with the thread's next step."""
        self.running += 1
        job.started_at = time.perf_counter()
        if (experts := getattr(self._engine, "experts", None)) is not None:
            self._expert_marks[job] = experts.counts.copy()
        self.cancel_trim()  # busy again: what is cached serves this job, no trim
        if timeline.ON:  # out of the queue, to the model's thread
            timeline.mark("inbox")
        self._inbox.put(job)
        # A batch whose step() blocks on I/O (engine upstream) is woken to take it now.
        if self._batch is not None:
            self._batch.wake()

    def serve_if_needed(self) -> None:
        """On the loop: start the thread's serving loop when jobs run and it is not going."""
        if self.running and not self._serving:
            self._serving = True
            future = self._loop.run_in_executor(self._executor, self._serve)
            future.add_done_callback(self._served)

    def cancel_trim(self) -> None:
        """On the loop: the pending trim, if any, is called off (a job came, or the runner
        stops); the thread ending dry again sets the next."""
        if self._trim_timer is not None:
            self._trim_timer.cancel()
            self._trim_timer = None

    def drop_batch(self) -> None:
        """On the model's thread, before the engine unloads: the batch goes with it."""
        self._batch = None

    def _served(self, future: asyncio.Future[None]) -> None:
        self._serving = False
        error = future.exception()
        if error is not None:  # a bug of the runner itself: end what it held, say so loudly
            self._fail_batch(error)
        self._stopped()
        if not self.running and not self._serving and self._trim_timer is None:
            self._trim_timer = self._loop.call_later(
                TRIM_AFTER_S, self._trim_if_idle, context=self._context
            )

    def _finished_one(self) -> None:
        self.running -= 1
        self._freed()

    def _serve(self) -> None:
        """On the runner's thread: step the batch until no admitted request is left.

        When the batch breaks (a step raises), every request in it ends with one clean
        `EngineFailed`, the failure is logged once with its traceback, and the next admitted
        requests get a fresh batch: the runner stays usable.
        """
        try:
            if self._batch is None:
                self._batch = self._engine.open_batch()
        except Exception as error:  # no batch at all: what waits in the inbox cannot run
            while not self._inbox.empty():
                self._in_batch.add(self._inbox.get_nowait())
            self._fail_batch(error)
            return
        batch = self._batch
        pace = Pace(self._settings().rate.max_tokens_per_sec)
        held = Held()
        while True:
            idle = not batch.active
            if self._admit_waiting(batch):  # perhaps the first of a burst
                self._gather_burst(batch, idle)
            if not batch.active:  # (each request ends with an output never held)
                return
            stepping = batch.active
            try:
                if timeline.ON:
                    timeline.mark("step", stepping)
                steps = batch.step()
                if timeline.ON:
                    timeline.mark("stepped", len(steps))
                if steps and held.keep(steps, stepping, self._stream_interval()):
                    self._deliver_step(held.take(), alone=stepping == 1)
            except Exception as error:  # the batch broke: every request in it ends
                if held.outputs:  # what it made before the break goes out first
                    self._deliver_step(held.take())
                self._fail_batch(error)
                return
            pace.wait(stepping)

    def _stream_interval(self) -> float:
        """The model's `stream_interval` in force (a reload changes it between two steps).
        0 for an engine whose step waits on I/O (a remote's): it could hold text until
        its next output."""
        settings = self._settings()
        return seconds(settings.stream_interval) if settings.engine in LOCAL else 0.0

    def _admit_waiting(self, batch: Batch) -> int:
        """Admit every job in the inbox; how many there were."""
        count = 0
        while not self._inbox.empty():
            self._admit(batch, self._inbox.get_nowait())
            count += 1
        return count

    def _gather_burst(self, batch: Batch, idle: bool) -> None:
        """Admit arrivals until none comes for BURST_GAP_S (the event loop, not held back by
        this thread meanwhile, takes them in), the batch is full, or BURST_MAX_S passed.
        `idle`: the burst reached a batch with nothing decoding; then, once BURST_SIZE
        requests are in, the gap is BURST_GAP_IDLE_S, and it waits for any on their way,
        for at most BURST_MAX_IDLE_S."""
        if batch.active == 1 and not on_their_way():
            return  # alone, and no request on its way to any model: no company to wait for
        deadline = time.perf_counter() + (BURST_MAX_IDLE_S if idle else BURST_MAX_S)
        while batch.active < self._capacity():
            large = idle and batch.active >= BURST_SIZE
            gap = BURST_GAP_IDLE_S if large else BURST_GAP_S
            wait = min(gap, deadline - time.perf_counter())
            if wait <= 0:
                return
            try:
                job = self._inbox.get(timeout=wait)
            except queue.Empty:
                if large and on_their_way():
                    continue  # the rest of the burst is still being read and routed
                return
            self._admit(batch, job)
            self._admit_waiting(batch)

    def _trim_if_idle(self) -> None:
        """On the loop, TRIM_AFTER_S after the thread ran dry: trim on the model's thread,
        unless a job came meanwhile (it cancels the timer; this checks again)."""
        self._trim_timer = None
        if not self.running and not self._serving:
            future = self._loop.run_in_executor(self._executor, self._trim)
            future.add_done_callback(_ignore_trim_failure)

    def _trim(self) -> None:
        """The model is idle: let the engine give back what the burst left cached (MLX
        keeps freed buffers of every shape it met for reuse, growing after each burst)."""
        if timeline.ON:
            timeline.mark("trim")
        self._engine.trim()
        if timeline.ON:
            timeline.mark("trimmed")

    def _fail_batch(self, error: Exception) -> None:
        """End every request of a broken batch with `EngineFailed`, and log it once."""
        self._batch = None
        jobs = list(self._in_batch)  # `_deliver` removes from the set: iterate over a copy
        self._post(
            emit,
            BatchFailed(
                model=self._settings().id,
                requests=len(jobs),
                error=f"{type(error).__name__}: {error}",
                traceback="".join(traceback.format_exception(error)),
            ),
            level="error",
        )
        # A model that cannot take requests now (its process restarting) says so as itself:
        # a 503 with Retry-After, not a generation failure.
        failed = error
        if not isinstance(error, ModelUnavailable):
            failed = EngineFailed(self._settings().id, error)
        for job in jobs:
            self._deliver(job, failed)

    def _post(self, call, *args, **kwargs) -> None:
        """Run `call` on the event loop (from the model's thread)."""
        self._loop.call_soon_threadsafe(
            functools.partial(call, *args, **kwargs), context=self._context
        )

    def _admit(self, batch: Batch, job: Job) -> None:
        if isinstance(job.request, SpeechRequest):
            # Read aloud whole, each piece of audio handed out as it is made; a client that
            # left stops it at the next piece.
            try:
                spoken = self._engine.speak(
                    job.request,
                    on_chunk=lambda data: self._deliver(job, AudioChunk(data=data)),
                    cancelled=job.is_cancelled,
                )
                self._deliver(job, spoken)
            except Exception as error:
                self._deliver(job, error)
            return
        if isinstance(job.request, EmbedRequest | RerankRequest | TranscribeRequest):
            # One call answers it whole: it never joins the batch.
            call = (
                self._engine.embed
                if isinstance(job.request, EmbedRequest)
                else self._engine.rerank
                if isinstance(job.request, RerankRequest)
                else self._engine.transcribe
            )
            if isinstance(job.request, TranscribeRequest) and job.request.stream:
                # Each segment's text goes out as it is decoded, before the whole.
                call = functools.partial(
                    call, on_segment=lambda text: self._deliver(job, TextDelta(text=text))
                )
            try:
                self._deliver(job, call(job.request))
            except Exception as error:
                self._deliver(job, error)
            return
        try:
            if timeline.ON:
                timeline.mark("admit")
            # In the request's log context, so events an engine emits there carry its id.
            job.context.copy().run(batch.add, job, job.request, job.is_cancelled)
            self._in_batch.add(job)
            if timeline.ON:  # the prompt is rendered and tokenized; the next step prefills
                timeline.mark("admitted")
        except Exception as error:  # e.g. a prompt past the window: this request's alone
            self._deliver(job, error)

    def _deliver(self, job: Job, output: Output | Exception) -> None:
        """Post one output to its job's channel; the last one also frees the job's slot."""
        post = self._loop.call_soon_threadsafe
        if (
            isinstance(output, TextDelta | ReasoningDelta | ToolCallOutput | AudioChunk)
            and not job.first_token_at
        ):
            job.first_token_at = time.perf_counter()
        if isinstance(output, Finished | Embedded | Reranked | Transcribed | Spoken):
            # Reported even when nobody reads on (client gone): ops see what it cost.
            post(self._report, job, output, context=job.context)
        post(job.spend, output)
        post(job.outputs.put_nowait, output)
        if isinstance(output, Finished | Embedded | Reranked | Transcribed | Spoken | Exception):
            self._in_batch.discard(job)
            post(self._finished_one)

    def _deliver_step(self, steps: list, *, alone: bool = False) -> None:
        """A step's outputs, every job's, to the event loop in one hop (not one per token).

        `alone`: the step was one sequence's; if it made that request's first token, this
        thread waits until its reader has taken it (FIRST_FRAME_WAIT_S at most)."""
        now = time.perf_counter()
        taken = None
        for job, output in steps:
            if (
                isinstance(output, TextDelta | ReasoningDelta | ToolCallOutput)
                and not job.first_token_at
            ):
                job.first_token_at = now
                if alone:
                    taken = job.taken = threading.Event()
            if isinstance(output, Finished | Exception):
                self._in_batch.discard(job)
        if timeline.ON:  # before the call: the loop may run it before this thread goes on
            timeline.mark("handed", len(steps))
        self._loop.call_soon_threadsafe(self._hand_out, steps, context=self._context)
        if taken is not None:
            taken.wait(FIRST_FRAME_WAIT_S)

    def _hand_out(self, steps: list) -> None:
        """On the loop: post each output to its job's channel, in the order the step made."""
        if timeline.ON:
            timeline.mark("loop", len(steps))
        for job, output in steps:
            if isinstance(output, Finished):
                # Reported even when nobody reads on (client gone): ops see what it cost.
                job.context.run(self._report, job, output)
            job.spend(output)
            job.outputs.put_nowait(output)
            if isinstance(output, Finished | Exception):
                self._finished_one()

    def _report(
        self, job: Job, done: Finished | Embedded | Reranked | Transcribed | Spoken
    ) -> None:
        documents, audio_seconds, audio_out, rtf = 0, 0.0, 0.0, None
        if isinstance(done, Spoken):
            reason, audio_out = "spoken", round(done.audio_seconds, 3)
            rtf = round(done.seconds / done.audio_seconds, 4) if done.audio_seconds else None
            done = Finished(
                stop_reason="stop",
                prompt_tokens=0,  # phonemes and frames are not tokens: the token
                new_tokens=0,  # metrics (and tok/s) stay the text models'
                prefill_s=0.0,
                decode_s=done.seconds,
            )
        elif isinstance(done, Transcribed):
            reason, audio_seconds = "transcribed", round(done.audio_seconds, 3)
            rtf = round(done.seconds / done.audio_seconds, 4) if done.audio_seconds else None
            done = Finished(
                stop_reason="stop",
                prompt_tokens=0,
                new_tokens=done.new_tokens,
                prefill_s=0.0,
                decode_s=done.seconds,
            )
        elif isinstance(done, Embedded | Reranked):
            reason = "embedded" if isinstance(done, Embedded) else "reranked"
            if isinstance(done, Reranked):
                documents = len(done.scores)
            done = Finished(
                stop_reason="stop",
                prompt_tokens=done.prompt_tokens,
                new_tokens=0,
                prefill_s=done.seconds,
                decode_s=0.0,
            )
        else:
            reason = done.stop_reason
        first = job.first_token_at
        experts = self._expert_counts(job)
        emit(
            Generated(
                # An adapter's request (`adapters:`) is counted under the adapter's model id.
                model=getattr(job.request, "adapter", None) or self._settings().id,
                prompt_tokens=done.prompt_tokens,
                new_tokens=done.new_tokens,
                prefill_s=round(done.prefill_s, 4),
                decode_s=round(done.decode_s, 4),
                queue_wait_s=round(job.started_at - job.enqueued_at, 4),
                ttft_s=None if first is None else round(first - job.enqueued_at, 4),
                stop_reason=reason,
                reused_prefix_tokens=done.reused_prefix_tokens,
                reused_ram_tokens=done.reused_prefix_tokens - done.reused_disk_tokens,
                reused_disk_tokens=done.reused_disk_tokens,
                disk_load_s=round(done.disk_load_s, 4),
                cache_written_tokens=done.cache_written_tokens,
                session_evicted=done.session_evicted,
                truncated_messages=truncated_messages(job.request),
                images=done.images,
                image_tokens=done.image_tokens,
                replica=done.replica if isinstance(done, Finished) else None,
                drafted_tokens=done.drafted_tokens,
                accepted_tokens=done.accepted_tokens,
                documents=documents,
                audio_seconds=audio_seconds,
                audio_out_seconds=audio_out,
                real_time_factor=rtf,
                expert_hits=experts.hits if experts else 0,
                expert_misses=experts.misses if experts else 0,
                expert_bytes_read=experts.bytes_read if experts else 0,
                kv_wait_s=round(done.kv_wait_s, 4),
            )
        )

    def _expert_counts(self, job: Job):
        """The expert look-ups since `job` started (`experts:`), or None: the steps of a
        batch are shared, so requests decoded together each count the steps they shared."""
        mark = self._expert_marks.pop(job, None)
        experts = getattr(self._engine, "experts", None)
        if mark is None or experts is None:
            return None
        return experts.counts.since(mark)


def truncated_messages(
    request: ChatRequest | EmbedRequest | RerankRequest | TranscribeRequest | SpeechRequest,
) -> int:
    """Messages an overflow policy cut from a chat; an embedding, a rerank or a
    transcription has none."""
    return request.truncated_messages if isinstance(request, ChatRequest) else 0


def _ignore_trim_failure(future: asyncio.Future[None]) -> None:
    """A trim that failed (a model process that died meanwhile) frees nothing, and costs
    nothing else: the next request revives or reloads the model as it would anyway."""
    if not future.cancelled():
        future.exception()


HELD_TYPES = (TextDelta, ReasoningDelta)  # what a busy batch may hold back, and join


class Held:
    """A busy batch's outputs, kept back between hand-outs to the event loop
    (`stream_interval`): each stream's text of those steps then goes out as one output, so
    one frame. Handed out at once: a lone stream's, a first token, an end, anything but text,
    and whatever has been held `interval` seconds."""

    def __init__(self) -> None:
        self.outputs: list = []
        self._steps = 0
        self._since = 0.0

    def keep(self, steps: list, stepping: int, interval: float) -> bool:
        """Add a step's outputs; whether to hand them out now."""
        if not self.outputs:
            self._since = time.perf_counter()
        self.outputs += steps
        self._steps += 1
        if stepping < 2 or time.perf_counter() - self._since >= interval:
            return True
        return any(type(o) not in HELD_TYPES or not job.first_token_at for job, o in steps)

    def take(self) -> list:
        """The held outputs, each job's runs of text joined, in each job's own order (one
        step's, as they came: nothing was held)."""
        outputs, self.outputs = self.outputs, []
        steps, self._steps = self._steps, 0
        if steps <= 1:
            return outputs
        by_job: dict[Job, list] = {}
        for job, output in outputs:
            runs = by_job.setdefault(job, [])
            if runs and type(output) in HELD_TYPES and type(runs[-1]) is type(output):
                runs[-1] = type(output)(runs[-1].text + output.text)
            else:
                runs.append(output)
        return [(job, output) for job, runs in by_job.items() for output in runs]
