"""Continuous batching of a vision model on mlx-vlm's `BatchGenerator`.

The model's thread owns the generator, as mlx-vlm's own server does: each admitted request
is preprocessed (`prepare_inputs`), its images are encoded into input embeddings
(`get_input_embeddings`) and it is inserted; one forward pass then decodes every sequence.
The generator draws all rows with one sampler, so each request's own sampling settings run
as its logits processor: it draws the request's token and leaves only that one possible.
Prefix reuse is mlx-vlm's block cache (APC), salted with the hash of the request's pictures
so that a different picture never shares a block past the text before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from engines.batch import Step
from schemas.canonical import ChatRequest

APC_BLOCK_TOKENS = 16


@dataclass
class Sequence:
    uid: int
    parser: object
    detokenizer: object
    cancelled: Callable[[], bool]
    prompt_tokens: int
    images: int
    image_tokens: int
    started: float
    reused: int = 0
    first_at: float | None = None
    new_tokens: int = 0
    outputs: list = field(default_factory=list)


def drawn_by(sampler: Callable) -> Callable:
    """A logits processor that samples with `sampler` and leaves only its choice possible."""
    import mlx.core as mx

    def process(tokens, logits):
        # mlx-lm's samplers read log-probabilities (top_p and min_p exponentiate them).
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        choice = sampler(logprobs).reshape(-1, 1)
        only = mx.full(logits.shape, -mx.inf, dtype=logits.dtype)
        return mx.put_along_axis(only, choice, mx.array(0, dtype=logits.dtype), axis=-1)

    return process


class VisionBatch:
    def __init__(self, engine, model, processor, eos: list[int], config, window: int) -> None:
        from mlx_vlm.apc import APCManager
        from mlx_vlm.generate import BatchGenerator

        self._engine = engine
        self._model = model
        self._processor = processor
        slots = config.session_slots if config.prefix_reuse else 0
        blocks = slots * window // APC_BLOCK_TOKENS
        apc = APCManager(num_blocks=blocks, block_size=APC_BLOCK_TOKENS) if blocks else None
        self._generator = BatchGenerator(
            model.language_model,
            processor,
            stop_tokens=eos,
            completion_batch_size=config.concurrency,
            prefill_batch_size=config.concurrency,
            apc_manager=apc,
        )
        self._eos = set(eos)
        self._sequences: dict[int, tuple[Hashable, Sequence]] = {}

    @property
    def active(self) -> int:
        return len(self._sequences)

    def add(self, key: Hashable, request: ChatRequest, cancelled: Callable[[], bool]) -> None:
        from mlx_vlm.tokenizer_utils import make_streaming_detokenizer

        inputs, sampler, parser, max_tokens = self._engine.prepare(request)
        tensors = dict(inputs.tensors)
        ids = tensors.pop("input_ids")
        pixels = tensors.pop("pixel_values", None)
        mask = tensors.pop("attention_mask", None)
        # Every row carries input embeddings (the generator's mixed prefill expects it);
        # without pixels this is the token embedding alone: no vision work.
        embedded = self._model.get_input_embeddings(ids, pixels, mask=mask, **tensors)
        kwargs = {k: v for k, v in embedded.to_dict().items() if v is not None}
        # The APC salt: which pictures these image tokens stand for (0: none).
        kwargs["_apc_semantic_hash"] = -min(inputs.keys, default=0) if inputs.images else 0
        (uid,) = self._generator.insert(
            [inputs.ids],
            max_tokens=[max_tokens],
            prompt_kwargs=[kwargs],
            logits_processors=[[drawn_by(sampler)]],
        )
        self._sequences[uid] = (
            key,
            Sequence(
                uid=uid,
                parser=parser,
                detokenizer=make_streaming_detokenizer(self._processor),
                cancelled=cancelled,
                prompt_tokens=len(inputs.ids),
                images=inputs.images,
                image_tokens=inputs.image_tokens,
                started=time.perf_counter(),
            ),
        )

    def wake(self) -> None:
        """Nothing to wake: `step()` never waits for arrivals."""

    def step(self) -> list[Step]:
        out: list[Step] = []
        for uid in [u for u, (_, seq) in self._sequences.items() if seq.cancelled()]:
            self._generator.remove(uid)
            key, seq = self._sequences.pop(uid)
            out += [(key, o) for o in self._finish(seq, "cancelled")]
        if not self._sequences:
            return out
        prompts, responses = self._generator.next()
        for progress in prompts:
            if progress.uid in self._sequences:
                self._sequences[progress.uid][1].reused = progress.cached_tokens or 0
        for response in responses:
            if response.uid not in self._sequences:
                continue
            key, seq = self._sequences[response.uid]
            seq.first_at = seq.first_at or time.perf_counter()
            ended = response.finish_reason is not None
            token = response.token
            if token is not None and int(token) not in self._eos:
                seq.new_tokens += 1
                seq.detokenizer.add_token(int(token))
            if ended:
                seq.detokenizer.finalize()
            outputs = seq.parser.feed(seq.detokenizer.last_segment)
            reason = None
            if seq.parser.stopped:
                reason = "stop_string"
                if not ended:
                    self._generator.remove(response.uid)
            elif ended:
                reason = response.finish_reason
            out += [(key, o) for o in outputs]
            if reason:
                del self._sequences[response.uid]
                out += [(key, o) for o in self._finish(seq, reason)]
        return out

    def _finish(self, seq: Sequence, reason: str) -> list:
        return seq.parser.end(
            reason,
            started=seq.started,
            first_at=seq.first_at,
            prompt_tokens=seq.prompt_tokens,
            new_tokens=seq.new_tokens,
            reused_prefix_tokens=seq.reused,
            images=seq.images,
            image_tokens=seq.image_tokens,
        )
