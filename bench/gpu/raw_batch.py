"""Raw mlx-lm continuous batching (BatchGenerator, as gpu/mlx_cuda_batch.py drives it) on a model
directory, answering one JSON line per JSON line, so bench_gateway.py can interleave it with the
gateway on the same prompts:

    python3 bench/gpu/raw_batch.py MODEL_DIR PRODUCT_DIR [--stored]
    in:  {"clients": 8, "max_tokens": 128, "round": 0, "prefill": 8}
    out: {"tokens": ..., "wall": ..., "aggregate": ..., "ttft": ...}

Prompts: the product's bench/concurrency.py prompt(round, client), rendered with the chat
template and encoded without a second BOS, as the gateway encodes them (the encoding is done
before the clock starts). prefill: BatchGenerator's prefill_batch_size (capped at the client
count); completion_batch_size is the client count, so every client decodes at once.
Stop tokens are the tokenizer's end-of-sequence ids, as in the gateway.
"""

from __future__ import annotations

import json
import sys
import time


def encoder(tokenizer):
    """Messages -> token ids: the chat template, encoded without a second BOS (as the gateway)."""

    def encode(messages):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer.encode(text, add_special_tokens=False)

    return encode


def decode_batch(model, eos: list[int], prompts: list[list[int]], max_tokens: int, prefill: int):
    """Every prompt through one BatchGenerator, all decoding at once; the clock runs from
    `insert` to the last token."""
    from mlx_lm.generate import BatchGenerator

    n = len(prompts)
    gen = BatchGenerator(
        model,
        stop_tokens=[[t] for t in eos],
        completion_batch_size=n,
        prefill_batch_size=prefill,
    )
    started = time.perf_counter()
    gen.insert(prompts, max_tokens=[max_tokens] * n)
    tokens, first = 0, None
    while True:
        responses = gen.next_generated()
        if not responses:
            break
        first = first or time.perf_counter()
        tokens += sum(1 for r in responses if r.token not in eos)
    wall = time.perf_counter() - started
    gen.close()
    return {
        "tokens": tokens,
        "wall": wall,
        "aggregate": tokens / wall,
        "ttft": (first or started) - started,
        "prompt_tokens": [len(p) for p in prompts][:4],
        "prefill_batch_size": prefill,
    }


def load_held(model_dir: str, stored: bool = False):
    """The model and tokenizer, and how the weights are held: raw at its best, as the
    gateway's platform path holds them (on CUDA, bfloat16: MLX's 4-bit kernels do not
    batch), unless `stored` asks for them as the file holds them. Needs the product on
    sys.path."""
    from engines.mlx.load import load_as_platform
    from engines.mlx.platform import detect

    return load_as_platform(model_dir, detect(), stored=stored)


def main() -> None:
    import mlx.core as mx

    model_dir, product = sys.argv[1], sys.argv[2]
    sys.path.insert(0, f"{product}/bench")
    sys.path.insert(0, product)
    from concurrency import prompt  # the product's own prompts

    model, tokenizer, held = load_held(model_dir, stored="--stored" in sys.argv)
    eos = sorted(tokenizer.eos_token_ids)
    ready = {"ready": True, "eos": eos, "device": str(mx.default_device()), "weights": held}
    print(json.dumps(ready), flush=True)
    encode = encoder(tokenizer)
    for line in sys.stdin:
        job = json.loads(line)
        n, max_tokens, round_ = job["clients"], job["max_tokens"], job["round"]
        prefill = min(int(job.get("prefill") or n), n)
        prompts = [encode(prompt(round_, i)) for i in range(n)]
        print(json.dumps(decode_batch(model, eos, prompts, max_tokens, prefill)), flush=True)


if __name__ == "__main__":
    main()
