"""One request of a batch, token by token: the record both batch generators' sequences keep
(the text engine's on mlx-lm, the vision engine's on mlx-vlm), each token through its
detokenizer and output parser, and its `Finished` when it ends."""

from __future__ import annotations

import time
from collections.abc import Callable, Container
from dataclasses import dataclass

from engines.text.output import OutputParser
from schemas.canonical import Output, PromptRead


@dataclass
class Sequence:
    """One request in the batch and what is known of it so far."""

    uid: int
    parser: OutputParser
    detokenizer: object
    cancelled: Callable[[], bool]
    prompt_tokens: int
    started: float
    reused: int = 0  # prompt tokens served from a parked or block cache
    reused_disk: int = 0  # of those, read from the disk tier
    disk_load_s: float = 0.0
    writing: int = 0  # prompt tokens past `reused` it means to leave in a tier at its end
    written: int = 0  # those it left there when it ended
    evicted: bool = False  # parking this conversation evicted another one
    images: int = 0
    image_tokens: int = 0
    first_at: float | None = None
    new_tokens: int = 0
    job: object = None  # the engine's prepared request, where the batch needs it again
    drafter: object = None  # its drafter (lookup.py, draft_model.py), when it speculates
    kv_wait_s: float = 0.0  # waited for room in the batch's KV pool (engines/llm/pool.py)

    def take(
        self, token: int | None, finish_reason: str | None, eos: Container[int]
    ) -> tuple[list[Output], str | None]:
        """One generated token (None: none this step) through the detokenizer and the parser:
        its outputs, and why the sequence ends (`stop_string`, the generator's reason) or None.

        An end-of-sequence token is neither counted nor detokenized. The first call tells
        how the prompt was read (`PromptRead`) before anything else."""
        read: list[Output] = []
        if self.first_at is None:
            self.first_at = time.perf_counter()
            read.append(
                PromptRead(
                    prompt_tokens=self.prompt_tokens,
                    cached_tokens=self.reused,
                    writing_tokens=self.writing,
                )
            )
        detokenizer, parser = self.detokenizer, self.parser
        if token is not None:
            if token not in eos:
                self.new_tokens += 1
                detokenizer.add_token(token)
            if self.drafter is not None:
                self.drafter.extend([token])
        if finish_reason is not None:
            detokenizer.finalize()
        # A token inside a word or a character adds no text yet (the detokenizer holds it):
        # the parser has nothing new to see.
        segment = detokenizer.last_segment
        outputs = parser.feed(segment) if segment else []
        return read + outputs, "stop_string" if parser.stopped else finish_reason

    def kept(self, tokens: int) -> None:
        """The conversation's first `tokens` are now in a tier: the prompt's part of them
        past what it reused is what it wrote there."""
        self.written = max(0, min(tokens, self.prompt_tokens) - self.reused)

    def finish(self, reason: str) -> list[Output]:
        """What ends it (`OutputParser.end`), with its counts."""
        return self.parser.end(
            reason,
            started=self.started,
            first_at=self.first_at,
            prompt_tokens=self.prompt_tokens,
            new_tokens=self.new_tokens,
            reused_prefix_tokens=self.reused,
            reused_disk_tokens=self.reused_disk,
            cache_written_tokens=self.written,
            disk_load_s=self.disk_load_s,
            session_evicted=self.evicted,
            images=self.images,
            image_tokens=self.image_tokens,
            drafted_tokens=self.drafter.drafted if self.drafter is not None else 0,
            accepted_tokens=self.drafter.accepted if self.drafter is not None else 0,
            kv_wait_s=self.kv_wait_s,
        )


def cancelled_uids(sequences: dict) -> list[int]:
    """The uids of `sequences` (uid → (key, Sequence)) whose requests were cancelled."""
    return [uid for uid, (_, seq) in sequences.items() if seq.cancelled()]
