"""Log-probabilities as they travel: what a request asks for (`LogprobsRequest`) and what an
engine returns for each token or for the prompt (`Logprobs`, one output of the stream)."""

from __future__ import annotations

import msgspec


class LogprobsRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Log-probabilities to report: of each chosen token, with its `top` alternatives."""

    top: int = 0
    prompt: bool = False  # the prompt's own tokens too (completions' `echo`)


class TopLogprob(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    bytes: list[int]
    logprob: float


class TokenLogprob(msgspec.Struct, frozen=True, kw_only=True):
    """One token and the model's log-probability of it (None: the prompt's first token)."""

    token: str
    bytes: list[int]
    logprob: float | None
    top: list[TopLogprob] = []


class Logprobs(msgspec.Struct, frozen=True, kw_only=True, tag="logprobs"):
    """Log-probabilities of generated tokens (or, with `prompt`, of the prompt's tokens)."""

    tokens: list[TokenLogprob]
    prompt: bool = False
