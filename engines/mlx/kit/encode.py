"""Text to token ids without letting go of the GIL.

transformers' `encode` runs the Rust tokenizer's `encode_batch`, which releases the GIL;
taking it back waits for the thread holding it to let go, up to a switch interval (5 ms)
when that thread is busy. On the model thread that thread is the event loop, busy exactly
when requests arrive: on the 2-core CPU a 60-token prompt took 0.14 ms alone and 5.6 ms
beside a thread running Python. The same Rust tokenizer's single `encode` keeps the GIL:
0.19 ms beside it. Used wherever it gives transformers' ids (checked at
load on a probe with special tokens); otherwise transformers' `encode` is kept.
"""

from __future__ import annotations

PROBE = "Hello, world!  Ünïcödé 1234\n\tindented\n"


class TextEncoder:
    def __init__(self, tokenizer) -> None:
        """`tokenizer`: mlx-lm's wrapper (or a transformers tokenizer)."""
        self._tokenizer = tokenizer
        self._backend = None
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None and _same_ids(tokenizer, backend):
            self._backend = backend

    @property
    def holds_gil(self) -> bool:
        return self._backend is not None

    def __call__(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=add_special_tokens).ids
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens)


def _same_ids(tokenizer, backend) -> bool:
    specials = [t for t in (tokenizer.bos_token, tokenizer.eos_token) if isinstance(t, str)]
    probe = "".join(specials) + PROBE + "".join(reversed(specials))
    try:
        return all(
            backend.encode(probe, add_special_tokens=special).ids
            == list(tokenizer.encode(probe, add_special_tokens=special))
            for special in (True, False)
        )
    except Exception:  # a backend that cannot take these arguments: keep transformers'
        return False
