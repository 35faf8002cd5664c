"""A request's repetition penalties and logit bias as mlx-lm logits processors.

mlx-lm's processors (`make_logits_processors`) see every token the sequence's cache holds:
the prompt, then the answer. The penalties here count the answer's tokens alone (the last
`repeat_last_n` of them), as OpenAI's `frequency_penalty` and `presence_penalty` do: a
chat template's own tokens, or the words of a question, are not made less likely in its
answer. Each sequence of a batch carries its own processors, so batch-mates are unaffected.
"""

from __future__ import annotations

from collections.abc import Callable

from engines.errors import BadRequest
from schemas.canonical import Sampling

LogitsProcessor = Callable[..., object]


def make_penalties(
    sampling: Sampling, prompt_tokens: int, window: int, vocab_size: int
) -> list[LogitsProcessor]:
    """The processors of `sampling`'s penalties and bias for a sequence whose prompt is
    `prompt_tokens` long in a `window`; none when it asks for neither (greedy answers stay
    those of plain decoding). A biased token id outside the vocabulary is a 400."""
    if not sampling.penalised:
        return []
    from mlx_lm.sample_utils import make_logits_processors

    outside = [t for t in sampling.logit_bias if not 0 <= t < vocab_size]
    if outside:
        raise BadRequest(
            f"logit_bias: token id {outside[0]} is not in the model's vocabulary "
            f"(0 to {vocab_size - 1})"
        )
    processors = []
    if sampling.logit_bias:
        processors += make_logits_processors(logit_bias=sampling.logit_bias)
    last_n = window if sampling.repeat_last_n < 0 else sampling.repeat_last_n
    if last_n > 0:
        penalties = make_logits_processors(
            repetition_penalty=None if sampling.repeat_penalty == 1.0 else sampling.repeat_penalty,
            repetition_context_size=last_n,
            presence_penalty=sampling.presence_penalty or None,
            presence_context_size=last_n,
            frequency_penalty=sampling.frequency_penalty or None,
            frequency_context_size=last_n,
        )
        processors += [_on_answer(p, prompt_tokens) for p in penalties]
    return processors


def _on_answer(processor: LogitsProcessor, prompt_tokens: int) -> LogitsProcessor:
    """`processor` shown the tokens after the prompt only (its length is known on the host:
    slicing waits for no computation)."""

    def answer_only(tokens, logits):
        return processor(tokens[prompt_tokens:], logits)

    return answer_only
