"""Continuous batching and prefix reuse on mlx-lm's `BatchGenerator` and `LRUPromptCache`.

Every admitted request is one sequence of the batch: one forward pass decodes them all.
A request whose prompt starts like a conversation seen before continues from that KV cache
(`prefix_reuse`); finished conversations are parked in `session_slots` caches, least
recently used evicted first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from engines.batch import Step
from schemas.canonical import ChatRequest, Finished
from schemas.config import ModelConfig

# The cache trie keys entries by model; one batch serves one model.
CACHE_KEY = "model"


@dataclass
class Sequence:
    """One request in the batch and what is known of it so far."""

    uid: int
    parser: object
    detokenizer: object
    cancelled: Callable[[], bool]
    prompt_tokens: int
    reused: int
    evicted: bool
    started: float
    first_at: float | None = None
    new_tokens: int = 0
    outputs: list = field(default_factory=list)


class MLXBatch:
    def __init__(self, engine, model, tokenizer, config: ModelConfig) -> None:
        from mlx_lm.generate import BatchGenerator
        from mlx_lm.models.cache import LRUPromptCache

        self._engine = engine
        self._tokenizer = tokenizer
        eos = sorted(tokenizer.eos_token_ids)
        self._generator = BatchGenerator(
            model,
            stop_tokens=[[t] for t in eos],
            completion_batch_size=config.concurrency,
            prefill_batch_size=config.concurrency,
        )
        self._eos = set(eos)
        slots = config.session_slots if engine.parked_bytes else 0
        # Bounded in bytes too: the budget counts the parked caches at this limit.
        self._cache = (
            LRUPromptCache(max_size=slots, max_bytes=engine.parked_bytes) if slots else None
        )
        self._sequences: dict[int, tuple[Hashable, Sequence]] = {}
        # The parked conversations, oldest first: the order in which the cache evicts.
        self._parked: OrderedDict[tuple[int, ...], None] = OrderedDict()

    @property
    def active(self) -> int:
        return len(self._sequences)

    def add(self, key: Hashable, request: ChatRequest, cancelled: Callable[[], bool]) -> None:
        job = self._engine.prepare(request)  # a seeded request's sampler has its own key
        cache, rest = self._nearest_cache(job.prompt)
        reused = len(job.prompt) - len(rest)
        (uid,) = self._generator.insert(
            [rest],
            max_tokens=[job.max_tokens],
            caches=[cache],
            all_tokens=[job.prompt[:reused]],
            samplers=[job.sampler],
        )
        self._sequences[uid] = (
            key,
            Sequence(
                uid=uid,
                parser=job.parser,
                detokenizer=self._tokenizer.detokenizer,
                cancelled=cancelled,
                prompt_tokens=len(job.prompt),
                reused=reused,
                evicted=False,
                started=time.perf_counter(),
            ),
        )

    def step(self) -> list[Step]:
        out: list[Step] = []
        gone = [uid for uid, (_, seq) in self._sequences.items() if seq.cancelled()]
        if gone:
            self._generator.remove(gone)
            for uid in gone:
                key, seq = self._sequences.pop(uid)
                out += [(key, o) for o in self._finish(seq, "cancelled")]
        if not self._sequences:
            return out
        for response in self._generator.next_generated():
            if response.uid not in self._sequences:
                continue
            key, seq = self._sequences[response.uid]
            seq.first_at = seq.first_at or time.perf_counter()
            ended = response.finish_reason is not None
            if response.token not in self._eos:
                seq.new_tokens += 1
                seq.detokenizer.add_token(response.token)
            if ended:
                seq.detokenizer.finalize()
            outputs = seq.parser.feed(seq.detokenizer.last_segment)
            reason = None
            if seq.parser.stopped:
                reason = "stop_string"
                if not ended:
                    self._generator.remove([response.uid])
            elif ended:
                reason = response.finish_reason
                self._park(response.all_tokens, response.prompt_cache, seq)
            out += [(key, o) for o in outputs]
            if reason:
                del self._sequences[response.uid]
                out += [(key, o) for o in self._finish(seq, reason)]
        return out

    def _finish(self, seq: Sequence, reason: str) -> list:
        outputs = seq.parser.finish()
        if seq.parser.tool_calls and reason == "stop":
            reason = "tool_calls"
        ended = time.perf_counter()
        first = seq.first_at or ended
        return [
            *outputs,
            Finished(
                stop_reason=reason,
                prompt_tokens=seq.prompt_tokens,
                new_tokens=seq.new_tokens,
                prefill_s=first - seq.started,
                decode_s=ended - first,
                reused_prefix_tokens=seq.reused,
                session_evicted=seq.evicted,
            ),
        ]

    def _nearest_cache(self, prompt: list[int]):
        """The parked cache sharing the longest prefix with `prompt`, and the tokens left."""
        if self._cache is None:
            return None, prompt
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        cache, rest = self._cache.fetch_nearest_cache(CACHE_KEY, prompt)
        if cache is not None and not rest:
            # An exact hit: the last prompt token must still go through the model.
            if not can_trim_prompt_cache(cache):
                return None, prompt
            trim_prompt_cache(cache, 1)
            rest = prompt[-1:]
        return cache, rest

    def _park(self, tokens, cache, seq: Sequence) -> None:
        """Park a finished conversation's cache; `seq.evicted` says if another was pushed out.

        LRUPromptCache lists its entries nowhere public, so the batch keeps its own list of
        them, in the cache's own order: re-parking moves an entry to the back, entries that
        are prefixes of a trimmable one are superseded (dropped, not evicted), and whatever
        the cache then holds fewer of (past `session_slots` or the byte limit) left from the
        front.
        """
        from mlx_lm.models.cache import can_trim_prompt_cache

        if self._cache is None or cache is None:
            return
        key = tuple(tokens)
        self._cache.insert_cache(CACHE_KEY, list(key), cache)
        self._parked.pop(key, None)
        if can_trim_prompt_cache(cache):
            for older in [k for k in self._parked if key[: len(k)] == k]:
                del self._parked[older]
        self._parked[key] = None
        seq.evicted = False
        while len(self._parked) > len(self._cache):
            self._parked.popitem(last=False)
            seq.evicted = True
