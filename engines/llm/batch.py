"""Continuous batching on mlx-lm's `BatchGenerator`, with prefix reuse of parked caches.

Every admitted request is one sequence of the batch: one forward pass decodes them all.
A request that has the model to itself decodes on the single-sequence path (`Solo`, the
loop of `mlx_lm.generate_step`); when a second request arrives, its cache and its token
in flight join the batch generator, and both decode together from then on.
A request whose prompt starts like a conversation seen before continues from that KV cache
(`prefix_reuse`, engines/mlx/cache/parked.py).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

from engines import timeline
from engines.batch import Step
from engines.llm.adapters import tag
from engines.llm.pool import fits, reach
from engines.llm.prepared import Prepared
from engines.llm.single import Solo
from engines.llm.speculate import BatchDrafting, batch_positions, make_drafter
from engines.mlx.cache.disk import DiskKV
from engines.mlx.cache.parked import ParkedCaches
from engines.mlx.cache.prefix import reuse_min_tokens
from engines.mlx.draft_model import ModelDrafter
from engines.mlx.logprobs import logprobs_of
from engines.mlx.sequence import Sequence, cancelled_uids
from engines.platform import PlatformPath
from schemas.canonical import ChatRequest
from schemas.config import ModelConfig
from schemas.logprobs import Logprobs

# The uid of the sequence on the single-sequence path (the batch generator's start at 0).
SOLO = -1


def prefill_batch_size(concurrency: int) -> int:
    """How many waiting prompts the batch generator prefills in one forward pass.

    All of them: swept on the H200 against raw `BatchGenerator` (bench/RESULTS.md,
    2026-11-30), prefilling every waiting prompt at once was the fastest at 128 clients
    and within 1-14% of the best (32) at 64; mlx-lm's default of 8 was never the best.
    """
    return concurrency


class BatchHost(Protocol):
    """What a batch asks of the engine that opens it (`MLXEngine`), which it never imports."""

    platform: PlatformPath
    disk: DiskKV | None  # the disk tier under the parked caches (None: off)
    parked_bytes: int  # the byte limits of the parked caches, the draft model's too
    parked_draft_bytes: int
    kv_pool: int | None  # tokens of KV the batch's rows share (None: a window each)

    @property
    def draft_model(self): ...

    def prepare(self, request: ChatRequest, *, aside: bool = False) -> Prepared: ...

    def prompt_logprobs(self, request: ChatRequest, prompt: list[int]) -> Logprobs | None: ...

    def detokenizer(self): ...


@dataclass
class Admitted:
    """A request not yet decoding: what `BatchGenerator.insert` or `Solo` starts from."""

    rest: list[int]
    cache: list | None
    cached: list[int]
    job: object


class MLXBatch:
    def __init__(self, engine: BatchHost, model, tokenizer, config: ModelConfig) -> None:
        from mlx_lm.generate import BatchGenerator

        self._engine = engine
        self._model = model
        self._tokenizer = tokenizer
        eos = sorted(tokenizer.eos_token_ids)
        self._generator = BatchGenerator(
            model,
            stop_tokens=[[t] for t in eos],
            completion_batch_size=config.concurrency,
            prefill_batch_size=prefill_batch_size(config.concurrency),
        )
        # Drafts (`speculation:` or `draft:`), on the single-sequence path and in batches.
        self._config = config
        self._draft_model = engine.draft_model
        speculates = config.speculation is not None or self._draft_model is not None
        self._drafting = (
            BatchDrafting(batch_positions(engine.platform.device)) if speculates else None
        )
        self._solo: Solo | None = None
        self._solo_start: Admitted | None = None
        self._pending: list[Step] = []  # outputs made outside step(): echo, a solo joining
        self._eos = set(eos)
        self._parking = ParkedCaches(
            config.session_slots if engine.parked_bytes else 0,
            engine.parked_bytes,
            engine.parked_draft_bytes,
            reuse_min_tokens(engine.platform.device),
            engine.disk,
            config.id,
        )
        self._disk = engine.disk  # the disk tier under the parked caches (None: off)
        self._sequences: dict[int, tuple[Hashable, Sequence]] = {}
        # Requests waiting, in order, for room in the KV pool its rows share (None: no pool,
        # `concurrency` rows each with a whole window; engines/llm/pool.py).
        self._pool: int | None = engine.kv_pool
        self._waiting: deque[tuple[Hashable, ChatRequest, Sequence]] = deque()

    @property
    def active(self) -> int:
        """The requests it holds: decoding, and waiting for room in the KV pool."""
        return len(self._sequences) + len(self._waiting)

    @property
    def decoding(self) -> int:
        return len(self._sequences)

    def add(
        self,
        key: Hashable,
        request: ChatRequest,
        cancelled: Callable[[], bool],
        prepared: Prepared | None = None,
    ) -> None:
        """`prepared`: the request's `MLXEngine.prepare`, when it was made on its arrival (a
        model's own process prepares each request as it comes, before the burst joins).

        It starts decoding now, or once the KV pool has room for it (engines/llm/pool.py)."""
        # A seeded request's sampler has its own key. The first of an idle batch is
        # tokenized aside: after a burst this thread is a slow place for it
        # (engines/mlx/encode.py).
        aside = not self.active
        job = prepared if prepared is not None else self._engine.prepare(request, aside=aside)
        if timeline.ON:  # the prompt is rendered and tokenized
            timeline.mark("prepared")
        seq = Sequence(
            uid=SOLO,
            parser=job.parser,
            detokenizer=self._engine.detokenizer(),
            cancelled=cancelled,
            prompt_tokens=len(job.prompt),
            started=time.perf_counter(),
            job=job,
        )
        self._waiting.append((key, request, seq))
        self._start_waiting()

    def _start_waiting(self) -> None:
        """Start the requests at the front of the line while the KV pool has room for them."""
        while self._waiting:
            key, request, seq = self._waiting[0]
            rows = (reach(s.prompt_tokens, s.job.max_tokens) for _, s in self._sequences.values())
            if not fits(self._pool, rows, reach(seq.prompt_tokens, seq.job.max_tokens)):
                return
            self._waiting.popleft()
            now = time.perf_counter()
            seq.kv_wait_s, seq.started = now - seq.started, now
            self._start(key, request, seq)

    def _start(self, key: Hashable, request: ChatRequest, seq: Sequence) -> None:
        """Decode `seq` from its nearest parked prefix: alone on the single-sequence path, or
        as a row of the batch generator."""
        job = seq.job
        # A row under an adapter reuses no prefix (and parks none): a base prefix is never
        # read under an adapter, nor the other way round (docs/adapters.md).
        if job.adapter is None:
            cache, rest, hit = self._parking.nearest(job.prompt)
        else:
            cache, rest, hit = None, job.prompt, None
        adapters = getattr(self._engine, "adapters", None)
        if adapters is not None:  # every row says which adapter it runs under, the base's too
            cache = adapters.make_cache(self._model, job.adapter) if cache is None else cache
            tag(cache, job.adapter, job.adapter_scale)
        if timeline.ON:  # the parked caches and the disk tier are searched
            timeline.mark("looked up")
        reused = len(job.prompt) - len(rest)
        echoed = self._engine.prompt_logprobs(request, job.prompt)  # echo's prompt logprobs
        seq.reused = reused
        if self._parking.ram is not None and job.adapter is None:
            seq.writing = len(job.prompt) - reused
        seq.drafter = self._drafter(job)
        if hit is not None:
            seq.reused_disk, seq.disk_load_s = hit.tokens, hit.seconds
        if echoed is not None:  # the prompt's logprobs, before the first token
            self._pending.append((key, echoed))
        admitted = Admitted(rest, cache, job.prompt[:reused], job)
        # Alone: the single-sequence path (which reads no logprobs: those go to the batch).
        if not self._sequences and job.logprobs is None:
            self._solo_start = admitted
            self._sequences[SOLO] = (key, seq)
            return
        if SOLO in self._sequences:
            self._join_solo()
        seq.uid = self._insert(admitted)
        self._sequences[seq.uid] = (key, seq)

    def wake(self) -> None:
        """Nothing to wake: `step()` never waits for arrivals."""

    def step(self) -> list[Step]:
        out, self._pending = self._pending, []
        if self._waiting:
            out += self._cancel_waiting()
        gone = cancelled_uids(self._sequences)
        if gone:
            if SOLO in gone:
                self._solo = self._solo_start = None
            self._generator.remove([uid for uid in gone if uid != SOLO])
            for uid in gone:
                key, seq = self._sequences.pop(uid)
                out += [(key, o) for o in seq.finish("cancelled")]
        if self._waiting:  # rows that ended at the last step left room
            self._start_waiting()
            out, self._pending = out + self._pending, []
        if not self._sequences:
            return out
        if SOLO in self._sequences:
            return out + self._solo_step()
        drafted = None
        if self._drafting is not None:
            drafted = self._drafting.next(self._generator, self._drafter_of)
        sequences = self._sequences
        for response in self._generator.next_generated() if drafted is None else drafted:
            if response.uid in sequences:
                out += self._emit(
                    response.uid,
                    response.token,
                    response.finish_reason,
                    lambda r=response: (r.all_tokens, r.prompt_cache),
                    response.logprobs,
                )
        return out

    def _cancel_waiting(self) -> list[Step]:
        """The end of each waiting request whose client left."""
        out: list[Step] = []
        for entry in [e for e in self._waiting if e[2].cancelled()]:
            self._waiting.remove(entry)
            key, _, seq = entry
            out += [(key, o) for o in seq.finish("cancelled")]
        return out

    def _drafter(self, job):
        """The request's drafter; a draft model's resumes from its parked session's cache."""
        drafter = make_drafter(self._config, self._draft_model, job)
        if isinstance(drafter, ModelDrafter):
            cache, rest = self._parking.nearest_in(job.prompt, self._parking.draft)
            if cache is not None:
                drafter.resume(cache, job.prompt[: len(job.prompt) - len(rest)])
        return drafter

    def _drafter_of(self, uid: int):
        entry = self._sequences.get(uid)
        return entry[1].drafter if entry is not None else None

    def _solo_step(self) -> list[Step]:
        if self._solo is None:
            start, self._solo_start = self._solo_start, None
            self._solo = Solo(
                self._model,
                self._generator.stream,
                start.rest,
                start.cache,
                start.cached,
                start.job,
                self._sequences[SOLO][1].drafter,
            )
        solo = self._solo
        first = solo.emitted
        out = []
        for count, token in enumerate(solo.advance_run(), start=first + 1):
            reason = None
            if token in self._eos:
                reason = "stop"
            elif count >= solo.max_tokens:
                reason = "length"
            out += self._emit(SOLO, token, reason, lambda: (solo.fed, solo.cache))
            if SOLO not in self._sequences:  # it ended
                self._solo = None
                break
        return out

    def _join_solo(self) -> None:
        """Move the single-sequence request into the batch generator, cache and all.

        Its next token is already sampled: it is delivered now (at the next `step`), and
        the generator continues from it with the cache that holds everything before it.
        """
        key, seq = self._sequences.pop(SOLO)
        if self._solo is None:  # admitted but not started: it joins as any new request
            seq.uid = self._insert(self._solo_start)
            self._solo_start = None
            self._sequences[seq.uid] = (key, seq)
            return
        solo, self._solo = self._solo, None
        token = solo.pending()
        solo.emitted += 1
        left = solo.max_tokens - solo.emitted
        reason = "stop" if token in self._eos else None if left > 0 else "length"
        self._sequences[SOLO] = (key, seq)
        self._pending += self._emit(SOLO, token, reason, lambda: (solo.fed, solo.cache))
        if SOLO not in self._sequences:  # it ended on that token
            return
        del self._sequences[SOLO]
        seq.uid = self._insert(Admitted([token], solo.cache, solo.fed, solo.job), max_tokens=left)
        self._sequences[seq.uid] = (key, seq)

    def _insert(self, admitted: Admitted, max_tokens: int | None = None) -> int:
        job = admitted.job
        (uid,) = self._generator.insert(
            [admitted.rest],
            max_tokens=[job.max_tokens if max_tokens is None else max_tokens],
            caches=[admitted.cache],
            all_tokens=[admitted.cached],
            samplers=[job.sampler],
            logits_processors=[list(job.logits_processors)],
        )
        return uid

    def _emit(
        self, uid: int, token: int, finish_reason: str | None, parked, row=None
    ) -> list[Step]:
        """One token of one sequence through its detokenizer and parser; its end if it ends.

        `parked()` gives the tokens and cache to park for prefix reuse when it ends; `row`
        is the step's log-softmax, for a request that asked for logprobs.
        """
        key, seq = self._sequences[uid]
        outputs, reason = seq.take(token, finish_reason, self._eos)
        out = [(key, o) for o in outputs]
        job = seq.job
        if job.logprobs is not None and row is not None and token not in self._eos:
            out.insert(0, (key, logprobs_of(row, token, job.logprobs, job.piece)))
        if not reason:  # most tokens
            return out
        if reason == "stop_string":
            if finish_reason is None and uid != SOLO:
                self._generator.remove([uid])
        elif job.adapter is not None:
            pass  # an adapter's conversation is not parked (see `add`)
        else:
            tokens, cache = parked()
            drafted = seq.drafter.parked if isinstance(seq.drafter, ModelDrafter) else None
            stored = self._parking.park(tokens, cache, drafted, job.keep)
            if stored.evicted is not None:
                seq.evicted = stored.evicted
            seq.kept(stored.kept)
        del self._sequences[uid]
        out += [(key, o) for o in seq.finish(reason)]
        if self._disk is not None and seq.first_at is not None:
            prefill_s = seq.first_at - seq.started - seq.disk_load_s
            self._disk.worth.prefilled(seq.prompt_tokens - seq.reused, prefill_s)
        return out
