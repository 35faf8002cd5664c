"""Log-probabilities in the canonical shape: of each chosen token, its top alternatives, and
(for completions' `echo`) of the prompt's own tokens."""

from __future__ import annotations

from collections.abc import Callable

from schemas.logprobs import Logprobs, TokenLogprob, TopLogprob

# How a token id reads: its bytes (a token may hold part of a UTF-8 character).
Piece = Callable[[int], bytes]


def _entry(piece: Piece, token: int, logprob: float | None) -> dict:
    raw = piece(token)
    return {"token": raw.decode("utf-8", errors="replace"), "bytes": list(raw), "logprob": logprob}


def token_logprob(row, token: int, top: int, piece: Piece) -> TokenLogprob:
    """The chosen `token`'s log-probability in `row` (log-softmax over the vocabulary) and
    the `top` most likely tokens, most likely first."""
    import mlx.core as mx

    alternatives = []
    if top:
        ids = mx.argpartition(-row, top - 1)[:top]
        values = row[ids]
        ranked = sorted(zip(ids.tolist(), values.tolist(), strict=True), key=lambda p: -p[1])
        alternatives = [TopLogprob(**_entry(piece, i, v)) for i, v in ranked]
    return TokenLogprob(**_entry(piece, token, row[token].item()), top=alternatives)


def logprobs_of(row, token: int, top: int, piece: Piece) -> Logprobs:
    """One generated token's logprobs as an output of its own."""
    return Logprobs(tokens=[token_logprob(row, token, top, piece)])


def prompt_logprobs(model, prompt: list[int], top: int, piece: Piece) -> list[TokenLogprob]:
    """Each prompt token's log-probability given the tokens before it (the first has none):
    one forward pass over the prompt, as loglikelihood evaluation needs."""
    import mlx.core as mx

    logits = model(mx.array(prompt)[None])[0].astype(mx.float32)
    rows = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    mx.eval(rows)
    out = [TokenLogprob(**_entry(piece, prompt[0], None))]
    for i, token in enumerate(prompt[1:]):
        out.append(token_logprob(rows[i], token, top, piece))
    return out
