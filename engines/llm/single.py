"""One sequence decoded alone, the way `mlx_lm.generate_step` decodes it.

When a request has the model to itself, the batch generator's bookkeeping (batched KV
cache with offsets and masks, per-step filtering) costs a third of the speed on a GPU.
`Solo` runs the very loop of `generate_step` instead: the prompt prefilled in
`prefill_step_size` chunks, then each step queues the forward pass of the next token
(`mx.async_eval`) before the host reads the current one, so detokenizing and delivering a
token overlaps the accelerator's work on the next. Greedy output is that of
`stream_generate`. Its cache can join a `BatchGenerator` when a second request arrives.

With a drafter (`speculation:` or `draft:`, engines/llm/speculate.py) a step whose drafter
proposes tokens feeds them with the current one in one forward pass and keeps those the model's own
sampling agrees with; a step with no draft is the plain pipelined step.
"""

from __future__ import annotations

from engines.llm.speculate import verify_alone

# generate_step's defaults: prompt chunk size, and how often it returns freed buffers.
PREFILL_STEP_SIZE = 2048
CLEAR_CACHE_EVERY = 256


class Solo:
    """The decoding state of one sequence: its KV cache, the token in flight, the count."""

    def __init__(
        self,
        model,
        stream,
        prompt: list[int],
        cache: list | None,
        cached_tokens: list[int],
        job,
        drafter=None,
    ) -> None:
        """`job` is the engine's `Prepared` request: budget, sampler, logits processors;
        `drafter` the sequence's drafter (None: no speculation)."""
        from mlx_lm.models.cache import make_prompt_cache

        self._model = model
        self._stream = stream
        self._prompt = prompt  # what the cache does not hold yet
        self.cache = cache if cache is not None else make_prompt_cache(model)
        # Every token the cache holds, in order (the prefix trie parks the cache under them).
        self.fed: list[int] = list(cached_tokens)
        self.job = job
        self.max_tokens = job.max_tokens
        self._sampler = job.sampler
        self._processors = list(job.logits_processors)
        self._context = None  # the tokens logits processors see, grown step by step
        self._next = None  # the sampled token whose forward pass has not run yet
        self.emitted = 0
        self._drafter = drafter

    @property
    def started(self) -> bool:
        return self._next is not None

    def advance(self) -> int:
        """The next token; the forward pass of the one after it is already queued."""
        import mlx.core as mx

        with mx.stream(self._stream):
            if self._next is None:
                self._next = self._prefill()
            current = self._next
            if self.emitted + 1 < self.max_tokens:
                self._next = self._step(current)
                mx.async_eval(self._next)
            mx.eval(current)  # waits for this token only (GIL released), not the queued one
            token = current.item()
        if self.emitted + 1 < self.max_tokens:
            self.fed.append(token)  # its forward pass is queued: the cache will hold it
        self.emitted += 1
        if self.emitted % CLEAR_CACHE_EVERY == 0:
            mx.clear_cache()
        return token

    def advance_run(self) -> list[int]:
        """The next tokens: one, or the current one and the draft tokens verified with it."""
        import mlx.core as mx

        drafter = self._drafter
        wanted = drafter.wanted() if drafter is not None and self._next is not None else 0
        if not wanted:  # the plain step, pipelined: nothing waits for the current token
            return [self.advance()]
        room = self.max_tokens - self.emitted - 1  # the current token takes one
        with mx.stream(self._stream):  # a draft model runs on the decoding stream too
            current = self._next.item()
            draft = drafter.propose(min(room, wanted), current)
        if not draft:
            return [self.advance()]
        with mx.stream(self._stream):
            kept, self._next, self._context = verify_alone(
                self._model,
                self.cache,
                self.fed,
                self._context,
                [current, *draft],
                self._processors,
                self._sampler,
            )
        drafter.record(len(draft), len(kept) - 1)
        self.fed += kept
        self.emitted += len(kept)
        if self.emitted // CLEAR_CACHE_EVERY > (self.emitted - len(kept)) // CLEAR_CACHE_EVERY:
            mx.clear_cache()
        return kept

    def pending(self) -> int:
        """The token sampled but not yet returned (its forward pass is still to run)."""
        return self._next.item()

    def _prefill(self):
        """All but the last prompt token through the model in chunks, then the first sample."""
        import mlx.core as mx

        prompt = self._prompt
        while len(prompt) > 1:
            chunk = prompt[: min(PREFILL_STEP_SIZE, len(prompt) - 1)]
            self._model(mx.array(chunk)[None], cache=self.cache)
            mx.eval([c.state for c in self.cache])
            self.fed += chunk
            prompt = prompt[len(chunk) :]
            mx.clear_cache()
        first = self._step(mx.array(prompt))
        self.fed += prompt
        mx.async_eval(first)
        return first

    def _step(self, tokens):
        """One forward pass over `tokens` (1-D), processors, log-softmax, sample: a (1,) array."""
        import mlx.core as mx

        logits = self._model(tokens.reshape(1, -1), cache=self.cache)[:, -1, :]
        if self._processors:
            # As the batch generator: the context is every token the cache holds, this one too.
            tokens = tokens.reshape(-1).astype(mx.uint32)
            if self._context is None:
                self._context = mx.array(self.fed, dtype=mx.uint32)
            self._context = mx.concatenate([self._context, tokens])
            for processor in self._processors:
                logits = processor(self._context, logits)
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        return self._sampler(logprobs)
