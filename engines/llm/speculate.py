"""Speculative decoding, alone (`Solo`) and inside a batch, with prompt-lookup drafts or a
draft model's.

A step feeds the current token and up to K drafted ones (engines/mlx/lookup.py, or
engines/mlx/draft_model.py) through
the model in one forward pass, samples each position with the request's own sampler and
logits processors, and keeps the drafted tokens up to the first one the sample disagrees
with, plus the sample there. The draft is a deterministic proposal, so this is exactly
speculative rejection sampling: a drafted token is kept with the probability the model
gives it, and on a refusal the token drawn is distributed as the model's distribution with
the drafted token's mass removed. Greedy output is that of plain decoding; sampled output
is distributed as plain decoding's (a seeded request draws other numbers from its key).

Rejected positions leave the KV cache: trimmed alone; in a batch, where each row keeps its
own count, trimmed by the fewest and rolled right by the rest, the roll that mlx-lm's
prefill uses to right-align a padded batch (`BatchKVCache.finalize`).
"""

from __future__ import annotations

from engines.mlx.draft_model import ModelDrafter
from engines.mlx.grammar import MaskProcessor
from engines.mlx.lookup import Drafter
from engines.mlx.sampling import is_greedy
from schemas.config import ModelConfig

# Token positions one batched verification may feed (rows x (1 + draft)): the batch's
# drafts shorten as it fills and stop past it. On 2 CPU cores a forward pass of 8 x 7
# tokens took ~2x one of 8 x 1 tokens, and 1 x 7 ~1.5x one of 1 x 1 (SmolLM2); with 32
# positions 8 streams of copying tasks decoded at 0.91x plain (bench/RESULTS.md).
BATCH_POSITIONS_CPU = 16
BATCH_POSITIONS_GPU = 256
# A batch drafts only when the tokens it expects to keep (each row's draft length times its
# recent acceptance) make up this many per row: the rows without a draft pay for it too.
MIN_KEPT_PER_ROW = 0.5
# Speculative steps between returns of MLX's freed buffers (drafts vary the shapes).
CLEAR_CACHE_EVERY = 256


def make_drafter(config: ModelConfig, draft_model, job) -> Drafter | ModelDrafter | None:
    """The request's drafter: prompt lookup (`speculation`), the draft model (`draft`, loaded
    as `draft_model`), or None where neither is set or a draft cannot compose.

    A grammar's mask (constrained decoding) cannot: llguidance's matcher advances by each
    token it is shown and cannot be shown drafted tokens the model may then refuse. Such a
    request decodes plainly, and its output is exactly what it would be without drafts.
    Penalties and logit bias are functions of the tokens so far: they compose.
    """
    if any(isinstance(p, MaskProcessor) for p in job.logits_processors):
        return None
    if config.speculation is not None:
        return Drafter(job.prompt, config.speculation.tokens, config.speculation.ngram)
    if draft_model is not None:
        return ModelDrafter(draft_model, job.prompt, config.draft.tokens)
    return None


def batch_positions(device: str) -> int:
    """The token positions a batched verification may feed on this platform."""
    return BATCH_POSITIONS_CPU if device == "cpu" else BATCH_POSITIONS_GPU


def verify_alone(model, cache, fed: list[int], context, inputs: list[int], processors, sampler):
    """Feed `inputs` (the current token, then the draft) to a lone sequence's `cache`, which
    holds `fed`; return the tokens kept, the next token (sampled, its forward pass not run:
    a (1,) array) and the tokens the processors have seen (`Solo._context`)."""
    import mlx.core as mx
    from mlx_lm.models.cache import trim_prompt_cache

    x = mx.array(inputs, dtype=mx.uint32)
    logits = model(x[None], cache=cache)[0]
    if processors:
        base = context if context is not None else mx.array(fed, dtype=mx.uint32)
        context = mx.concatenate([base, x])
        logits = _processed(logits, processors, context, base.size, len(inputs))
    sampled = _sample_rows(sampler, logits)
    targets = sampled.tolist()
    n = _agreed(targets, inputs[1:])
    trim_prompt_cache(cache, len(inputs) - 1 - n)
    if processors:
        context = context[: base.size + n + 1]
    return inputs[: n + 1], sampled[n : n + 1], context


class BatchDrafting:
    """Drafts (prompt lookup's or a draft model's) for the sequences of mlx-lm's
    `BatchGenerator`, verified together.

    It works on the generator's `GenerationBatch` between its steps, as its own `_step`
    does: the token in flight (`_next_tokens`), the batched KV cache, the per-row token
    lists, processors' token buffers, counts and stop matchers. A step it declines (no
    drafts, a prompt being prefilled, a batch too wide, acceptance too low) is the
    generator's own.
    """

    def __init__(self, positions: int) -> None:
        self._positions = positions
        self._steps = 0

    def next(self, generator, drafter_of) -> list | None:
        """The generation responses of one drafted step, or None to take a plain one;
        `drafter_of(uid)` gives a sequence's drafter (None: it does not draft)."""
        import mlx.core as mx

        batch = generator._generation_batch
        rows = len(batch)
        if not rows or generator._unprocessed_sequences or len(generator._prompt_batch):
            return None
        most = self._positions // rows - 1
        if most < 1 or batch._next_tokens is None or not _rolls(batch.prompt_cache):
            return None
        drafters = [drafter_of(uid) for uid in batch.uids]
        wants = [min(most, d.wanted()) if d is not None else 0 for d in drafters]
        # The same bar before waiting for the tokens (the longest drafts possible) as after.
        if _expected(drafters, wants) < MIN_KEPT_PER_ROW * rows:
            return None
        with mx.stream(generator.stream):
            current = batch._next_tokens.tolist()
            drafts = [
                d.propose(min(w, batch.max_tokens[b] - batch._num_tokens[b] - 1), current[b])
                if w
                else []
                for b, (d, w) in enumerate(zip(drafters, wants, strict=True))
            ]
            if _expected(drafters, [len(x) for x in drafts]) < MIN_KEPT_PER_ROW * rows:
                return None
            self._steps += 1
            if self._steps % CLEAR_CACHE_EVERY == 0:
                mx.clear_cache()
            return self._verify(batch, current, drafts, drafters)

    def _verify(self, batch, current: list[int], drafts: list[list[int]], drafters) -> list:
        import mlx.core as mx

        k = max(len(x) for x in drafts)
        rows = [[c, *x, *[c] * (k - len(x))] for c, x in zip(current, drafts, strict=True)]
        inputs = mx.array(rows, dtype=mx.uint32)
        logits = batch.model(inputs, cache=batch.prompt_cache)
        starts = {}
        if any(batch.logits_processors):
            processed = []
            for b, processors in enumerate(batch.logits_processors):
                if not processors:
                    processed.append(logits[b])
                    continue
                buffer = batch._token_context[b]
                starts[b] = buffer._size
                context = buffer.update_and_fetch(inputs[b])
                # A row without a drafter (a grammar's mask) is shown its current token only.
                span = k + 1 if drafters[b] is not None else 1
                processed.append(_processed(logits[b], processors, context, starts[b], span))
            logits = mx.stack(processed)
        sampled = _sample_batch(batch, logits)
        targets = sampled.tolist()
        kept = [_agreed(t, x) for t, x in zip(targets, drafts, strict=True)]
        _drop_rejected(batch.prompt_cache, [k - n for n in kept])
        for b, n in enumerate(kept):
            batch.tokens[b].extend(rows[b][: n + 1])
            if b in starts:  # the processors' buffer forgets the rejected positions
                batch._token_context[b]._size = starts[b] + n + 1
            if drafts[b]:
                drafters[b].record(len(drafts[b]), n)
        before = batch._next_logprobs
        batch._next_tokens = sampled[mx.arange(len(rows)), mx.array(kept)]
        batch._next_logprobs = [_normalized(logits[b, n]) for b, n in enumerate(kept)]
        return _responses(batch, rows, kept, before, logits)


def _responses(batch, rows, kept, before, logits) -> list:
    """Each row's kept tokens as the generator's responses, its end where one ends it; each
    with its log-softmax (`before`: the current tokens'), computed only where it is read."""
    response = type(batch).Response
    out, keep = [], []
    for b, uid in enumerate(batch.uids):
        reason = None
        for i, token in enumerate(rows[b][: kept[b] + 1]):
            row = before[b] if i == 0 else _normalized(logits[b, i - 1])
            batch._num_tokens[b] += 1
            if batch._num_tokens[b] >= batch.max_tokens[b]:
                reason = "length"
            if batch._matchers[b].advance(token):
                reason = "stop"
            if reason:
                cache, tokens = batch.extract_cache(b), batch.tokens[b]
                out.append(response(uid, token, row, reason, cache, tokens))
                break
            out.append(response(uid, token, row, None, None, None))
        if reason is None:
            keep.append(b)
    if len(keep) < len(batch.uids):
        batch.filter(keep)
    return out


def _processed(logits, processors, context, start: int, span: int):
    """Each of the first `span` rows of `logits` (positions) through `processors`, shown the
    tokens up to its own position (`context[: start + i + 1]`); later rows as they are."""
    import mlx.core as mx

    rows = []
    for i in range(logits.shape[0]):
        row = logits[i : i + 1]
        if i < span:
            for processor in processors:
                row = processor(context[: start + i + 1], row)
        rows.append(row)
    return mx.concatenate(rows)


def _normalized(logits):
    """Log-softmax of one row (lazy: only a row that is read costs its normalization)."""
    import mlx.core as mx

    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def _sample_rows(sampler, logits):
    """Every row of `logits` sampled; the arg-max needs no normalization over the vocabulary
    (on a small model the vocabulary is a fifth of the weights: a draft's positions add up)."""
    import mlx.core as mx

    if is_greedy(sampler):
        return mx.argmax(logits, axis=-1).astype(mx.uint32)
    return sampler(_normalized(logits))


def _sample_batch(batch, logits):
    """Every position of every row with its row's sampler: one call when they share one."""
    import mlx.core as mx

    rows, width, vocab = logits.shape
    samplers = [batch.fallback_sampler if s is None else s for s in batch.samplers or [None]]
    if all(s is samplers[0] for s in samplers):
        return _sample_rows(samplers[0], logits.reshape(rows * width, vocab)).reshape(rows, width)
    return mx.stack([_sample_rows(s, logits[b]) for b, s in enumerate(samplers)])


def _expected(drafters, lengths: list[int]) -> float:
    """The draft tokens a step expects to keep: each row's length times its recent rate."""
    return sum(d.rate * n for d, n in zip(drafters, lengths, strict=True) if n)


def _agreed(targets: list[int], draft: list[int]) -> int:
    """How many drafted tokens the samples agree with, from the first."""
    n = 0
    while n < len(draft) and targets[n] == draft[n]:
        n += 1
    return n


def _rolls(cache) -> bool:
    """Whether every layer's cache can drop a different number of positions per row."""
    from mlx_lm.models.cache import BatchKVCache

    return all(type(c) is BatchKVCache for c in cache)


def _drop_rejected(cache, rejected: list[int]) -> None:
    """Remove each row's last `rejected[b]` positions from the batched KV cache."""
    import mlx.core as mx

    fewest = min(rejected)
    rest = [r - fewest for r in rejected]
    for layer in cache:
        if fewest:
            layer.trim(fewest)
        if any(rest):
            layer._right_padding = mx.array(rest)
            layer.finalize()
