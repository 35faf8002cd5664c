"""The penalties and bias of engines/mlx/penalties.py on a tiny logits vector."""

from __future__ import annotations

import mlx.core as mx
import pytest

from engines.errors import BadRequest
from engines.mlx.penalties import make_penalties
from schemas.canonical import Sampling

PROMPT = [3, 3, 3]  # the prompt's tokens are never penalised


def run(sampling: Sampling, answer: list[int], logits: list[float]) -> list[float]:
    tokens = mx.array(PROMPT + answer, dtype=mx.uint32)
    out = mx.array([logits])
    for processor in make_penalties(sampling, len(PROMPT), window=100, vocab_size=len(logits)):
        out = processor(tokens, out)
    return [round(v, 4) for v in out[0].tolist()]


LOGITS = [2.0, -2.0, 1.0, 4.0]


def test_no_penalty_means_no_processor():
    assert make_penalties(Sampling(), 3, 100, 4) == []
    assert make_penalties(Sampling(repeat_penalty=1.5, repeat_last_n=0), 3, 100, 4) == []


def test_repeat_penalty_divides_positive_and_multiplies_negative_logits_of_used_tokens():
    got = run(Sampling(repeat_penalty=2.0), [0, 1, 0], LOGITS)
    assert got == [1.0, -4.0, 1.0, 4.0]  # token 3 is only in the prompt: untouched


def test_presence_counts_once_and_frequency_per_use():
    assert run(Sampling(presence_penalty=0.5), [0, 0, 2], LOGITS) == [1.5, -2.0, 0.5, 4.0]
    assert run(Sampling(frequency_penalty=0.5), [0, 0, 2], LOGITS) == [1.0, -2.0, 0.5, 4.0]


def test_repeat_last_n_bounds_the_look_back_to_the_answers_latest_tokens():
    assert run(Sampling(frequency_penalty=1.0, repeat_last_n=2), [0, 2, 2], LOGITS) == [
        2.0,
        -2.0,
        -1.0,
        4.0,
    ]
    # -1: the whole window.
    assert run(Sampling(frequency_penalty=1.0, repeat_last_n=-1), [0, 2, 2], LOGITS)[0] == 1.0


def test_nothing_is_penalised_before_the_answer_starts():
    assert run(Sampling(repeat_penalty=2.0, frequency_penalty=1.0), [], LOGITS) == LOGITS


def test_logit_bias_adds_to_its_tokens_every_step():
    assert run(Sampling(logit_bias={1: 5.0, 3: -100.0}), [], LOGITS) == [2.0, 3.0, 1.0, -96.0]


def test_a_biased_token_outside_the_vocabulary_is_refused_by_name():
    with pytest.raises(BadRequest, match=r"logit_bias: token id 9 "):
        make_penalties(Sampling(logit_bias={9: 1.0}), 3, 100, 4)
