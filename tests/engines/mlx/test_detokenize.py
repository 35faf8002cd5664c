"""The batch's detokenizer hands out, token by token, exactly the text mlx-lm's
`BPEStreamingDetokenizer` does, on the real SmolLM2 tokenizer: real text, every kind of
token in random order (pieces of characters, lone spaces, added tokens), ids past the
vocabulary."""

from __future__ import annotations

import random

import pytest
from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer

from engines.mlx.detokenize import ByteDetokenizer, byte_detokenizer

TEXTS = [
    " The capital of France is Paris.",
    "  leading spaces, tabs\tand\nnew lines\n\n  x",
    "Ünïcödé, 日本語, emoji 🙂🧪 and ✓ — «quotes»",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "def f(x):\n    return {'a': [1, 2, 3]}  # code",
]


def segments(detokenizer, tokens: list[int]) -> list[str]:
    """What a sequence reads after each token, then after `finalize`, then the whole text."""
    out = []
    for token in tokens:
        detokenizer.add_token(token)
        out.append(detokenizer.last_segment)
    detokenizer.finalize()
    return [*out, detokenizer.last_segment, detokenizer.text]


def both(smollm2_tokenizer) -> tuple[BPEStreamingDetokenizer, ByteDetokenizer]:
    theirs = smollm2_tokenizer.detokenizer
    ours = byte_detokenizer(theirs)
    assert isinstance(theirs, BPEStreamingDetokenizer) and isinstance(ours, ByteDetokenizer)
    return theirs, ours


@pytest.mark.parametrize("text", TEXTS)
def test_real_text_reads_as_mlx_lm_reads_it(smollm2_tokenizer, text):
    tokens = smollm2_tokenizer.encode(text, add_special_tokens=False)
    theirs, ours = both(smollm2_tokenizer)
    assert segments(ours.fresh(), tokens) == segments(theirs, tokens)
    assert segments(ours.fresh(), tokens)[-1] == text.removeprefix(" ")


def test_any_tokens_in_any_order_read_as_mlx_lm_reads_them(smollm2_tokenizer):
    theirs, ours = both(smollm2_tokenizer)
    vocabulary = len(theirs.tokenmap)
    # The tokens most likely to differ: bytes of a character, lone and double spaces.
    pieces = [i for i, t in enumerate(theirs.tokenmap) if len(t) == 1]
    rng = random.Random(7)
    for _ in range(200):
        tokens = [
            rng.choice(pieces) if rng.random() < 0.5 else rng.randrange(vocabulary)
            for _ in range(rng.randrange(1, 40))
        ]
        if rng.random() < 0.1:
            tokens.insert(rng.randrange(len(tokens)), vocabulary + 3)  # a padded id
        theirs.reset()
        assert segments(ours.fresh(), tokens) == segments(theirs, tokens), tokens


def test_a_detokenizer_starts_empty_after_reset(smollm2_tokenizer):
    _, ours = both(smollm2_tokenizer)
    one = ours.fresh()
    segments(one, smollm2_tokenizer.encode(" once", add_special_tokens=False))
    one.reset()
    assert one.text == "" and one.tokens == [] and one.last_segment == ""
    assert (
        segments(one, smollm2_tokenizer.encode(" again", add_special_tokens=False))[-1] == "again"
    )


def test_other_detokenizers_are_left_to_mlx_lm():
    from mlx_lm.tokenizer_utils import NaiveStreamingDetokenizer

    assert byte_detokenizer(object.__new__(NaiveStreamingDetokenizer)) is None
