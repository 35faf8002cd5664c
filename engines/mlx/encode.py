"""Text to token ids, keeping the GIL (or, asked to, on a thread of the encoder's own).

transformers' `encode` runs the Rust tokenizer's `encode_batch`, which releases the GIL;
taking it back waits for the thread holding it to let go, up to a switch interval (5 ms)
when that thread is busy. On the model thread that thread is the event loop, busy exactly
when requests arrive: on the 2-core CPU a 60-token prompt took 0.14 ms alone and 5.6 ms
beside a thread running Python. The same Rust tokenizer's single `encode` keeps the GIL:
0.19 ms beside it. Used wherever it gives transformers' ids (checked at
load on a probe with special tokens); otherwise transformers' `encode` is kept.

`aside=True` encodes on a thread of the encoder's own. The model's thread, right after a
burst, is a slow place to encode: on an H200, after 128 streams of a 1B model, its next
prompt took 3.7-4.0 ms of that thread's CPU (0.4-0.5 ms on a model that had served no burst,
the same tokenizer code), and 0.59 ms on a thread of its own (bench/RESULTS.md, 2026-12-02,
the timeline's thread CPU times). What the burst leaves behind belongs to the thread that
ran it; its C heap is part of it (`malloc_trim` at the burst's end took back 1.7 of the 3.6
ms). The hop costs a wake and the GIL back, so the engine asks for it only where the burst's
after-effect lands: the first prompt of an idle batch.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

PROBE = "Hello, world!  Ünïcödé 1234\n\tindented\n"


class TextEncoder:
    def __init__(self, tokenizer) -> None:
        """`tokenizer`: mlx-lm's wrapper (or a transformers tokenizer)."""
        self._tokenizer = tokenizer
        self._backend = None
        self._aside: ThreadPoolExecutor | None = None  # started by the first `aside` call
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None and _same_ids(tokenizer, backend):
            self._backend = backend

    @property
    def holds_gil(self) -> bool:
        return self._backend is not None

    def __call__(
        self, text: str, *, add_special_tokens: bool = True, aside: bool = False
    ) -> list[int]:
        """`aside`: on the encoder's own thread (the caller waits, the GIL let go)."""
        if aside:
            if self._aside is None:
                self._aside = ThreadPoolExecutor(1, thread_name_prefix="tokenizer")
            return self._aside.submit(self._encode, text, add_special_tokens).result()
        return self._encode(text, add_special_tokens)

    def _encode(self, text: str, add_special_tokens: bool) -> list[int]:
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=add_special_tokens).ids
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def close(self) -> None:
        """The aside thread goes (the model unloads); a later `aside` call starts another."""
        if self._aside is not None:
            self._aside.shutdown(wait=False)
            self._aside = None


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
