"""Prompts are encoded by the Rust tokenizer's single `encode` (it keeps the GIL; transformers'
`encode` releases it and then waits for the event loop to give it back), to the same ids
transformers gives, on the real SmolLM2 tokenizer."""

from __future__ import annotations

import threading

import pytest

from engines.mlx.encode import TextEncoder

TEXTS = [
    "",
    "The capital of France is",
    "  leading spaces, tabs\tand\nnew lines\n\n",
    "Ünïcödé, 日本語, emoji 🙂 and a split surrogate-free string ✓",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "def f(x):\n    return {'a': [1, 2, 3]}  # code",
]


@pytest.mark.parametrize("special", [True, False])
def test_the_rust_tokenizer_encodes_to_transformers_ids(smollm2_tokenizer, special):
    encode = TextEncoder(smollm2_tokenizer)
    assert encode.holds_gil
    for text in TEXTS:
        assert encode(text, add_special_tokens=special) == smollm2_tokenizer.encode(
            text, add_special_tokens=special
        ), text


def test_a_backend_that_disagrees_is_not_used(smollm2_tokenizer):
    class Shifted:
        """A backend whose ids are not transformers' (as a slow or patched tokenizer's)."""

        def encode(self, text, add_special_tokens=True):
            ids = smollm2_tokenizer.backend_tokenizer.encode(
                text, add_special_tokens=add_special_tokens
            )
            return type("Encoding", (), {"ids": [i + 1 for i in ids.ids]})()

    class Patched:
        backend_tokenizer = Shifted()

        def __getattr__(self, name):
            return getattr(smollm2_tokenizer, name)

    encode = TextEncoder(Patched())
    assert not encode.holds_gil
    assert encode("hello there") == smollm2_tokenizer.encode("hello there")


def test_aside_encodes_the_same_ids_on_a_thread_of_its_own_until_closed(smollm2_tokenizer):
    encode = TextEncoder(smollm2_tokenizer)
    before = set(threading.enumerate())
    for text in TEXTS:
        assert encode(text, aside=True) == encode(text)
    (thread,) = set(threading.enumerate()) - before
    assert thread.name.startswith("tokenizer")
    encode.close()
    thread.join(5)
    assert not thread.is_alive()
    assert encode(TEXTS[1], aside=True) == encode(TEXTS[1])  # a later call starts another
    encode.close()
