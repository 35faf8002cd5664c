"""Drafts from a draft model (`draft: {model, tokens}`): the tokens a smaller model of the
same vocabulary decodes greedily after the sequence so far, one sequence at a time.

Each sequence keeps its own KV cache of the draft model, parked beside the model's own when
the conversation ends (engines/llm/batch.py) so that its next turn prefills only what is new.
A proposal first brings that cache in line with the sequence (drops the positions of drafted
tokens the target refused, feeds what the sequence emitted since), then decodes up to `limit`
tokens by arg-max. The draft is a deterministic proposal, as a prompt look-up's is: the
verification in engines/llm/speculate.py keeps greedy output that of plain decoding and
sampled output distributed as plain decoding's. The draft length and the back-off are prompt
lookup's (`DraftLength`).
"""

from __future__ import annotations

from engines.mlx.cache.prefix import shared_prefix
from engines.mlx.lookup import Drafting, DraftLength

# The draft model's prompt goes through it in chunks of this many tokens (generate_step's).
PREFILL_STEP_SIZE = 2048


class ModelDrafter(Drafting):
    """One sequence's drafting with a draft model: its history, the draft model's cache of
    it, its draft length and its counts (the interface of `lookup.Drafter`)."""

    def __init__(self, model, prompt: list[int], tokens: int) -> None:
        from mlx_lm.models.cache import make_prompt_cache

        super().__init__(DraftLength(tokens))
        self._model = model
        self._history = list(prompt)
        self._cache = make_prompt_cache(model)
        self._fed: list[int] = []  # the tokens the draft model's cache holds, in order

    def resume(self, cache: list, fed: list[int]) -> None:
        """Start from a draft cache of an earlier conversation that holds `fed`, a prefix of
        this one's prompt (a parked session's): only the rest is prefilled."""
        self._cache, self._fed = cache, list(fed)

    @property
    def parked(self) -> tuple[list[int], list]:
        """The tokens the draft model's cache holds, and the cache: what a finished sequence
        parks for the next turn of its conversation."""
        return self._fed, self._cache

    def extend(self, tokens: list[int]) -> None:
        self._history += tokens

    def wanted(self) -> int:
        """How many tokens this sequence would draft after its next one (0: it rests, or too
        little of a draft is expected to be kept to pay for the draft model's passes)."""
        return self._promising(self._length.wanted())

    def propose(self, limit: int, pending: int) -> list[int]:
        """Up to `limit` tokens the draft model decodes after the history and `pending`."""
        import mlx.core as mx
        from mlx_lm.models.cache import trim_prompt_cache

        if limit <= 0:
            return []
        target = [*self._history, pending]
        same = shared_prefix(self._fed, target)
        same = min(same, len(target) - 1)  # the last token goes through the model now
        trim_prompt_cache(self._cache, len(self._fed) - same)
        feed = target[same:]
        while len(feed) > PREFILL_STEP_SIZE:  # a long prompt's first draft
            self._model(mx.array(feed[:PREFILL_STEP_SIZE])[None], cache=self._cache)
            mx.eval([c.state for c in self._cache])
            feed = feed[PREFILL_STEP_SIZE:]
        token = self._next(mx.array(feed))
        drafted = [token]
        for _ in range(limit - 1):
            token = self._next(token)
            drafted.append(token)
        draft = mx.concatenate(drafted).tolist()
        self._fed = target + draft[:-1]  # the last drafted token has not been fed
        return draft

    def _next(self, tokens):
        """The draft model's arg-max after `tokens` (1-D), fed to its cache: a (1,) array."""
        import mlx.core as mx

        logits = self._model(tokens[None], cache=self._cache)[:, -1, :]
        return mx.argmax(logits, axis=-1).astype(mx.uint32)
