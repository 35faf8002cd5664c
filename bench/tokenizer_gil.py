"""What a prompt's encode costs beside a busy thread: transformers' `encode` (the Rust
`encode_batch`, which lets the GIL go and must take it back) against the Rust tokenizer's
single `encode` (which keeps it), as the MLX engine's `TextEncoder` uses.

    .venv/bin/python bench/tokenizer_gil.py [--source SRC] [--repeats 200]

Printed: the tokenizers and transformers versions, whether the engine's `TextEncoder` takes
the single encode for this tokenizer (its probe gives transformers' ids), and the median ms
of each, alone and beside a thread running Python without pause.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from common import SMOLLM2
from mlx_lm.tokenizer_utils import load

from engines.mlx.encode import TextEncoder
from engines.sources.resolve import resolve_source

TEXT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    + "Tell me about the history of Paris in a few sentences. " * 3
    + "<|im_end|>\n<|im_start|>assistant\n"
)


def median_ms(encode, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        encode(TEXT)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=SMOLLM2)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    tokenizer = load(resolve_source("bench", args.source))
    import tokenizers
    import transformers

    print(f"tokenizers {tokenizers.__version__}, transformers {transformers.__version__}")
    print(f"TextEncoder keeps the GIL (uses the single encode): {TextEncoder(tokenizer).holds_gil}")
    backend = tokenizer.backend_tokenizer
    sides = {
        "transformers encode": lambda t: tokenizer.encode(t, add_special_tokens=False),
        "Rust single encode": lambda t: backend.encode(t, add_special_tokens=False).ids,
    }
    running = True

    def spin() -> None:
        while running:
            pass

    alone = {name: median_ms(f, args.repeats) for name, f in sides.items()}
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        busy = {name: median_ms(f, args.repeats) for name, f in sides.items()}
    finally:
        running = False
        spinner.join()
    for name in sides:
        print(f"{name}: {alone[name]:.3f} ms alone, {busy[name]:.3f} ms beside a busy thread")


if __name__ == "__main__":
    main()
