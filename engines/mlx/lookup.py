"""Prompt-lookup drafts: the tokens that followed the sequence's last n-gram where it occurred
before, in the prompt or the answer so far, and how many of them to propose.

Editing code, rewriting a document or answering about a pasted file copies long spans of
the prompt into the answer: the continuation of an earlier occurrence of the last few
tokens is then a good guess of the next ones, found with a dictionary look-up and no
second model. The model verifies every guess (engines/llm/speculate.py), so a wrong one
costs compute, never correctness.
"""

from __future__ import annotations

# A sequence whose drafts were all refused this many times in a row rests from drafting,
# for twice as many steps each time again (up to MAX_REST): free chat rarely copies, and a
# draft nobody accepts costs a wider forward pass for nothing.
MISSES_BEFORE_REST = 2
MAX_REST = 32
# The weight of the latest verification in a sequence's moving acceptance rate, the rate a
# sequence starts from, and how far it drifts back there each step it does not draft.
RATE_WEIGHT = 0.3
PRIOR_RATE = 0.6  # above MIN_EXPECTED: a one-token draft can earn its way back
RECOVERY = 0.05
# A sequence drafts only when it expects to keep this many tokens (rate x draft length).
MIN_EXPECTED = 0.5


class PromptLookup:
    """One sequence's history (prompt, then answer) and its n-gram index.

    The index maps each n-gram to where its latest occurrence ends: the draft is what
    followed. While a draft is being accepted the look-up keeps following the same earlier
    span (`_follow`), so a long copy does not jump to another occurrence of a common n-gram.
    """

    def __init__(self, history: list[int], ngram: int) -> None:
        self.history = list(history)
        self._n = ngram
        self._index: dict[tuple[int, ...], int] = {}
        self._heads: set[tuple[int, ...]] = set()  # the first n - 1 tokens of indexed n-grams
        self._indexed = ngram  # positions below this have their preceding n-gram indexed
        # The span being copied: (length of the history when it was proposed, where it began).
        self._follow: tuple[int, int] | None = None

    def extend(self, tokens: list[int]) -> None:
        """Tokens the sequence now holds after its history."""
        self.history += tokens

    def draft(self, limit: int) -> list[int]:
        """Up to `limit` tokens proposed to follow the history (none: no earlier occurrence)."""
        history, n = self.history, self._n
        end = len(history)
        if limit <= 0 or end <= n:
            return []
        start = self._followed(end)
        if start is None:
            self._index_to(end)
            start = self._index.get(tuple(history[end - n :]))
        if start is None:
            self._follow = None
            return []
        self._follow = (end, start)
        return history[start : start + limit]

    def may_draft(self) -> bool:
        """Whether a draft can follow the next token, whatever it is: the span being copied
        still agrees, or the last n - 1 tokens begin an n-gram seen before. (Knowing the
        next token means waiting for it; a sequence that cannot draft stays pipelined.)"""
        history, n = self.history, self._n
        end = len(history)
        if end < n:
            return False
        if self._follow is not None:
            then, start = self._follow
            if history[start : start + end - then] == history[then:end]:
                return True
        self._index_to(end)
        return tuple(history[end - n + 1 :]) in self._heads

    def _index_to(self, end: int) -> None:
        """Index every n-gram whose continuation is known (it ends before position `end`)."""
        history, n = self.history, self._n
        for j in range(self._indexed, end):
            gram = tuple(history[j - n : j])
            self._index[gram] = j
            self._heads.add(gram[:-1])
        self._indexed = max(self._indexed, end)

    def _followed(self, end: int) -> int | None:
        """Where the span copied last continues, if everything since went as it said."""
        if self._follow is None:
            return None
        then, start = self._follow
        grown = end - then
        same = self.history[start : start + grown] == self.history[then:end]
        return start + grown if same and start + grown < end else None


class Drafting:
    """What every sequence's drafter keeps whatever proposes its drafts: the draft length,
    the counts, and the bar a draft must clear (`MIN_EXPECTED`) to be worth a wait."""

    def __init__(self, length: DraftLength) -> None:
        self._length = length
        self.drafted = 0
        self.accepted = 0

    @property
    def rate(self) -> float:
        """Recent acceptance: the expected share of a draft's tokens kept."""
        return self._length.rate

    def record(self, drafted: int, accepted: int) -> None:
        """A verification's outcome: `accepted` of the `drafted` tokens kept."""
        self.drafted += drafted
        self.accepted += accepted
        self._length.record(drafted, accepted)

    def _promising(self, wanted: int) -> int:
        """`wanted`, or 0 where its recent acceptance promises less than `MIN_EXPECTED` kept
        tokens; the estimate then drifts back towards its prior, so it tries again later."""
        if wanted and self.rate * wanted < MIN_EXPECTED:
            self._length.recover()
            return 0
        return wanted


class Drafter(Drafting):
    """One sequence's prompt-lookup drafting: its look-up, its draft length and its counts.

    The history grows by what the sequence emits (`extend`, from `Sequence.take`); the
    token sampled but not emitted yet is passed to `propose` as `pending`.
    """

    def __init__(self, prompt: list[int], tokens: int, ngram: int) -> None:
        super().__init__(DraftLength(tokens, cheap=True))
        self._lookup = PromptLookup(prompt, ngram)

    def extend(self, tokens: list[int]) -> None:
        self._lookup.extend(tokens)

    def wanted(self) -> int:
        """How many tokens this sequence would draft after its next one (0: none this step:
        it rests, nothing seen before can follow, or too little of it is expected to be kept).

        Finding out what to draft means waiting for the next token, which stalls the
        pipelined step: a sequence that promises too little does not wait."""
        wanted = self._length.wanted()
        if not wanted or not self._lookup.may_draft():
            return 0
        return self._promising(wanted)

    def propose(self, limit: int, pending: int) -> list[int]:
        """Up to `limit` tokens to follow the history and `pending`."""
        if limit <= 0:
            return []
        history = self._lookup.history
        history.append(pending)
        try:
            return self._lookup.draft(limit)
        finally:
            history.pop()


class DraftLength:
    """How many tokens one sequence drafts next, from its recent acceptance.

    Where a drafted token costs a pass of a draft model, every draft accepted whole grows
    the length by one (up to `most`) and a partly accepted one shrinks it to what was
    accepted plus one. Where it costs only a position in the verifying pass (`cheap`: prompt
    lookup), a draft accepted whole goes back to `most` and a partly accepted one shrinks to
    no less than half of `most`: a copied span is kept whole or refused at its first token
    far more often than cut in the middle, and on 2 CPU cores a pass of 1 + 6 positions
    costs about 1.5 passes of one, so the one-token drafts of the shrunk length spent a pass
    each on what a longer draft would have kept in one (bench/RESULTS.md, "why code edit").
    Drafts refused outright `MISSES_BEFORE_REST` times in a row make the sequence rest from
    drafting, longer each time it happens again.
    """

    def __init__(self, most: int, cheap: bool = False) -> None:
        self._most = most
        self._cheap = cheap
        self.length = most
        self._misses = 0
        self._rest = 0  # steps left without drafting
        self._rest_next = 1  # the rest the next streak of misses earns
        self.rate = PRIOR_RATE  # moving average of the share of drafted tokens accepted

    def wanted(self) -> int:
        """The draft length for this step (0 while resting)."""
        if self._rest:
            self._rest -= 1
            return 0
        return self.length

    def recover(self) -> None:
        """A step not drafted for lack of promise: the estimate drifts back to the prior."""
        self.rate += RECOVERY * (PRIOR_RATE - self.rate)

    def record(self, drafted: int, accepted: int) -> None:
        """A verification's outcome: `accepted` of `drafted` tokens kept."""
        if drafted == 0:
            return
        self.rate += RATE_WEIGHT * (accepted / drafted - self.rate)
        if accepted == drafted:
            self.length = self._most if self._cheap else min(self._most, self.length + 1)
        else:
            self.length = max(self._most // 2 if self._cheap else 1, accepted + 1)
        if accepted:
            self._misses, self._rest_next = 0, 1
            return
        self._misses += 1
        if self._misses >= MISSES_BEFORE_REST:
            self._misses, self._rest = 0, self._rest_next
            self._rest_next = min(MAX_REST, self._rest_next * 2)
