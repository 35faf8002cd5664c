"""Continuous batching of a vision model on mlx-vlm's `BatchGenerator`.

The model's thread owns the generator, as mlx-vlm's own server does: each admitted request
is preprocessed (`prepare_inputs`), its images are encoded into input embeddings
(`get_input_embeddings`) and it is inserted; one forward pass then decodes every sequence.
The generator draws all rows with one sampler, so each request's own sampling settings run
as its logits processor: it draws the request's token and leaves only that one possible.
Prefix reuse is mlx-vlm's block cache (APC), salted with the hash of the request's pictures
so that a different picture never shares a block past the text before it; with the disk
tier, its blocks are also written to and read from disk (engines/vision/disk.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from engines.batch import Step
from engines.mlx.sequence import Sequence, cancelled_uids
from engines.vision.disk import block_cache
from schemas.canonical import ChatRequest

APC_BLOCK_TOKENS = 16


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
        from mlx_vlm.generate import BatchGenerator

        self._engine = engine
        self._model = model
        self._processor = processor
        slots = config.session_slots if config.prefix_reuse else 0
        blocks = slots * window // APC_BLOCK_TOKENS
        self._disk = engine.disk if blocks else None  # the disk tier under APC (None: off)
        apc = block_cache(blocks, APC_BLOCK_TOKENS, self._disk) if blocks else None
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
        # A prompt's ids and APC salt until its reuse is known: whether it came from disk.
        self._prompts: dict[int, tuple[list[int], int]] = {}

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
        salt = -min(inputs.keys, default=0) if inputs.images else 0
        kwargs["_apc_semantic_hash"] = salt
        (uid,) = self._generator.insert(
            [inputs.ids],
            max_tokens=[max_tokens],
            prompt_kwargs=[kwargs],
            logits_processors=[[drawn_by(sampler)]],
        )
        if self._disk is not None:
            self._prompts[uid] = (inputs.ids, salt)
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
        for uid in cancelled_uids(self._sequences):
            self._generator.remove(uid)
            self._prompts.pop(uid, None)
            key, seq = self._sequences.pop(uid)
            out += [(key, o) for o in seq.finish("cancelled")]
        if not self._sequences:
            return out
        prompts, responses = self._generator.next()
        for progress in prompts:
            if progress.uid in self._sequences:
                seq = self._sequences[progress.uid][1]
                seq.reused = progress.cached_tokens or 0
                self._from_disk(seq)
        for response in responses:
            if response.uid not in self._sequences:
                continue
            key, seq = self._sequences[response.uid]
            token = None if response.token is None else int(response.token)
            outputs, reason = seq.take(token, response.finish_reason, self._eos)
            if reason == "stop_string" and response.finish_reason is None:
                self._generator.remove(response.uid)
            out += [(key, o) for o in outputs]
            if reason:
                del self._sequences[response.uid]
                out += [(key, o) for o in seq.finish(reason)]
                self._ended(seq)
        return out

    def _from_disk(self, seq: Sequence) -> None:
        """Whether the prompt's reused tokens were read from disk, told once per prompt."""
        if self._disk is None or seq.uid not in self._prompts or not seq.reused:
            return
        ids, salt = self._prompts.pop(seq.uid)
        read = self._disk.taken(ids, salt, seq.reused)
        if read is not None:
            seq.reused_disk, seq.disk_load_s = read

    def _ended(self, seq: Sequence) -> None:
        """The disk tier learns this machine's prefill rate from each prompt prefilled."""
        if self._disk is None:
            return
        self._prompts.pop(seq.uid, None)
        if seq.first_at is not None:
            prefill_s = seq.first_at - seq.started - seq.disk_load_s
            self._disk.worth.prefilled(seq.prompt_tokens - seq.reused, prefill_s)
        if not self._sequences:
            self._disk.forget_reads()
