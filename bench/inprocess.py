"""The in-process reference: `mlx_lm.stream_generate` (or, with `"loop": "generate_step"` in a
job, mlx-lm's bare `generate_step` without a detokenizer) on the model the gateway serves.

Run by `bench/single_stream.py` as a subprocess with the gateway's platform environment
(OpenBLAS preloaded) and the gateway's own load recipe (`resolve_source`, then
`engines.mlx.load.load_as_platform`: 4-bit weights expanded to float32 on the CPU, to
bfloat16 on CUDA),
so the two sides differ only by what the gateway adds. It loads once, then answers one JSON
line per JSON line on stdin: {"messages": [...], "max_tokens": N, "loop": ...} -> timings
and the engine's counts. Issue 32 takes the faster of the two loops as the reference.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    import mlx.core as mx
    import mlx_lm
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler

    from engines.mlx.load import load_as_platform
    from engines.mlx.platform import detect
    from engines.sources.resolve import resolve_source

    source = sys.argv[1]
    platform = detect()
    path = resolve_source("reference", source)
    model, tokenizer, _ = load_as_platform(path, platform)
    greedy = make_sampler(temp=0.0)
    print(json.dumps({"ready": True, "platform": platform.as_dict()}), flush=True)

    for line in sys.stdin:
        job = json.loads(line)
        started = time.perf_counter()
        # The gateway's encoding: the chat template as text, then tokens without a second BOS.
        text = tokenizer.apply_chat_template(
            job["messages"], add_generation_prompt=True, tokenize=False
        )
        prompt = tokenizer.encode(text, add_special_tokens=False)
        first = last = None
        new_tokens, out = 0, []
        if job.get("loop") == "generate_step":
            tokens = []
            for token, _ in generate_step(
                mx.array(prompt), model, max_tokens=job["max_tokens"], sampler=greedy
            ):
                now = time.perf_counter()
                first = first or now
                last = now
                tokens.append(int(token))
                if token in tokenizer.eos_token_ids:
                    break
            new_tokens = len(tokens)
            out = [tokenizer.decode([t for t in tokens if t not in tokenizer.eos_token_ids])]
        else:
            for response in mlx_lm.stream_generate(
                model, tokenizer, mx.array(prompt), max_tokens=job["max_tokens"], sampler=greedy
            ):
                now = time.perf_counter()
                first = first or now
                last = now
                new_tokens = response.generation_tokens
                out.append(response.text)
        print(
            json.dumps(
                {
                    "started": started,
                    "first": first,
                    "last": last,
                    "ended": time.perf_counter(),
                    "prompt_tokens": len(prompt),
                    "new_tokens": new_tokens,
                    "text": "".join(out),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
